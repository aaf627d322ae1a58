package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A pod that becomes the home of values under a new epoch (it was not their home under the
// membership it held before) is a stand-in: the home before may have answered false for values it
// lacks. It serves their check-and-sets only once it has merged what a quorum of their owners
// holds, each of those owners holding the new epoch already, so that it refuses the old home's
// writes from then on (Node.fences): a false the old home answered was held by a quorum of the
// owners, which meets that quorum, and no false can be answered under the old epoch once the
// owners it needs have taken the new one. Until then the stand-in answers those check-and-sets
// 503 code 13 (ErrNotHome). The merge is the catch-up's repair (Repair) from each peer that
// answers with an epoch at least the new one; a peer behind it is asked again, as the operator
// tells every member.
//
// The quorums counted are those of the membership before and of the new one, each over the
// owners of its placement (every partition's R owners are a subset of them, so counting at most
// R - quorum(R) owners unreached leaves a quorum of every partition's owners). A pod told its
// first membership since it started (it restarted, or joins) does not know what it served
// before: it stands in for every value it is home of, unless the epoch is 1, under which no pod
// can have served as another's home.

// standIn is the stand-in's state: pending while it has not merged from the quorums it owes.
type standIn struct {
	pending atomic.Bool // read on every check-and-set; the rest under mu

	mu    sync.Mutex
	epoch uint64
	// owed are the memberships before the new one, whose homes the stand-in may replace; all
	// says that it stands in for every value it is home of.
	owed    []wire.Membership
	all     bool
	current wire.Membership
	reached map[string]bool
	cancel  context.CancelFunc
}

// standInRetry is how long a stand-in waits before it asks again the peers that were behind its
// epoch or did not answer.
const standInRetry = 100 * time.Millisecond

// planStandIn makes this pod a stand-in, if the change from before to m makes it one, and starts
// its merges. first says that m is the first membership the pod is told since it started. It is
// called with n.fence held (write), so that no check-and-set is served under m before the stand-in
// is pending.
func (n *Node) planStandIn(before, m wire.Membership, first bool) {
	if !first && before.Epoch == m.Epoch {
		return // the same membership, told again
	}
	st := &n.standIn
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancel != nil {
		st.cancel()
		st.cancel = nil
	}
	if len(m.Members) <= 1 || (first && m.Epoch == 1 && before.Epoch == 0) {
		st.pending.Store(false)
		st.owed, st.all = nil, false
		return
	}
	if !st.pending.Load() {
		st.owed, st.all = nil, false
	}
	if before.Epoch != 0 && !slices.ContainsFunc(st.owed, func(o wire.Membership) bool { return o.Epoch == before.Epoch }) {
		st.owed = append(st.owed, before)
	}
	st.all = st.all || first
	st.epoch, st.current, st.reached = m.Epoch, m, map[string]bool{m.Self: true}
	st.pending.Store(true)
	ctx, cancel := context.WithCancel(n.ctx)
	st.cancel = cancel
	go n.standInLoop(ctx, m.Epoch)
}

// StandingIn reports whether this pod is a stand-in that has not merged from its quorums yet.
func (n *Node) StandingIn() bool { return n.standIn.pending.Load() }

// standingIn answers why this pod, the home of keys of f under the membership held, must not serve
// their check-and-set yet, or "". n.fence is held (read).
func (n *Node) standingIn(f *filter.Filter, keys []string) string {
	st := &n.standIn
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.pending.Load() {
		return ""
	}
	gained := st.all
	for _, before := range st.owed {
		if _, ok := homeUnder(before, f, keys, before.Self); !ok {
			gained = true
		}
	}
	if !gained {
		return ""
	}
	return fmt.Sprintf("this pod became the home of these values of %q under membership epoch %d and is merging them from a quorum of their owners first", f.Name(), st.epoch)
}

// homeUnder reports whether who is the home of every key's partition of f under the membership m,
// and otherwise names the home of the first key it is not the home of ("none" without members).
func homeUnder(m wire.Membership, f *filter.Filter, keys []string, who string) (string, bool) {
	if !placedMembership(m) {
		order := rendezvous(f.Name(), m.Members)
		if len(order) == 0 {
			return "none", false
		}
		return order[0].Name, order[0].Name == who
	}
	rt := newRoute(m, f.Name(), f.Partitions(), nil)
	for _, k := range keys {
		if home := rt.Readers(f.PartitionOf(k))[0]; home != who {
			return home, false
		}
	}
	return who, true
}

// standInLoop merges from the peers until the stand-in of epoch owes nothing, or ctx ends (a newer
// membership started another).
func (n *Node) standInLoop(ctx context.Context, epoch uint64) {
	start := time.Now()
	n.opts.Log.Info("Standing in as a new home: merging from a quorum of owners before serving the check-and-sets gained", "epoch", epoch)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A pod told its first membership catches up from its peers before it is ready (Run):
		// its merges come after, and find what the catch-up brought.
		if n.Ready() && n.standInRound(ctx, epoch, start) {
			return
		}
		t.Reset(standInRetry)
	}
}

// standInRound merges from each peer not reached yet that holds epoch or later, and reports whether
// the stand-in is over: it reached its quorums, or a newer membership replaced it.
func (n *Node) standInRound(ctx context.Context, epoch uint64, start time.Time) bool {
	st := &n.standIn
	merged := 0
	for _, p := range n.members.Peers() {
		st.mu.Lock()
		done := st.epoch != epoch || st.reached[p.Name]
		st.mu.Unlock()
		if done || ctx.Err() != nil {
			continue
		}
		if !n.peerHolds(ctx, p, epoch) {
			continue // behind, or unreachable: asked again
		}
		rep, err := n.Repair(ctx, p, 0)
		merged += rep.Merged
		if err != nil {
			continue
		}
		st.mu.Lock()
		if st.epoch == epoch {
			st.reached[p.Name] = true
		}
		st.mu.Unlock()
	}
	n.makeDurable(merged)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.epoch != epoch || !st.pending.Load() {
		return true
	}
	if !quorumReached(st.current, st.reached) {
		return false
	}
	for _, before := range st.owed {
		if !quorumReached(before, st.reached) {
			return false
		}
	}
	reached := make([]string, 0, len(st.reached))
	for name := range st.reached {
		reached = append(reached, name)
	}
	slices.Sort(reached)
	st.pending.Store(false)
	st.owed, st.all = nil, false
	n.opts.Log.Info("Stood in as a new home: merged from a quorum of owners; serving the check-and-sets gained", "epoch", epoch,
		"reached", strings.Join(reached, ","), "duration", time.Since(start).String())
	return true
}

// peerHolds reports whether the peer p answers that it holds a membership of epoch or later.
func (n *Node) peerHolds(ctx context.Context, p wire.Member, epoch uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	m, err := n.peer(p).Membership(ctx)
	return err == nil && m.Epoch >= epoch
}

// quorumReached reports whether reached holds a quorum of every partition's owners under m: of the
// R owners of any partition, at most R - quorum(R) are not reached.
func quorumReached(m wire.Membership, reached map[string]bool) bool {
	r := resolve(m.Placement, m.Members)
	missing := 0
	for _, o := range r.owners {
		if !reached[o] {
			missing++
		}
	}
	return missing <= r.r-wire.ConsistencyQuorum.Count(r.r)
}
