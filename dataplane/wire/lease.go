package wire

import "time"

// The home's lease (docs/replication.md#the-homes-lease): one coordination.k8s.io/v1 Lease per
// data-plane pod, named after the pod. The pod renews it; the operator revokes it once it has
// lapsed, before it moves the pod's partitions to their next owner.

// LeaseRevokedAnnotation is set by the operator on a Lease whose holderIdentity it emptied: it names the
// membership epoch the operator started without the pod. The pod takes the lease again only once
// it holds that epoch or a later one: before, it may still believe itself the home of partitions
// that another pod now serves.
const LeaseRevokedAnnotation = "bloomery.io/revoked-for-epoch"

// LeaseDriftBound bounds how much faster or slower one pod's monotonic clock runs than another's
// or the operator's, as a fraction of the time measured. The pod counts its lease held for the
// duration × (1 − LeaseDriftBound) after it sent the renewal; the operator counts it lapsed only
// the duration × (1 + LeaseDriftBound) after it saw the renewal. Clocks disciplined by NTP, or
// free-running quartz, keep within 500 ppm (0.05%); 5% leaves a hundredfold margin, for half a
// second of a 10 s lease.
const LeaseDriftBound = 0.05

// LeaseHeldFor is how long after sending a successful renewal a pod counts its lease held.
func LeaseHeldFor(duration time.Duration) time.Duration {
	return time.Duration(float64(duration) * (1 - LeaseDriftBound))
}

// LeaseLapsedAfter is how long after the operator saw a lease's last change it counts the lease
// lapsed.
func LeaseLapsedAfter(duration time.Duration) time.Duration {
	return time.Duration(float64(duration) * (1 + LeaseDriftBound))
}
