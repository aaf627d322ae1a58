package replication

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A pod that kept its membership counts its peers after a restart, before anyone tells it again:
// a write at consistency all through it, with a peer cut off, fails as it did before the restart,
// instead of being acknowledged by the restarted pod alone.
func TestARestartedPodCountsThePeersOfTheMembershipItKept(t *testing.T) {
	file := filepath.Join(t.TempDir(), "membership.json")
	net, nodes := threeNodes(t, Options{Timeout: time.Second})
	before := nodes["a"]
	if err := before.Remember(file); err != nil {
		t.Fatal(err)
	}
	m := before.Membership()
	m.Epoch++
	if err := before.SetMembership(m); err != nil {
		t.Fatal(err)
	}
	before.Close()

	after := newNode(t, net, "a", Options{Timeout: time.Second}) // the restarted pod, same name
	if err := after.Remember(file); err != nil {
		t.Fatal(err)
	}
	if got := after.Membership(); got.Epoch != m.Epoch || len(got.Members) != 3 {
		t.Fatalf("after the restart, the membership is %+v; want epoch %d of 3 pods", got, m.Epoch)
	}
	net.Cut("a", "c")
	// The filter f is gone with the old pod's store: it is created again, then written to.
	write(t, after, wire.ConsistencyQuorum, peer.Op{Kind: peer.OpCreate, Name: "g", Generation: generation, Options: nodesOptions()})
	err := writeErr(t, after, wire.ConsistencyAll, peer.Op{Kind: peer.OpAdd, Name: "g", Generation: generation, Keys: []string{"x"}})
	if !errors.Is(err, ErrReplication) {
		t.Fatalf("a write at all with c cut off, after a restart: %v; want ErrReplication (3 pods, not 1)", err)
	}
}

// With AwaitMembership the kept membership is counted but not taken as told: the pod is neither
// known nor ready until the operator tells it, and then it is.
func TestAKeptMembershipIsNotAsGoodAsToldWhenAwaited(t *testing.T) {
	file := filepath.Join(t.TempDir(), "membership.json")
	net := peer.NewNetwork()
	first := nodeIn(t, net, "a", Options{}, 1, member("b"))
	if err := first.Remember(file); err != nil {
		t.Fatal(err)
	}
	m := first.Membership()
	m.Epoch = 2
	if err := first.SetMembership(m); err != nil {
		t.Fatal(err)
	}
	first.Close()

	n := newNode(t, net, "a", Options{AwaitMembership: true})
	if err := n.Remember(file); err != nil {
		t.Fatal(err)
	}
	if known, _ := n.Known(); known || n.Ready() || n.Kept().Epoch != 2 || !n.Replicating() {
		t.Fatalf("restored: known %v, ready %v, kept epoch %d, replicating %v; want not known, not ready, epoch 2, replicating",
			known, n.Ready(), n.Kept().Epoch, n.Replicating())
	}
	// The operator tells a pod whose epoch is behind: until it is told, the pod says it holds none.
	if told := n.Membership(); told.Epoch != 0 {
		t.Errorf("before it is told, the pod answers epoch %d; want 0, so that the operator tells it", told.Epoch)
	}
	if err := n.SetMembership(wire.Membership{Epoch: 1, Self: "a", Members: m.Members}); !errors.Is(err, peer.ErrStaleEpoch) {
		t.Errorf("a push older than the kept membership: %v, want ErrStaleEpoch", err)
	}
	if err := n.SetMembership(m); err != nil {
		t.Fatal(err)
	}
	if known, _ := n.Known(); !known {
		t.Error("told its membership again, the pod does not know it")
	}
}

// A kept membership that names another pod (a volume that moved) is not restored.
func TestAKeptMembershipOfAnotherPodIsIgnored(t *testing.T) {
	file := filepath.Join(t.TempDir(), "membership.json")
	net := peer.NewNetwork()
	other := nodeIn(t, net, "b", Options{}, 3, member("a"))
	if err := other.Remember(file); err != nil {
		t.Fatal(err)
	}
	if err := other.SetMembership(wire.Membership{Epoch: 4, Self: "b", Members: []wire.Member{member("a"), member("b")}}); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, net, "a", Options{})
	if err := n.Remember(file); err != nil || n.Kept().Epoch != 0 {
		t.Fatalf("restoring another pod's membership: %v, epoch %d; want it ignored", err, n.Kept().Epoch)
	}
}

// A pod restarted while the end of a move waits for the members still writes to the move's
// writers, as it did before: the members that hold the moving membership still read from its
// previous owners. Its peers here answer epoch 0, so the wait never ends.
func TestARestartDuringTheEndOfAMoveKeepsTheMovesWriters(t *testing.T) {
	for _, await := range []bool{false, true} {
		file := filepath.Join(t.TempDir(), "membership.json")
		net := peer.NewNetwork()
		joinFake(net, "b", &fakePeer{apply: allApplied}, nil)
		joinFake(net, "c", &fakePeer{apply: allApplied}, nil)
		first := newNode(t, net, "a", Options{Timeout: time.Second, AwaitMembership: await})
		if err := first.Remember(file); err != nil {
			t.Fatal(err)
		}
		for _, epoch := range []uint64{2, 3} {
			if err := first.SetMembership(moveMembership("a", epoch)); err != nil {
				t.Fatal(err)
			}
		}
		first.Close()
		net.Leave("a")

		after := newNode(t, net, "a", Options{Timeout: time.Second, AwaitMembership: await})
		if err := after.Remember(file); err != nil {
			t.Fatal(err)
		}
		rt := after.Route("f", 4)
		for p := range 4 {
			if w := slices.Sorted(slices.Values(rt.Writers(p))); !slices.Equal(w, []string{"a", "b", "c"}) {
				t.Errorf("awaiting the membership %v: partition %d after the restart is written to %v; want the move's writers a, b and c", await, p, w)
			}
		}
	}
}
