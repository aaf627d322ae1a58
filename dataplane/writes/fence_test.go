package writes_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	dppeer "github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
	"github.com/bloomery/bloomery/internal/await"
)

// fenceCluster is pods that each hold the same incarnation of the filter f, reach each other
// through a network in memory, and are told memberships by the test, as the operator tells them.
type fenceCluster struct {
	t     *testing.T
	net   *dppeer.Network
	pods  map[string]*fencePod
	epoch uint64
	// placement is that of the memberships told (zero: every pod holds everything).
	placement wire.Placement
}

type fencePod struct {
	node   *replication.Node
	writes *writes.Service
	f      *filter.Filter
}

// newFenceCluster starts the pods names, all members of epoch 1. Calls to a peer are bounded by a
// minute: a call the test holds (Network.Hold) arrives when the test releases it.
func newFenceCluster(t *testing.T, names ...string) *fenceCluster {
	t.Helper()
	return newPlacedFenceCluster(t, wire.Placement{}, names...)
}

// newPlacedFenceCluster is newFenceCluster under a placement.
func newPlacedFenceCluster(t *testing.T, placement wire.Placement, names ...string) *fenceCluster {
	t.Helper()
	c := &fenceCluster{t: t, net: dppeer.NewNetwork(), pods: map[string]*fencePod{}, placement: placement}
	created := time.Now().Add(-time.Minute)
	for _, name := range names {
		store := filter.NewStore(filter.Limits{}, nil)
		node := replication.NewNode(replication.Options{Store: store, PodName: name, Timeout: time.Minute, Transport: c.net.From(name)})
		t.Cleanup(node.Close)
		c.net.Join(name, dppeer.NewServer(dppeer.ServerOptions{Host: node, Store: store, MaxRequestBytes: 1 << 20}), nil)
		if _, err := store.CreateReplica("f", filter.Options{Capacity: 1000, FPP: 0.01}, created, filter.All); err != nil {
			t.Fatal(err)
		}
		f, _ := store.Lookup("f")
		c.pods[name] = &fencePod{node: node, writes: writes.New(store, node, slog.New(slog.DiscardHandler)), f: f}
	}
	c.push(names...)
	for _, name := range names {
		node := c.pods[name].node
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); node.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		await.True(t, 10*time.Second, name+" to catch up", node.Ready)
	}
	return c
}

// push tells each of members, with the next epoch, a membership of exactly members.
func (c *fenceCluster) push(members ...string) {
	c.t.Helper()
	c.epoch++
	c.tell(members, members...)
}

// tell tells the pods to, under the last epoch pushed, a membership of exactly members.
func (c *fenceCluster) tell(members []string, to ...string) {
	c.t.Helper()
	var ms []wire.Member
	for _, name := range members {
		ms = append(ms, wire.Member{Name: name, URL: "http://" + name + ":8090"})
	}
	for _, name := range to {
		if err := c.pods[name].node.SetMembership(wire.Membership{Epoch: c.epoch, Self: name, Members: ms, Placement: c.placement}); err != nil {
			c.t.Fatal(err)
		}
	}
}

// awaitServing waits until pod is no stand-in still merging.
func (c *fenceCluster) awaitServing(pod string) {
	c.t.Helper()
	await.True(c.t, 10*time.Second, pod+" to merge from a quorum as the new home", func() bool { return !c.pods[pod].node.StandingIn() })
}

// homeOrder is the home order of f as pod sees it.
func (c *fenceCluster) homeOrder(pod string) []string {
	order, _ := c.pods[pod].node.HomeOrder("f")
	var names []string
	for _, m := range order {
		names = append(names, m.Name)
	}
	return names
}

// cas is a check-and-set of value served by pod, at level.
func (c *fenceCluster) cas(pod, value string, level wire.Consistency) (bool, error) {
	p := c.pods[pod]
	return p.writes.CheckAndSet(c.t.Context(), level, p.f, value)
}

// homeUnavailable reports whether err refuses a check-and-set with code 13.
func homeUnavailable(err error) bool {
	hu, ok := errors.AsType[*writes.HomeUnavailableError](err)
	return ok && hu.Code == wire.CodeHomeUnavailable
}

// A home cut off while the operator moves it, which keeps serving the requests that reach it (its
// clients, or requests that waited in its socket), answers no false: the pods that took the new
// epoch refuse its writes, so it cannot reach a quorum. The new home answers true for what the old
// one acknowledged false, and false for what it refused.
func TestADemotedHomeAnswersNoFalse(t *testing.T) {
	c := newFenceCluster(t, "a", "b", "c")
	order := c.homeOrder("a")
	home, next, last := order[0], order[1], order[2]
	if present, err := c.cas(home, "v1", wire.ConsistencyAll); present || err != nil {
		t.Fatalf("a check-and-set of a new value at the home = %v, %v; want false", present, err)
	}

	c.net.Cut(home, next)
	c.net.Cut(home, last)
	c.push(next, last) // the old home is not told
	if got := c.homeOrder(next)[0]; got != next {
		t.Fatalf("the home once %s left is %s, want %s", home, got, next)
	}
	c.awaitServing(next)
	c.net.Heal()
	for _, level := range []wire.Consistency{wire.ConsistencyOne, wire.ConsistencyQuorum} {
		present, err := c.cas(home, "v2", level)
		if !homeUnavailable(err) || !strings.Contains(err.Error(), "a newer membership moved the home") {
			t.Errorf("a check-and-set at %s on the demoted home = %v, %v; want code 13, fenced", level, present, err)
		}
	}
	if present, err := c.cas(next, "v1", wire.ConsistencyQuorum); !present || err != nil {
		t.Errorf("the new home's check-and-set of a value the old one answered false for = %v, %v; want true", present, err)
	}
	if present, err := c.cas(next, "v2", wire.ConsistencyQuorum); present || err != nil {
		t.Errorf("the new home's check-and-set of a value the old one refused = %v, %v; want false", present, err)
	}
	// The new home is home under the epoch its peers hold: they do not fence it.
	if present, err := c.cas(next, "v3", wire.ConsistencyAll); present || err != nil {
		t.Errorf("a check-and-set of a new value at the new home, at all = %v, %v; want false", present, err)
	}
}

// A home whose writes wait in the network (a pause, a stalled link) while the operator moves it
// answers no false once they arrive: the pods that took the new epoch meanwhile refuse them. A
// pod that was not told the new epoch yet takes them.
func TestAHomesWritesHeldAcrossAnEpochChangeAreFenced(t *testing.T) {
	c := newFenceCluster(t, "a", "b", "c")
	order := c.homeOrder("a")
	home, next, last := order[0], order[1], order[2]
	releaseNext, releaseLast := c.net.Hold(home, next), c.net.Hold(home, last)
	type answer struct {
		present bool
		err     error
	}
	done := make(chan answer, 1)
	go func() {
		present, err := c.cas(home, "held", wire.ConsistencyQuorum)
		done <- answer{present, err}
	}()
	await.True(t, 10*time.Second, "the home's writes to be held on their way", func() bool {
		return c.net.Calls(home, next) > 0 && c.net.Calls(home, last) > 0
	})
	c.push(next, last)
	releaseNext()
	releaseLast()
	if a := <-done; !homeUnavailable(a.err) {
		t.Errorf("a check-and-set whose writes arrived after the home moved = %v, %v; want code 13", a.present, a.err)
	}
	c.awaitServing(next)
	if present, err := c.cas(next, "held", wire.ConsistencyQuorum); present || err != nil {
		t.Errorf("the new home's check-and-set of the refused value = %v, %v; want false", present, err)
	}

	// A pod at the old epoch is not fenced: it was not told yet, and its acknowledgement counts.
	c2 := newFenceCluster(t, "a", "b", "c")
	order = c2.homeOrder("a")
	home, next, last = order[0], order[1], order[2]
	c2.net.Cut(home, next)
	c2.epoch++
	m := wire.Membership{Epoch: c2.epoch, Self: next, Members: []wire.Member{{Name: next, URL: "http://" + next + ":8090"}, {Name: last, URL: "http://" + last + ":8090"}}}
	if err := c2.pods[next].node.SetMembership(m); err != nil { // last is not told
		t.Fatal(err)
	}
	if present, err := c2.cas(home, "w", wire.ConsistencyQuorum); present || err != nil {
		t.Errorf("a check-and-set acknowledged by a pod at the home's epoch = %v, %v; want false", present, err)
	}
}

// Sets and checks are not fenced: a set is a commutative OR, whoever sends it.
func TestSetsAreNotFenced(t *testing.T) {
	c := newFenceCluster(t, "a", "b", "c")
	order := c.homeOrder("a")
	home, next, last := order[0], order[1], order[2]
	c.net.Cut(home, next)
	c.net.Cut(home, last)
	c.push(next, last)
	c.awaitServing(next)
	c.net.Heal()
	p := c.pods[home]
	if err := p.writes.Set(t.Context(), wire.ConsistencyAll, p.f, "s"); err != nil {
		t.Errorf("a set at all through the demoted home: %v; sets are not fenced", err)
	}
	if got := c.pods[last].f.CheckMany([]string{"s"}); !slices.Equal(got, []bool{true}) {
		t.Errorf("the set reached %s: %v, want it held", last, got)
	}
}

// A pod that becomes the home of values under a new epoch serves their check-and-sets only once it
// has merged them from a quorum of their owners, each holding the new epoch: a false the old home
// answered (held by the old home and one other pod) is then visible to it. Until then it answers
// 503 code 13; a peer that was not told the new epoch yet is asked again.
func TestTheNewHomeServesOnlyOnceMergedFromAQuorum(t *testing.T) {
	c := newFenceCluster(t, "a", "b", "c")
	order := c.homeOrder("a")
	home, next, last := order[0], order[1], order[2]
	c.net.Cut(home, next) // the false below is held by the home and last only
	if present, err := c.cas(home, "v1", wire.ConsistencyQuorum); present || err != nil {
		t.Fatalf("a check-and-set of a new value at the home = %v, %v; want false", present, err)
	}
	c.net.Cut(home, last)

	c.epoch++
	c.tell([]string{next, last}, next) // last is not told yet
	if !c.pods[next].node.StandingIn() {
		t.Fatalf("%s, home under the new epoch, is not standing in", next)
	}
	if present, err := c.cas(next, "v1", wire.ConsistencyQuorum); !homeUnavailable(err) {
		t.Errorf("a check-and-set at the new home before it merged = %v, %v; want code 13", present, err)
	}
	if c.pods[next].f.CheckMany([]string{"v1"})[0] {
		t.Fatalf("%s holds v1 before it merged; the test needs it not to", next)
	}
	// What it is not the new home of, nor owes anything for, it serves as before: here nothing,
	// as it is the home of f. A check, a set, go on meanwhile.
	if err := c.pods[next].writes.Set(t.Context(), wire.ConsistencyOne, c.pods[next].f, "s"); err != nil {
		t.Errorf("a set at the stand-in: %v", err)
	}

	release := c.net.Hold(next, last)
	c.tell([]string{next, last}, last)
	if present, err := c.cas(next, "v1", wire.ConsistencyQuorum); !homeUnavailable(err) {
		t.Errorf("a check-and-set at the new home while its merge from %s is held = %v, %v; want code 13", last, present, err)
	}
	release()
	c.awaitServing(next)
	if present, err := c.cas(next, "v1", wire.ConsistencyQuorum); !present || err != nil {
		t.Errorf("the new home's check-and-set of what the old one answered false for = %v, %v; want true", present, err)
	}
	if present, err := c.cas(next, "v2", wire.ConsistencyQuorum); present || err != nil {
		t.Errorf("the new home's check-and-set of a new value = %v, %v; want false", present, err)
	}
}

// A pod whose home does not change under a new epoch serves its check-and-sets on, even while it
// merges for values it may have gained: here its peers are not told the new epoch, so its merge
// cannot end.
func TestAHomeThatStaysHomeServesOn(t *testing.T) {
	c := newFenceCluster(t, "a", "b", "c", "d")
	order := c.homeOrder("a")
	home, gone := order[0], order[3]
	c.net.Cut(home, gone)
	c.epoch++
	c.tell(order[:3], home) // the last in the order leaves: f's home stays
	if !c.pods[home].node.StandingIn() {
		t.Fatalf("%s does not stand in for what %s was the home of; the test needs it to", home, gone)
	}
	if present, err := c.cas(home, "v", wire.ConsistencyQuorum); present || err != nil {
		t.Errorf("a check-and-set at the home that stayed = %v, %v; want false at once", present, err)
	}
}

// Under a placement, a partition's home is the first of its owners, and fencing works per
// partition: a home that a new placement demoted is refused by the owners that took it, and the
// new home of the partition merges it from a quorum of its owners, old and new, before it serves.
func TestAPlacedPartitionsDemotedHomeAnswersNoFalse(t *testing.T) {
	c := newPlacedFenceCluster(t, wire.Placement{Owners: []string{"a", "b", "c"}, ReplicationFactor: 3}, "a", "b", "c", "d")
	routedCAS := func(pod, value string) (bool, error) {
		p := c.pods[pod]
		got, err := p.writes.Routed(t.Context(), wire.ConsistencyQuorum, p.f, wire.OpMultiCheckAndSet, []string{value}, false)
		if err != nil {
			return false, err
		}
		return got[0], nil
	}
	home := c.pods["d"].node.Route("f", c.pods["d"].f.Partitions()).Readers(0)[0]
	if present, err := routedCAS(home, "v1"); present || err != nil {
		t.Fatalf("a check-and-set of a new value at the partition's home %s = %v, %v; want false", home, present, err)
	}

	var others []string
	for _, name := range []string{"a", "b", "c", "d"} {
		if name != home {
			c.net.Cut(home, name)
			others = append(others, name)
		}
	}
	c.epoch++
	c.placement = wire.Placement{Owners: others, ReplicationFactor: 3}
	c.tell([]string{"a", "b", "c", "d"}, others...) // the old home is not told
	newHome := c.pods[others[0]].node.Route("f", c.pods[others[0]].f.Partitions()).Readers(0)[0]
	if newHome == home {
		t.Fatalf("the new placement leaves %s the home", home)
	}
	c.awaitServing(newHome)
	c.net.Heal()
	if present, err := routedCAS(home, "v2"); !homeUnavailable(err) {
		t.Errorf("a check-and-set at the demoted home of the partition = %v, %v; want code 13", present, err)
	}
	if present, err := routedCAS(newHome, "v1"); !present || err != nil {
		t.Errorf("the new home's check-and-set of what the old one answered false for = %v, %v; want true", present, err)
	}
	if present, err := routedCAS(newHome, "v2"); present || err != nil {
		t.Errorf("the new home's check-and-set of the value the old one was refused = %v, %v; want false", present, err)
	}
}
