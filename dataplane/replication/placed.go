package replication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// placedState is what a placed membership adds to a node: the routes of the filters, computed
// once per epoch, and how far the pod is in the move under way.
type placedState struct {
	// on is placedMembership of the membership held.
	on     atomic.Bool
	mu     sync.Mutex
	epoch  uint64
	routes map[routeKey]*Route
	// movedEpoch is the epoch of the last move this pod finished pulling for.
	movedEpoch uint64
	movedBytes int64
	// ended is the moving membership that the membership of epoch endedBy ended, while some
	// member may still hold it (endMove); endedBy is 0 when there is none.
	ended   wire.Membership
	endedBy uint64
	// keptBy is the epoch of the membership that ended a move while some member may still
	// write to that move's writers (endMove), 0 when none: until then no partition is released.
	keptBy uint64
	// arranging serializes arrangeFilter, so that one working from an older route cannot hold a
	// partition after one working from the newer route released it.
	arranging sync.Mutex
}

type routeKey struct {
	name       string
	partitions int
}

// Placed reports whether the membership places partitions on some members only, or a move is
// under way: requests are then routed to the owners of each value's partition.
func (n *Node) Placed() bool { return n.placed.on.Load() }

// placedMembership reports whether m is served by routing: its placement leaves some member
// without some partition, or it moves from one whose owners did not each hold everything. A move
// between placements of every partition on every owner (a cluster of full replicas growing) is
// served as full replicas are: a new member catches up from the others before it is ready.
func placedMembership(m wire.Membership) bool {
	if m.Epoch == 0 || !resolve(m.Placement, m.Members).full(m.Members) {
		return m.Epoch > 0
	}
	if m.Previous == nil {
		return false
	}
	prev := resolve(*m.Previous, m.Members)
	return prev.r < len(prev.owners)
}

// Route is where the partitions of the filter live under the membership held.
func (n *Node) Route(name string, partitions int) *Route {
	epoch := n.members.Epoch() // the membership itself, a copy, is read only to compute a route
	n.placed.mu.Lock()
	defer n.placed.mu.Unlock()
	if n.placed.epoch != epoch || n.placed.routes == nil {
		n.placed.epoch, n.placed.routes = epoch, make(map[routeKey]*Route)
	}
	key := routeKey{name, partitions}
	if rt, ok := n.placed.routes[key]; ok {
		return rt
	}
	m := n.members.Get()
	var ended *wire.Membership
	if n.placed.endedBy != 0 && n.placed.endedBy == m.Epoch {
		ended = &n.placed.ended
	}
	rt := newRoute(m, name, partitions, ended)
	if m.Epoch == epoch { // else a newer membership arrived meanwhile: the next call caches its route
		n.placed.routes[key] = rt
	}
	return rt
}

// Holds is which partitions of a filter of that name and options this pod holds: all of them
// unless the membership is placed.
func (n *Node) Holds(name string, opts filter.Options) filter.Holds {
	if !n.Placed() {
		return filter.All
	}
	return n.Route(name, opts.PartitionCount()).Keeps
}

// arrange makes every filter's held partitions those its route keeps: it holds, empty, the ones
// it owns anew (a move's pull fills them), and, once no move is under way, releases the ones it
// no longer owns. Without a placed membership it holds every partition.
func (n *Node) arrange() {
	m := n.members.Get()
	n.placed.on.Store(placedMembership(m))
	n.opts.Store.Range(func(f *filter.Filter) bool {
		n.arrangeFilter(f)
		return true
	})
}

// arrangeFilter is arrange for one filter.
func (n *Node) arrangeFilter(f *filter.Filter) {
	n.placed.arranging.Lock()
	defer n.placed.arranging.Unlock()
	placed := n.Placed()
	if !placed && f.HeldPartitions() == f.Partitions() {
		return
	}
	var rt *Route
	if placed {
		rt = n.Route(f.Name(), f.Partitions())
	}
	for p := range f.Partitions() {
		keep := rt == nil || rt.Keeps(p)
		switch {
		case keep && !f.Holds(p):
			if _, err := f.Hold(p); err != nil {
				n.opts.Log.Error("Could not hold a partition placed on this pod", "filter", f.Name(), "partition", p, "error", err.Error())
			}
		case !keep && f.Holds(p) && rt.previous == nil && n.releasing():
			freed := f.Release(p)
			n.opts.Log.Info("Released a partition placed on other pods", "filter", f.Name(), "partition", p, "bytes", freed)
		}
	}
}

// merge ORs a peer's dump into the store. A merge holds the partitions the dump carries, which
// the membership may have stopped placing here while the dump was on its way: the filter is
// arranged again after it, under the membership held then.
func (n *Node) merge(st filter.State) (filter.MergeResult, error) {
	res, err := n.opts.Store.Merge(st)
	if f, ok := n.opts.Store.Lookup(st.Name); ok && n.Placed() {
		n.arrangeFilter(f)
	}
	return res, err
}

// CheckRoom reports whether this pod can hold the partitions placed on it of a new filter.
func (n *Node) CheckRoom(name string, opts filter.Options) error {
	return n.opts.Store.CheckRoom(name, opts, n.Holds(name, opts))
}

// CheckRoomEverywhere asks every member that a new filter's placement gives partitions whether
// it can hold them, this pod included, and returns the refusals, each naming its pod. A member
// that does not answer is not counted as refusing: it takes the filter when it is back, or
// reports the refusal then.
func (n *Node) CheckRoomEverywhere(ctx context.Context, name string, opts filter.Options) error {
	m := n.members.Get()
	rt := n.Route(name, opts.PartitionCount())
	batch := []peer.Op{{Kind: peer.OpCreate, Name: name, Generation: 1, Options: &opts}}
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	var mu sync.Mutex
	var refusals []string
	var wg sync.WaitGroup
	for _, member := range m.Members {
		owns := false
		for p := range opts.PartitionCount() {
			owns = owns || slices.Contains(rt.Writers(p), member.Name)
		}
		if !owns {
			continue
		}
		wg.Go(func() {
			var err error
			if member.Name == m.Self {
				err = n.CheckRoom(name, opts)
			} else if err = n.peer(member).CheckRoom(ctx, batch); !isRefusal(err) {
				err = nil
			}
			if err != nil {
				msg := err.Error()
				if peer, ok := errors.AsType[*client.Error](err); ok {
					msg = peer.Message
				}
				mu.Lock()
				refusals = append(refusals, fmt.Sprintf("pod %s: %s", member.Name, strings.TrimPrefix(msg, filter.ErrOutOfMemory.Error()+": ")))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(refusals) == 0 {
		return nil
	}
	slices.Sort(refusals)
	return fmt.Errorf("%w: not every pod placement gives partitions of %q can hold them; %s", filter.ErrOutOfMemory, name, strings.Join(refusals, "; "))
}

// isRefusal reports whether a peer answered that it cannot hold a filter (507, or 400 for a
// partition above its per-filter limit).
func isRefusal(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && (e.Status == http.StatusInsufficientStorage || e.Status == http.StatusBadRequest)
}

// PlacementStatus is this pod's view of its partitions under the membership held.
func (n *Node) PlacementStatus() wire.PlacementStatus {
	m := n.members.Get()
	st := wire.PlacementStatus{Epoch: m.Epoch}
	n.placed.mu.Lock()
	moved, movedBytes := n.placed.movedEpoch, n.placed.movedBytes
	n.placed.mu.Unlock()
	st.MovedBytes = movedBytes
	st.CaughtUp = n.Ready() && (m.Previous == nil || moved == m.Epoch)
	placed := placedMembership(m)
	n.opts.Store.Range(func(f *filter.Filter) bool {
		var rt *Route
		if placed {
			rt = n.Route(f.Name(), f.Partitions())
		}
		for p := range f.Partitions() {
			if rt != nil && rt.ownerAway(p) {
				st.PartitionsUnderReplicated++
			}
			if rt == nil || rt.Owns(p) {
				st.PartitionsOwned++
				if rt != nil && rt.Moving(p) && moved != m.Epoch {
					st.PartitionsMoving++
				}
			}
			if f.Holds(p) {
				st.PartitionsHeld++
			}
		}
		st.Bytes += f.SizeBytes()
		return true
	})
	return st
}

// A move ends with a membership of a higher epoch, which the operator pushes to every pod at once,
// so that for a moment some members hold it and some the moving one. A pod still on the moving
// membership reads a partition from its previous owners, one of which the new membership may no
// longer make an owner, while a pod on the new one would send writes to the new owners alone: a
// write acknowledged at consistency all would then be missing from that copy, and a read at one
// from it would answer false. So a pod that takes the membership ending a move keeps, until
// every member holds it, the writers of the move as writers, and its copies of their partitions:
// every copy that a member may still read holds every write. Only then do writes go to the new
// owners alone and the partitions no longer owned get released. No order of the pushes would do:
// the first pod to hold the new membership may write to a partition whose leaving owner, another
// pod, has not got it yet. A move's start needs none of this: under the moving membership writes
// go to the owners before and after it, and reads to the owners before, as under the one before.

// endingMove reports whether m ends the move of before (or replaces it with another), and, if
// so, records before as ended by m's epoch, for the routes of m to keep its writers (Route),
// before m is installed: no write under m may go to its own owners alone.
func (n *Node) endingMove(before, m wire.Membership) bool {
	if !endsMove(before, m) {
		return false
	}
	n.placed.recordEnded(before, m.Epoch)
	return true
}

// recordEnded records ended as the moving membership that the one of epoch by ended.
func (s *placedState) recordEnded(ended wire.Membership, by uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended, s.endedBy, s.keptBy = ended, by, by
}

// endsMove reports whether m ends the move of before, or replaces it with another.
func endsMove(before, m wire.Membership) bool {
	return before.Previous != nil && m.Epoch > before.Epoch && placedMembership(m)
}

// writesToEndedMove reports whether this pod, holding the membership of epoch, still writes to
// the writers of the move that membership ended.
func (n *Node) writesToEndedMove(epoch uint64) bool {
	n.placed.mu.Lock()
	defer n.placed.mu.Unlock()
	return n.placed.endedBy != 0 && n.placed.endedBy == epoch
}

// releasing reports whether arrange may release the partitions this pod no longer keeps.
func (n *Node) releasing() bool {
	n.placed.mu.Lock()
	defer n.placed.mu.Unlock()
	return n.placed.keptBy == 0
}

// endMove ends the move that m ended, in two steps. Once every member holds m's epoch, no member
// reads from the move's writers any more: writes go to m's owners alone. But each member learns
// that at its own moment, and one that has not yet still writes to those writers and counts their
// answers, so the partitions this pod no longer owns are released only once every member says it
// no longer does (wire.Membership.EndingMove), and the writes it sent before are answered. A
// newer membership ends the first wait (its routes no longer keep the writers of the move ended)
// but not the second: the copies are kept until no member writes to them.
func (n *Node) endMove(m wire.Membership) {
	err := n.awaitEpoch(n.ctx, m, func(behind string) {
		n.opts.Log.Info("Waiting for every member to hold the membership before ending the move", "epoch", m.Epoch, "behind", behind)
	})
	n.placed.mu.Lock()
	ended := err == nil && n.placed.endedBy == m.Epoch
	if ended {
		n.placed.endedBy, n.placed.routes = 0, nil // the routes computed while it was in force
	}
	n.placed.mu.Unlock()
	if ended {
		n.opts.Log.Info("Every member holds the membership that ends the move; writes go to its owners alone", "epoch", m.Epoch)
	}
	kept := func() bool {
		n.placed.mu.Lock()
		defer n.placed.mu.Unlock()
		return n.placed.keptBy == m.Epoch
	}
	err = n.awaitMembers(n.ctx, m,
		func(held wire.Membership) bool { return held.Epoch < m.Epoch || held.EndingMove },
		func() bool { return !kept() },
		func(behind string) {
			n.opts.Log.Info("Waiting for every member to stop writing to the partitions the move ended", "epoch", m.Epoch, "behind", behind)
		})
	if err != nil {
		return
	}
	select {
	case <-n.ctx.Done():
		return
	case <-time.After(n.opts.Timeout):
	}
	n.placed.mu.Lock()
	if n.placed.keptBy != m.Epoch { // a newer end of a move keeps them now
		n.placed.mu.Unlock()
		return
	}
	n.placed.keptBy = 0
	n.placed.mu.Unlock()
	n.opts.Log.Info("No member writes to the writers of the move ended any more; releasing the partitions this pod no longer owns", "epoch", m.Epoch)
	n.arrange()
}

// watchMoves runs the pull of every move the memberships start, one at a time, until ctx ends.
func (n *Node) watchMoves(ctx context.Context) {
	var started uint64
	for {
		_, changed := n.members.Known() // before Get, so that no change goes unseen
		m := n.members.Get()
		if m.Previous != nil && m.Epoch != started {
			started = m.Epoch
			n.move(ctx, m)
			continue // the membership may have changed meanwhile
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// move pulls, for the move of membership m, every partition this pod owns anew from its previous
// owners, once every member holds m's epoch (before that a pod may still send a write to the
// previous owners alone, which the pull must find there). It retries until done or ctx ends.
func (n *Node) move(ctx context.Context, m wire.Membership) {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		if n.members.Get().Epoch != m.Epoch {
			return // a newer membership took over
		}
		pulled, partitions, err := n.pullMoved(ctx, m)
		if err == nil {
			n.placed.mu.Lock()
			n.placed.movedEpoch = m.Epoch
			n.placed.mu.Unlock()
			n.makeDurable(partitions)
			n.opts.Log.Info("Pulled the partitions this pod owns anew", "epoch", m.Epoch, "partitions", partitions,
				"bytesPulled", pulled, "duration", time.Since(start).String())
			return
		}
		n.opts.Log.Warn("Move not complete; retrying", "epoch", m.Epoch, "attempt", attempt+1, "partitions", partitions, "error", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.opts.Timeout):
		}
	}
}

// pullMoved waits for every member to hold m's epoch, waits out the writes already under way,
// then OR-merges every partition this pod owns anew from each of its previous owners that
// answers: a write acknowledged at consistency=one may be on its home alone. One answering is
// enough to go on (a previous owner that does not answer is down, and what it alone held comes
// back with it through anti-entropy).
func (n *Node) pullMoved(ctx context.Context, m wire.Membership) (pulled int64, partitions int, err error) {
	err = n.awaitEpoch(ctx, m, func(behind string) {
		n.opts.Log.Info("Waiting for every member to hold the membership before pulling", "epoch", m.Epoch, "behind", behind)
	})
	if err != nil {
		return 0, 0, err
	}
	// A write routed by the previous placement just before a pod took the new one may still be
	// on its way to the previous owners; it reaches them within the replication timeout.
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(n.opts.Timeout):
	}
	var errs []error
	var filters []*filter.Filter
	n.opts.Store.Range(func(f *filter.Filter) bool {
		filters = append(filters, f)
		return true
	})
	for _, f := range filters {
		rt := n.Route(f.Name(), f.Partitions())
		for p := range f.Partitions() {
			if !rt.Moving(p) {
				continue
			}
			partitions++
			owners := rt.PreviousOwners(p)
			if len(owners) == 0 {
				n.opts.Log.Warn("No previous owner of a partition placed here anew is left to pull it from; it starts empty",
					"filter", f.Name(), "partition", p, "epoch", m.Epoch)
				continue
			}
			got := false
			for _, owner := range owners {
				size, err := n.pullPartition(ctx, rt.Member(owner), f.Name(), p)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				pulled += size
				got = true
				n.placed.mu.Lock()
				n.placed.movedBytes += size // as it goes: a long move shows its progress
				n.placed.mu.Unlock()
			}
			if !got {
				return pulled, partitions, fmt.Errorf("no previous owner of %q partition %d answered: %w", f.Name(), p, errors.Join(errs...))
			}
		}
	}
	return pulled, partitions, nil
}

// awaitEpoch waits until every member holds m's epoch or a later one, while m is the membership
// held.
func (n *Node) awaitEpoch(ctx context.Context, m wire.Membership, waiting func(behind string)) error {
	return n.awaitMembers(ctx, m,
		func(held wire.Membership) bool { return held.Epoch < m.Epoch },
		func() bool { return n.members.Get().Epoch != m.Epoch },
		waiting)
}

// awaitMembers asks every other member for its membership once a second until none is behind,
// telling waiting which are, or until over says the wait no longer matters.
func (n *Node) awaitMembers(ctx context.Context, m wire.Membership, behind func(held wire.Membership) bool, over func() bool, waiting func(behind string)) error {
	for {
		now := n.members.Get()
		var late []string
		for _, member := range now.Members {
			if member.Name == now.Self {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
			held, err := n.peer(member).Membership(cctx)
			cancel()
			if err != nil || behind(held) {
				late = append(late, member.Name)
			}
		}
		if len(late) == 0 {
			return nil
		}
		if over() {
			return fmt.Errorf("stopped waiting for the members at epoch %d: no longer needed", m.Epoch)
		}
		waiting(strings.Join(late, ","))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// pullPartition pulls one partition of the filter from peer and merges it, paced as anti-entropy.
func (n *Node) pullPartition(ctx context.Context, peer wire.Member, name string, partition int) (int64, error) {
	start := time.Now()
	st, release, err := n.pullDump(ctx, peer, name, []int{partition})
	if err != nil {
		return 0, err
	}
	defer release()
	res, err := n.merge(st)
	if err != nil {
		return 0, fmt.Errorf("merging %s's partition %d of %q: %w", peer.Name, partition, name, err)
	}
	n.stats.Merges.Add(1)
	n.stats.MergedBytes.Add(int64(res.BytesChanged))
	return stateBytes(st), pace(ctx, st, n.opts.AntiEntropyBytesPerSecond, time.Since(start))
}
