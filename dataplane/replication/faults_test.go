package replication

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// Replication through the faults of a network, in memory: three real nodes, each over a store of
// its own, reach each other through a peer.Network that cuts links, delays them and loses
// answers.

// threeNodes are the nodes a, b and c of one membership, holding the filter f.
func threeNodes(t *testing.T, opts Options) (*peer.Network, map[string]*Node) {
	t.Helper()
	net := peer.NewNetwork()
	nodes := map[string]*Node{}
	for _, self := range []string{"a", "b", "c"} {
		var others []wire.Member
		for _, o := range []string{"a", "b", "c"} {
			if o != self {
				others = append(others, member(o))
			}
		}
		nodes[self] = nodeIn(t, net, self, opts, 1, others...)
	}
	write(t, nodes["a"], wire.ConsistencyAll, peer.Op{Kind: peer.OpCreate, Name: "f", Generation: generation, Options: nodesOptions()})
	return net, nodes
}

// nodesOptions are the options of the tests' filters.
func nodesOptions() *filter.Options { return &filter.Options{Capacity: 1000, FPP: 0.01} }

// generation is the incarnation of the tests' filter f: a moment in the past, as a create's is.
var generation = time.Now().Add(-time.Minute).UnixNano()

// write applies op on n, then replicates it at level, and fails the test when either fails.
func write(t *testing.T, n *Node, level wire.Consistency, op peer.Op) {
	t.Helper()
	if err := writeErr(t, n, level, op); err != nil {
		t.Fatal(err)
	}
}

func writeErr(t *testing.T, n *Node, level wire.Consistency, op peer.Op) error {
	t.Helper()
	if applied, err := n.Apply([]peer.Op{op}); err != nil || applied[0] != peer.Holds {
		t.Fatalf("applying %+v on %s: %v, %v", op, n.Self(), applied, err)
	}
	return n.Replicate(t.Context(), op, level)
}

func addOf(key string) peer.Op {
	return peer.Op{Kind: peer.OpAdd, Name: "f", Generation: generation, Keys: []string{key}}
}

// holds reports whether n's filter f holds key.
func holds(n *Node, key string) bool {
	f, ok := n.opts.Store.Lookup("f")
	return ok && f.CheckMany([]string{key})[0]
}

// A write at consistency all fails while a peer is cut off, one at quorum does not; the cut-off
// peer lacks it until a repair from a peer that holds it.
func TestWritesAcrossAPartitionAndTheirRepair(t *testing.T) {
	net, nodes := threeNodes(t, Options{Timeout: time.Second})
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	net.Cut("a", "c")
	if err := writeErr(t, a, wire.ConsistencyAll, addOf("x")); !errors.Is(err, ErrReplication) {
		t.Fatalf("a write at all with c cut off: %v, want ErrReplication", err)
	}
	if err := writeErr(t, a, wire.ConsistencyQuorum, addOf("y")); err != nil {
		t.Fatalf("a write at quorum with c cut off: %v", err)
	}
	if !holds(b, "x") || !holds(b, "y") || holds(c, "x") || holds(c, "y") {
		t.Fatalf("b holds x %v, y %v; c holds x %v, y %v; want b both and c neither",
			holds(b, "x"), holds(b, "y"), holds(c, "x"), holds(c, "y"))
	}
	if _, err := c.Repair(t.Context(), member("a"), 0); err == nil {
		t.Fatal("a repair of c from a across the cut: no error")
	}
	net.Heal()
	await.True(t, 10*time.Second, "c's probe to find a again", func() bool { return !c.peerDown("a") })
	if rep, err := c.Repair(t.Context(), member("a"), 0); err != nil || rep.Merged != 1 {
		t.Fatalf("a repair of c from a once healed: %+v, %v; want f merged", rep, err)
	}
	if !holds(c, "x") || !holds(c, "y") {
		t.Fatal("after the repair, c lacks a write a acknowledged")
	}
}

// A peer whose answers are lost applied the write all the same: the writer counts it as failed,
// and cannot tell the two apart.
func TestALostAnswerFailsAWriteThePeerApplied(t *testing.T) {
	net, nodes := threeNodes(t, Options{Timeout: time.Second})
	net.LoseAnswers("a", "b")
	if err := writeErr(t, nodes["a"], wire.ConsistencyAll, addOf("x")); !errors.Is(err, ErrReplication) {
		t.Fatalf("a write at all whose answer from b is lost: %v, want ErrReplication", err)
	}
	if !holds(nodes["b"], "x") {
		t.Fatal("b lacks the write, which reached it")
	}
	// The write failed as soon as it could not reach all, perhaps before c applied it.
	await.True(t, 10*time.Second, "c to hold the write", func() bool { return holds(nodes["c"], "x") })
}

// A peer slower than the replication timeout fails the writes that wait for it, and not those
// that need fewer pods.
func TestADelayedPeerFailsOnlyTheWritesThatWaitForIt(t *testing.T) {
	net, nodes := threeNodes(t, Options{Timeout: 200 * time.Millisecond})
	net.Delay("a", "c", time.Second)
	if err := writeErr(t, nodes["a"], wire.ConsistencyAll, addOf("x")); !errors.Is(err, ErrReplication) {
		t.Fatalf("a write at all with c slower than the timeout: %v, want ErrReplication", err)
	}
	if err := writeErr(t, nodes["a"], wire.ConsistencyQuorum, addOf("y")); err != nil {
		t.Fatalf("a write at quorum with c slow: %v", err)
	}
}

// A pod that joins catches up from its peers before it is ready: it then holds what they held.
func TestAJoiningPodCatchesUpBeforeItIsReady(t *testing.T) {
	net, nodes := threeNodes(t, Options{})
	write(t, nodes["a"], wire.ConsistencyAll, addOf("x"))
	d := newNode(t, net, "d", Options{AwaitMembership: true})
	if d.Ready() {
		t.Fatal("a pod that awaits its membership is ready before it")
	}
	go d.Run(t.Context())
	if err := d.SetMembership(wire.Membership{Epoch: 2, Self: "d", Members: []wire.Member{member("a"), member("b"), member("c"), member("d")}}); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "d to catch up", d.Ready)
	if !holds(d, "x") {
		t.Fatal("d is ready without a write its peers held")
	}
}

// A home cut off from the pod does not serve the requests forwarded to it: Forward fails, so that
// the caller answers that the home did not serve it (503 code 13).
func TestForwardToAHomeCutOff(t *testing.T) {
	net := peer.NewNetwork()
	served := 0
	home := joinFake(net, "home", &fakePeer{}, func(w http.ResponseWriter, _ *http.Request) {
		served++
		_, _ = w.Write([]byte("false"))
	})
	n := nodeIn(t, net, "self", Options{}, 1, home)
	if a, err := n.Forward(t.Context(), home, http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`)); err != nil || a.Status != http.StatusOK {
		t.Fatalf("a forward to a reachable home: %+v, %v", a, err)
	}
	net.Cut("self", "home")
	if _, err := n.Forward(t.Context(), home, http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`)); err == nil {
		t.Fatal("a forward to a home cut off: no error, want one, which the caller answers with code 13")
	}
	if served != 1 || net.Calls("self", "home") != 2 {
		t.Errorf("the home served %d requests of %d calls, want 1 of 2", served, net.Calls("self", "home"))
	}
}
