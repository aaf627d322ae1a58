package replication

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// A move of every partition from a and b to a and c, among members a, b and c: the moving
// membership (epoch 2) and the one that ends it (epoch 3).
var (
	moveBefore = wire.Placement{Owners: []string{"a", "b"}, ReplicationFactor: 2}
	moveAfter  = wire.Placement{Owners: []string{"a", "c"}, ReplicationFactor: 2}
)

func moveMembership(self string, epoch uint64) wire.Membership {
	m := wire.Membership{Epoch: epoch, Self: self, Members: []wire.Member{member("a"), member("b"), member("c")}, Placement: moveAfter}
	if epoch == 2 {
		m.Previous = &moveBefore
	}
	return m
}

// During a move a read asks the previous owners, so a write counts a quorum of them on its own:
// c, a new owner, writes at quorum, and a and c, two of the three writers, are not enough while b
// refuses: a read at one from b would miss the write, where R + W = 1 + 2 exceeds the 2 owners.
func TestAMoveCountsThePreviousOwnersOnTheirOwn(t *testing.T) {
	net := peer.NewNetwork()
	var mu sync.Mutex
	refuse := true
	joinFake(net, "a", &fakePeer{apply: allApplied}, nil)
	joinFake(net, "b", &fakePeer{apply: func(ops []peer.Op) ([]peer.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return nil, errors.New("b refuses")
		}
		return allApplied(ops)
	}}, nil)
	c := newNode(t, net, "c", Options{Timeout: time.Second})
	if err := c.SetMembership(moveMembership("c", 2)); err != nil {
		t.Fatal(err)
	}
	rt := c.Route("f", 4)
	write := func(key string) error {
		i := rt.WriterSet(0)
		return c.AddPlaced(t.Context(), wire.ConsistencyQuorum, "f", 1,
			[]PlacedKeys{{Writers: rt.WriterSets()[i], Counted: rt.CountedSet(i), Keys: []string{key}, Applied: true}}, nil, 0)
	}
	if err := write("refused"); !errors.Is(err, ErrReplication) {
		t.Errorf("a write at quorum during the move that b, a previous owner, refused: %v, want ErrReplication", err)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if err := write("held"); err != nil {
		t.Errorf("a write at quorum during the move that every writer takes: %v", err)
	}
}

// A pod that takes the membership ending a move while its peers still hold the moving one (they
// answer epoch 0 here) sends writes to the move's writers too, and counts a quorum of the owners
// and one of the previous owners, which the peers still on the moving membership read from: b's
// refusal fails a write at quorum that a and c hold, a quorum of the three.
func TestTheEndOfAMoveWritesToThePreviousOwnersUntilEveryMemberHoldsIt(t *testing.T) {
	net := peer.NewNetwork()
	var mu sync.Mutex
	refuse := true
	got := map[string][]string{}
	fake := func(name string) *fakePeer {
		return &fakePeer{apply: func(ops []peer.Op) ([]peer.Outcome, error) {
			mu.Lock()
			defer mu.Unlock()
			if name == "b" && refuse {
				return nil, errors.New("b refuses")
			}
			for _, op := range ops {
				got[name] = append(got[name], op.AllKeys()...)
			}
			return allApplied(ops)
		}}
	}
	joinFake(net, "b", fake("b"), nil)
	joinFake(net, "c", fake("c"), nil)
	a := newNode(t, net, "a", Options{Timeout: time.Second})
	for _, epoch := range []uint64{2, 3} {
		if err := a.SetMembership(moveMembership("a", epoch)); err != nil {
			t.Fatal(err)
		}
	}
	if !a.Membership().EndingMove {
		t.Errorf("a answers %+v while its peers hold no membership, want endingMove", a.Membership())
	}
	rt := a.Route("f", 4)
	for p := range 4 {
		if w := slices.Sorted(slices.Values(rt.Writers(p))); !slices.Equal(w, []string{"a", "b", "c"}) || !rt.Keeps(p) {
			t.Fatalf("partition %d at the end of the move: writers %v, keeps %v; want a, b and c, kept", p, w, rt.Keeps(p))
		}
		if r := rt.Readers(p); !slices.Equal(slices.Sorted(slices.Values(r)), []string{"a", "c"}) {
			t.Fatalf("partition %d at the end of the move: readers %v, want the owners a and c", p, r)
		}
	}
	write := func(key string) error {
		i := rt.WriterSet(0)
		return a.AddPlaced(t.Context(), wire.ConsistencyQuorum, "f", 1,
			[]PlacedKeys{{Writers: rt.WriterSets()[i], Counted: rt.CountedSet(i), Keys: []string{key}, Applied: true}}, nil, 0)
	}
	if err := write("refused"); !errors.Is(err, ErrReplication) {
		t.Errorf("a write at quorum that b, a previous owner, refused: %v, want ErrReplication", err)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if err := write("held"); err != nil {
		t.Errorf("a write at quorum that every writer takes: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"b", "c"} {
		if !slices.Contains(got[name], "held") {
			t.Errorf("%s got %v, not the write", name, got[name])
		}
	}
}

// Once every member holds the membership that ends the move, writes go to the new owners alone
// and the previous owner that no longer owns a partition releases it; until then it keeps it.
func TestTheEndOfAMoveReleasesOnceEveryMemberHoldsIt(t *testing.T) {
	net := peer.NewNetwork()
	nodes := map[string]*Node{}
	filters := map[string]*filter.Filter{}
	for _, name := range []string{"a", "b", "c"} {
		store := filter.NewStore(filter.Limits{}, nil)
		nodes[name] = newNode(t, net, name, Options{Store: store, Timeout: time.Second})
		f, _, err := store.Create("f", filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.8, Partitions: 4}, false)
		if err != nil {
			t.Fatal(err)
		}
		filters[name] = f
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := nodes[name].SetMembership(moveMembership(name, 2)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"b", "a"} { // c still holds the moving membership
		if err := nodes[name].SetMembership(moveMembership(name, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if held := filters["b"].HeldPartitions(); held != 4 {
		t.Fatalf("b, a previous owner, holds %d of 4 partitions while c still holds the moving membership, want all", held)
	}
	if w := nodes["a"].Route("f", 4).Writers(0); !slices.Contains(w, "b") {
		t.Fatalf("a writes partition 0 to %v while c still holds the moving membership, want b among them", w)
	}
	if err := nodes["c"].SetMembership(moveMembership("c", 3)); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "b releases what it no longer owns, and a writes to the owners alone", func() (bool, string) {
		w := slices.Sorted(slices.Values(nodes["a"].Route("f", 4).Writers(0)))
		held := filters["b"].HeldPartitions()
		return held == 0 && slices.Equal(w, []string{"a", "c"}), ""
	})
	if m := nodes["a"].Membership(); m.EndingMove {
		t.Errorf("a answers %+v once every member holds the membership, want no endingMove", m)
	}
}

// Each member learns at its own moment that every member holds the membership ending a move. b,
// a previous owner that learnt it, keeps the partitions it no longer owns while a still says it
// writes to the move's writers: a's writes, counted over b's answers, would fail otherwise.
// Once a no longer says so, b releases them.
func TestTheEndOfAMoveKeepsThePartitionsWhileAMemberStillWritesToThem(t *testing.T) {
	net := peer.NewNetwork()
	var mu sync.Mutex
	aEnding := true
	joinFake(net, "a", &fakePeer{apply: allApplied, membership: func() wire.Membership {
		mu.Lock()
		defer mu.Unlock()
		return wire.Membership{Epoch: 3, EndingMove: aEnding}
	}}, nil)
	joinFake(net, "c", &fakePeer{apply: allApplied, membership: func() wire.Membership { return wire.Membership{Epoch: 3} }}, nil)
	store := filter.NewStore(filter.Limits{}, nil)
	b := newNode(t, net, "b", Options{Store: store, Timeout: 100 * time.Millisecond})
	f, _, err := store.Create("f", filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.8, Partitions: 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, epoch := range []uint64{2, 3} {
		if err := b.SetMembership(moveMembership("b", epoch)); err != nil {
			t.Fatal(err)
		}
	}
	await.True(t, 30*time.Second, "b learns that every member holds epoch 3", func() bool { return !b.Membership().EndingMove })
	// Two more questions to a: b has since heard a say that it still writes to the move's
	// writers. Had b not listened, it would have released the partitions after one.
	asked := net.Calls("b", "a")
	await.True(t, 30*time.Second, "b asks a twice more, or releases", func() bool {
		return net.Calls("b", "a") >= asked+2 || f.HeldPartitions() < 4
	})
	if held := f.HeldPartitions(); held != 4 {
		t.Fatalf("b holds %d of 4 partitions while a still writes to it, want all", held)
	}
	mu.Lock()
	aEnding = false
	mu.Unlock()
	await.True(t, 30*time.Second, "b releases the partitions it no longer owns", func() bool { return f.HeldPartitions() == 0 })
}
