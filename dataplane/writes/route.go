package writes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// When the membership places each partition on some pods only (replication.Node.Placed), every
// request for values is routed: a value's partition decides which pods serve it. Reads go to the
// partition's readers (this pod first when it is one), check-and-sets to its home, which applies
// them and replicates them to the partition's other writers, and sets straight to its writers.
// A request of many values is split by the pod that serves them, sent in parallel, and answered
// in the request's order.

// Placed reports whether requests for values are routed to their partitions' owners.
func (s *Service) Placed() bool { return s.node.Placed() }

// Routed answers a request for values of f as op asks (wire.OpMultiCheck, OpMultiCheckAndSet or
// OpMultiSet; answers are nil for a set), each served by the owners of its partition. local says
// that a peer routed the request here: it is served here, or refused with a NotHomeError when
// this pod cannot serve some of its values.
func (s *Service) Routed(ctx context.Context, level wire.Consistency, f *filter.Filter, op wire.FilterOp, values []string, local bool) ([]bool, error) {
	if local {
		return s.serveHere(ctx, level, f, op, values)
	}
	if op == wire.OpMultiSet {
		return nil, s.setPlaced(ctx, level, f, values)
	}
	rt := s.node.Route(f.Name(), f.Partitions())
	groups := groupByServers(f, rt, op, values)
	answers := make([]bool, len(values))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	// The groups that one server serves (a write, a check at consistency one) go first to their
	// first server together: one request to each pod rather than one per group, as groups that
	// share a first server differ only in whom they fall back to.
	together := map[string][]int{}
	var firsts []string
	for i, g := range groups {
		if s.need(op, level, rt, g) > 1 {
			wg.Go(func() { errs[i] = s.serveGroup(ctx, level, f, rt, op, g, answers, 0, nil) })
			continue
		}
		if _, ok := together[g.servers[0]]; !ok {
			firsts = append(firsts, g.servers[0])
		}
		together[g.servers[0]] = append(together[g.servers[0]], i)
	}
	for _, server := range firsts {
		wg.Go(func() { s.serveTogether(ctx, level, f, rt, op, server, groups, together[server], answers, errs) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return answers, nil
}

// need is how many of g's servers must answer: one for a write, the level's count for a check,
// and one more when this pod is the first of them and does not hold its home lease, whose copy
// then counts for nothing (replication.Node.PeersToAsk), unless it is the only one.
func (s *Service) need(op wire.FilterOp, level wire.Consistency, rt *replication.Route, g *group) int {
	if op != wire.OpMultiCheck {
		return 1
	}
	n := level.Count(len(g.servers))
	if g.servers[0] == rt.Self() && !s.node.LeaseHeld() {
		n = min(n+1, len(g.servers))
	}
	return n
}

// serveTogether has server serve the values of the groups at members, all first served by it, in
// one request, and writes their answers into answers. When server does not serve them (it is
// down, or does not hold the partitions) the groups fall back to their next servers, in parallel
// as they went; each group's error goes to errs at its index.
func (s *Service) serveTogether(ctx context.Context, level wire.Consistency, f *filter.Filter, rt *replication.Route, op wire.FilterOp,
	server string, groups []*group, members []int, answers []bool, errs []error) {
	var values []string
	for _, i := range members {
		values = append(values, groups[i].values...)
	}
	got, err := s.serveOn(ctx, level, f, rt, op, server, values)
	if err == nil && len(got) != len(values) {
		err = fmt.Errorf("%s answered %d of %d values", server, len(got), len(values))
	}
	if notServed(err) && op != wire.OpMultiCheck {
		// A write's server is its partition's home, and no other pod serves it in its place.
		s.homeDidNotServe(ctx, f.Name(), server, err)
		for _, i := range members {
			errs[i] = homeUnavailable("the home of partitions of %q, %s, did not serve the values; no other pod serves them in its place: %s", f.Name(), server, err)
		}
		return
	}
	if notServed(err) {
		var wg sync.WaitGroup
		for _, i := range members {
			wg.Go(func() { errs[i] = s.serveGroup(ctx, level, f, rt, op, groups[i], answers, 1, []error{err}) })
		}
		wg.Wait()
		return
	}
	if err != nil {
		errs[members[0]] = err
		return
	}
	for _, i := range members {
		g := groups[i]
		for j, present := range got[:len(g.values)] {
			answers[g.at[j]] = answers[g.at[j]] || present
		}
		got = got[len(g.values):]
	}
}

// serveOn has server, this pod or a peer, serve values for op.
func (s *Service) serveOn(ctx context.Context, level wire.Consistency, f *filter.Filter, rt *replication.Route, op wire.FilterOp, server string, values []string) ([]bool, error) {
	if server == rt.Self() {
		return s.serveHere(ctx, level, f, op, values)
	}
	return s.node.ServeOn(ctx, rt.Member(server), op, f.Name(), values, level)
}

// notServed reports whether a pod did not serve values routed to it, so that the next may.
func notServed(err error) bool {
	return errors.As(err, new(*NotHomeError)) || replication.IsNotServed(err)
}

// group is the values whose partitions have the same servers, in the order to try them.
type group struct {
	servers []string
	at      []int // the values' indices in the request
	values  []string
}

// groupByServers splits values by the pods that serve them: a partition's readers for a check,
// for a write its readers too, the first being its home (a writer that is not a reader, a new
// owner during a move, may lack what the partition held before, and so cannot answer a
// check-and-set).
func groupByServers(f *filter.Filter, rt *replication.Route, op wire.FilterOp, values []string) []*group {
	byPartition := make(map[int]*group)
	byServers := make(map[string]*group)
	var out []*group
	for i, v := range values {
		p := f.PartitionOf(v)
		g, ok := byPartition[p]
		if !ok {
			servers := rt.Readers(p)
			if op == wire.OpMultiCheck {
				servers = rt.ReadOrder(p)
			}
			key := strings.Join(servers, "\x00")
			if g, ok = byServers[key]; !ok {
				g = &group{servers: servers}
				byServers[key] = g
				out = append(out, g)
			}
			byPartition[p] = g
		}
		g.at = append(g.at, i)
		g.values = append(g.values, v)
	}
	return out
}

// serveGroup has g's values served by its servers from the from-th on, after the failures of
// those before, and writes their answers into answers. A write goes to its first server, the
// partition's home, alone; a check to as many servers as level counts, whose answers are ORed.
func (s *Service) serveGroup(ctx context.Context, level wire.Consistency, f *filter.Filter, rt *replication.Route, op wire.FilterOp, g *group, answers []bool,
	from int, failures []error) error {
	need := s.need(op, level, rt, g)
	served := 0
	for _, server := range g.servers[from:] {
		if served == need {
			break
		}
		got, err := s.serveOn(ctx, level, f, rt, op, server, g.values)
		if notServed(err) && op != wire.OpMultiCheck {
			s.homeDidNotServe(ctx, f.Name(), server, err)
			return homeUnavailable("the home of partitions of %q, %s, did not serve the values; no other pod serves them in its place: %s", f.Name(), server, err)
		}
		if notServed(err) {
			failures = append(failures, err)
			continue
		}
		if err != nil {
			return err
		}
		served++
		for j, present := range got {
			answers[g.at[j]] = answers[g.at[j]] || present
		}
	}
	if served < need {
		return fmt.Errorf("%w: consistency %q needs %d of the %d pods that hold the values' partitions and %d answered: %w",
			replication.ErrReplication, level, need, len(g.servers), served, errors.Join(failures...))
	}
	return nil
}

// setPlaced adds values to f without answering whether they were there: this pod adds those of
// the partitions it holds, and sends each value to its partition's writers, as a home replicates
// a write, waiting for the level's acknowledgements counted over them. No home is involved, and
// the values travel in the peers' binary batches with the other writes to them.
func (s *Service) setPlaced(ctx context.Context, level wire.Consistency, f *filter.Filter, values []string) error {
	if !s.node.Ready() {
		return ErrCatchingUp // what it holds may be behind, and the peers may lack the filter
	}
	parts := partitionsOf(f, values)
	var mine []string
	for i, v := range values {
		if f.Holds(parts[i]) {
			mine = append(mine, v)
		}
	}
	if len(mine) > 0 {
		if err := f.AddMany(mine); err != nil {
			return err
		}
	}
	return s.replicatePlaced(ctx, level, f, values, parts, 0)
}

// serveHere serves values of f on this pod, which must hold their partitions: checks them, or
// applies and journals them and replicates them to their partitions' other writers.
func (s *Service) serveHere(ctx context.Context, level wire.Consistency, f *filter.Filter, op wire.FilterOp, values []string) ([]bool, error) {
	switch {
	case !s.node.Ready():
		return nil, &NotHomeError{"catching up from the peers; not serving values routed here yet"}
	case !s.node.Replicating():
		return nil, &NotHomeError{"this pod knows no peers yet; not serving values routed here"}
	}
	parts := partitionsOf(f, values)
	for _, p := range parts {
		if !f.Holds(p) {
			return nil, &NotHomeError{fmt.Sprintf("this pod does not hold partition %d of %q", p, f.Name())}
		}
	}
	switch op {
	case wire.OpMultiCheck:
		return f.CheckMany(values), nil
	case wire.OpMultiSet:
		present, err := f.CheckAndSetMany(values)
		if rerr := s.replicatePlaced(ctx, level, f, values[:len(present)], parts, 0); err == nil {
			err = rerr
		}
		return present, err
	}
	var present []bool
	var err error
	epoch, herr := s.node.ServeAsHome(f, values, func() { present, err = f.CheckAndSetMany(values) })
	if herr != nil {
		return nil, asHomeError(herr)
	}
	if rerr := s.replicatePlaced(ctx, CheckAndSetLevel(level, present...), f, values[:len(present)], parts, epoch); err == nil {
		err = rerr
	}
	return present, err
}

// createEcho is how long after a filter's creation its adds carry the create along: far longer
// than a create takes to reach every pod that is up.
const createEcho = 30 * time.Second

// partitionsOf answers the partition of each of values.
func partitionsOf(f *filter.Filter, values []string) []int {
	parts := make([]int, len(values))
	for i, v := range values {
		parts[i] = f.PartitionOf(v)
	}
	return parts
}

// replicatePlaced sends keys added to f to their partitions' other writers, in parallel, and
// waits for each partition's acknowledgements at level. parts[i] is keys[i]'s partition.
// homeEpoch, when not 0, is the epoch under which this pod served them as their home.
func (s *Service) replicatePlaced(ctx context.Context, level wire.Consistency, f *filter.Filter, keys []string, parts []int, homeEpoch uint64) error {
	if len(keys) == 0 {
		return nil
	}
	rt := s.node.Route(f.Name(), f.Partitions())
	writerSets := rt.WriterSets()
	setOf := make([]int, len(keys))
	counts := make([]int, len(writerSets))
	for i := range keys {
		setOf[i] = rt.WriterSet(parts[i])
		counts[setOf[i]]++
	}
	var sets []replication.PlacedKeys
	at := make([]int, len(writerSets)) // each writer set's place in sets, -1 before its first key
	for i := range at {
		at[i] = -1
	}
	for i, k := range keys {
		set := setOf[i]
		if at[set] < 0 {
			at[set] = len(sets)
			sets = append(sets, replication.PlacedKeys{
				Writers: writerSets[set], Counted: rt.CountedSet(set), Keys: make([]string, 0, counts[set]), Applied: f.Holds(parts[i]),
			})
		}
		p := &sets[at[set]]
		p.Keys = append(p.Keys, k)
	}
	// A filter's create reaches the pods from the home of its name, its adds from the homes of
	// their partitions: through other queues, which may overtake the create's while it is young.
	// Its adds then carry the create ahead of them; a pod that holds the filter ignores it.
	var create *peer.Op
	if s.store.Now().Sub(f.Created()) < createEcho {
		o := f.Options()
		create = &peer.Op{Kind: peer.OpCreate, Name: f.Name(), Generation: f.Generation(), Options: &o}
	}
	err := s.node.AddPlaced(ctx, level, f.Name(), f.Generation(), sets, create, homeEpoch)
	if errors.Is(err, peer.ErrFenced) {
		return fenced(err)
	}
	if errors.Is(err, replication.ErrReplication) {
		s.log.Log(ctx, s.spacedLevel("write not acknowledged"),
			"Write not acknowledged by enough pods (warned at most every 10 s; bloomery_replication_write_failures_total counts them all)",
			"filter", f.Name(), "op", peer.OpAdd, "error", err.Error())
	}
	return err
}
