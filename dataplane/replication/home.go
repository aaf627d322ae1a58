package replication

import (
	"errors"
	"fmt"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
)

// A filter's home (or, under a placed membership, each partition's) is decided by the membership
// the operator pushed, and by nothing else: no pod stands in for a home on its own. The epoch of
// the membership is the fencing token. A home applies a check-and-set under the membership it
// holds, which cannot change meanwhile (Node.fence), and its add carries that epoch
// (peer.Op.HomeEpoch). A pod that holds an epoch at least that one, under which the sender is not
// the home of the values, refuses the add (peer.Fenced): since a false waits for a quorum of the
// owners, a home that a newer epoch demoted, once a quorum has taken it, can answer no false.

// ErrNotHome refuses a check-and-set on a pod that is not, at the moment it would apply it, the
// home of its values under the membership it holds.
var ErrNotHome = errors.New("not the home")

// ErrLeaseLapsed refuses the answer of a check-and-set applied while this pod's lease as a home
// was not held (Options.HomeLease).
var ErrLeaseLapsed = errors.New("lease lapsed")

// ServeAsHome runs apply, the check-and-set of keys of f on this pod, as their home, and answers
// the epoch it ran under, which the keys' add carries to the peers. This pod must be their home
// under the membership it holds, which does not change until apply has returned; and once apply
// has returned, after the filter answered, its lease must be held (Options.HomeLease): not when
// the request arrived, so that one that waited through a pause meets the lease as it is now. A
// pod without peers is the home of everything. Errors are ErrNotHome (apply did not run) and
// ErrLeaseLapsed (its answer must not be given).
func (n *Node) ServeAsHome(f *filter.Filter, keys []string, apply func()) (epoch uint64, err error) {
	n.fence.RLock()
	epoch = n.members.Epoch()
	if err := n.refuseAsHome(f, keys, epoch); err != nil {
		n.fence.RUnlock()
		return 0, err
	}
	apply()
	n.fence.RUnlock()
	if !n.LeaseHeld() {
		return 0, fmt.Errorf("%w: this pod's lease as the home of %q was not held when it applied the check-and-set", ErrLeaseLapsed, f.Name())
	}
	return epoch, nil
}

// refuseAsHome answers why this pod must not serve the check-and-set of keys of f as their home
// under the membership of epoch, held, or nil. n.fence is held (read).
func (n *Node) refuseAsHome(f *filter.Filter, keys []string, epoch uint64) error {
	if !n.Replicating() {
		return nil
	}
	if who, ok := n.homeOf(f, keys, n.members.Self()); !ok {
		return fmt.Errorf("%w: under membership epoch %d the home of these values of %q is %s, not this pod", ErrNotHome, epoch, f.Name(), who)
	}
	if n.standIn.pending.Load() {
		if why := n.standingIn(f, keys); why != "" {
			return fmt.Errorf("%w yet: %s", ErrNotHome, why)
		}
	}
	return nil
}

// homeOf reports whether who is the home of every key's partition of f under the membership held,
// and otherwise names the home of the first key it is not the home of ("none" without members).
func (n *Node) homeOf(f *filter.Filter, keys []string, who string) (string, bool) {
	if !n.Placed() {
		order, _ := n.members.HomeOrder(f.Name())
		if len(order) == 0 {
			return "none", false
		}
		return order[0].Name, order[0].Name == who
	}
	rt := n.Route(f.Name(), f.Partitions())
	for _, k := range keys {
		if home := rt.Readers(f.PartitionOf(k))[0]; home != who {
			return home, false
		}
	}
	return who, true
}

// fences reports whether this pod refuses op, a home's add: it holds a membership of op's epoch
// or later under which op's sender is not the home of its keys. n.fence is held (read).
func (n *Node) fences(op peer.Op) bool {
	if op.HomeEpoch == 0 || n.members.Epoch() < op.HomeEpoch {
		return false // not a home's add, or sent under a membership this pod has not been told yet
	}
	f, ok := n.opts.Store.Lookup(op.Name)
	if !ok || f.Generation() != op.Generation {
		return false // nothing to fence: the add does not apply here (see applyAdds)
	}
	_, home := n.homeOf(f, op.AllKeys(), op.Home)
	return !home
}
