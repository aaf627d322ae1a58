package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The operator moves a pod's partitions to their next owner only once the pod's home lease has
// lapsed (docs/replication.md#the-homes-lease). Lapsed means: the Lease has not changed for its
// duration × (1 + wire.LeaseDriftBound), measured on the operator's monotonic clock from when
// the operator first saw its current version. Never renewTime against the operator's wall
// clock: renewTime is the pod's wall clock, which may be set minutes apart from the operator's
// or stepped by NTP, and the difference of two machines' wall clocks is bounded by nothing. A
// duration measured on one machine's monotonic clock is off by its rate alone, which the drift
// bound covers; and the operator sees a renewal only after the pod sent it, so its count starts
// later than the pod's and ends later too.
//
// A lapsed lease is revoked first (holderIdentity emptied, wire.LeaseRevokedAnnotation naming the
// epoch about to start), by an update from the version the operator saw: if the pod renewed in
// between, the update conflicts and nothing moves. Only then does the next epoch leave the pod
// out of the members; it stays an owner (planPlacement keeps the owners that are away), so the
// quorums over the owners do not change. A revoked pod that answers the operator again is a
// member again in a later epoch, which lets it take its lease back.

// leaseClock remembers, for each Lease, its version and when the operator first saw it.
type leaseClock struct {
	mu   sync.Mutex
	seen map[types.UID]leaseSeen
}

type leaseSeen struct {
	version string
	at      time.Time
}

// observe records l's version at now unless it was seen already, and returns when its current
// version was first seen.
func (lc *leaseClock) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.seen == nil {
		lc.seen = map[types.UID]leaseSeen{}
	}
	s, ok := lc.seen[l.UID]
	if !ok || s.version != l.ResourceVersion {
		s = leaseSeen{version: l.ResourceVersion, at: now}
		lc.seen[l.UID] = s
	}
	return s.at
}

func (lc *leaseClock) forget(l *coordinationv1.Lease) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	delete(lc.seen, l.UID)
}

// homeLeaseState is what a Lease says of its pod.
type homeLeaseState int

const (
	// leaseUnclaimed: no holder and no revocation; the pod has not taken it yet (it is starting,
	// or runs a data plane without leases). It does not keep the pod out.
	leaseUnclaimed homeLeaseState = iota
	// leaseHeld: a holder; the lease lapses unless renewed.
	leaseHeld
	// leaseRevoked: the operator revoked it; the pod stays out until it answers again.
	leaseRevoked
)

func stateOf(l *coordinationv1.Lease) homeLeaseState {
	switch {
	case l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "":
		return leaseHeld
	case l.Annotations[wire.LeaseRevokedAnnotation] != "":
		return leaseRevoked
	}
	return leaseUnclaimed
}

// leaseDuration is the duration a lease's holder claims (the pod writes its own at each
// renewal), or the spec's when it claims none; the longer of the two, so that a lease renewed
// under a longer duration than the spec now asks is not taken for lapsed early.
func leaseDuration(l *coordinationv1.Lease, c *bloomeryv1alpha1.BloomCluster) time.Duration {
	d := c.HomeLease()
	if s := l.Spec.LeaseDurationSeconds; s != nil {
		d = max(d, time.Duration(*s)*time.Second)
	}
	return d
}

// lapse says whether a lease seen first at seen has lapsed at now, and if not, how long until it
// does.
func lapse(seen, now time.Time, duration time.Duration) (lapsed bool, left time.Duration) {
	left = wire.LeaseLapsedAfter(duration) - now.Sub(seen)
	return left <= 0, left
}

// fenceHomes leaves out of members (and targets) the pods whose lease lapsed, which it revokes,
// and those whose lease is revoked and that do not answer. wake is how soon a held lease may
// lapse (0: none may).
func (r *BloomClusterReconciler) fenceHomes(ctx context.Context, st *clusterState,
	members []bloomeryv1alpha1.ClusterMember, targets []memberPod) (_ []bloomeryv1alpha1.ClusterMember, _ []memberPod, wake time.Duration, err error) {
	c := st.cluster
	if c.HomeLease() == 0 {
		return members, targets, 0, nil
	}
	leases, err := r.homeLeases(ctx, c)
	if err != nil {
		return nil, nil, 0, err
	}
	now := r.now()
	var keptMembers []bloomeryv1alpha1.ClusterMember
	var keptTargets []memberPod
	var readmitted []string
	for i, m := range members {
		keep := true
		if l, ok := leases[m.Pod]; ok {
			switch stateOf(l) {
			case leaseHeld:
				seen, d := r.leaseClock.observe(l, now), leaseDuration(l, c)
				lapsed, left := lapse(seen, now, d)
				if !lapsed {
					wake = minPositive(wake, left)
					// On this process's clock, not r.now(), which tests may set apart.
					targets[i].quick, targets[i].leaseLapses = overdue(seen, now, d), time.Now().Add(left)
					break
				}
				revoked, err := r.revokeHomeLease(ctx, c, l, now)
				if err != nil {
					return nil, nil, 0, err
				}
				keep = !revoked
			case leaseRevoked:
				targets[i].quick = true
				keep = r.answers(ctx, targets[i])
				if keep {
					readmitted = append(readmitted, m.Pod)
				}
			case leaseUnclaimed:
			}
		}
		if keep {
			keptMembers = append(keptMembers, m)
			keptTargets = append(keptTargets, targets[i])
		}
	}
	if len(readmitted) > 0 {
		st.notApplied = append(st.notApplied, degradation{ReasonHomeLeaseNotTaken, fmt.Sprintf(
			"pods %s answer the operator but have not taken back their home lease since it was revoked, so they serve no partition as home: "+
				"see their log (the lease's renewals) and whether they reach the API server", strings.Join(readmitted, ", "))})
	}
	return keptMembers, keptTargets, wake, nil
}

// homeLeases are the cluster's Leases by name.
func (r *BloomClusterReconciler) homeLeases(ctx context.Context, c *bloomeryv1alpha1.BloomCluster) (map[string]*coordinationv1.Lease, error) {
	var list coordinationv1.LeaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c.Name))); err != nil {
		return nil, fmt.Errorf("listing the Leases of BloomCluster %s: %w", c.Name, err)
	}
	leases := make(map[string]*coordinationv1.Lease, len(list.Items))
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], c) {
			leases[list.Items[i].Name] = &list.Items[i]
		}
	}
	return leases, nil
}

// revokeHomeLease revokes a lapsed lease for the epoch after status.membershipEpoch, from the
// version the operator saw. revoked is false when the lease changed since (the pod renewed it):
// the pod then stays.
func (r *BloomClusterReconciler) revokeHomeLease(ctx context.Context, c *bloomeryv1alpha1.BloomCluster,
	l *coordinationv1.Lease, now time.Time) (revoked bool, err error) {
	epoch := c.Status.MembershipEpoch + 1
	holder := *l.Spec.HolderIdentity
	silent := now.Sub(r.leaseClock.observe(l, now))
	revoke := l.DeepCopy()
	revoke.Spec.HolderIdentity = nil
	if revoke.Annotations == nil {
		revoke.Annotations = map[string]string{}
	}
	revoke.Annotations[wire.LeaseRevokedAnnotation] = strconv.FormatInt(epoch, 10)
	switch err := r.Client.Update(ctx, revoke); {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		log.FromContext(ctx).Info("Home lease changed while the operator revoked it; the pod stays home", "lease", l.Name)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("revoking the home lease %s: %w", l.Name, err)
	}
	log.FromContext(ctx).Info("Revoked a lapsed home lease: its pod leaves the members, its partitions go to their next owners",
		"lease", l.Name, "holder", holder, "unchangedFor", silent.String(), "leaseDuration", leaseDuration(l, c).String(),
		"driftBound", wire.LeaseDriftBound, "forEpoch", epoch)
	r.event(c, revoke, corev1.EventTypeWarning, ReasonHomeLeaseRevoked, "Revoke",
		"Pod %s did not renew its home lease for %s: revoked, and its partitions are served by their next owners from membership epoch %d",
		l.Name, silent.Round(time.Millisecond), epoch)
	return true, nil
}

// overdue reports whether a lease seen first at seen has missed a renewal at now: its pod renews
// every third of the duration, so half of it without a change means one renewal at least did not
// reach the API server.
func overdue(seen, now time.Time, duration time.Duration) bool {
	return now.Sub(seen) > duration/2
}

// readmitProbeTimeout bounds the question to a revoked pod whether it is back (answers). Every
// pass asks it, the one right after the revocation that pushes the epoch without it included, so
// the question waits for a frozen pod no longer than this; a pod that is back answers a read of
// its membership in milliseconds, and one that does not is asked again next pass.
const readmitProbeTimeout = 250 * time.Millisecond

// answers reports whether a pod's API answers the operator (a revoked pod that is back).
func (r *BloomClusterReconciler) answers(ctx context.Context, t memberPod) bool {
	ctx, cancel := context.WithTimeout(ctx, readmitProbeTimeout)
	defer cancel()
	_, err := r.dataPlane().GetMembership(ctx, t.addr)
	return err == nil
}

func (r *BloomClusterReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	return min(a, b)
}

// observeLeases is a predicate of the Lease watch that starts the clock of each new version as
// soon as the watch delivers it, and lets through only the changes of holder: a renewal needs no
// pass, since a pass computes when the next lapse may come (fenceHomes's wake).
func (r *BloomClusterReconciler) observeLeases() predicate.Funcs {
	observe := func(o any) {
		if l, ok := o.(*coordinationv1.Lease); ok {
			r.leaseClock.observe(l, r.now())
		}
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { observe(e.Object); return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			observe(e.ObjectNew)
			old, okOld := e.ObjectOld.(*coordinationv1.Lease)
			l, ok := e.ObjectNew.(*coordinationv1.Lease)
			return !okOld || !ok || stateOf(old) != stateOf(l)
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			if l, ok := e.Object.(*coordinationv1.Lease); ok {
				r.leaseClock.forget(l)
			}
			return true
		},
	}
}
