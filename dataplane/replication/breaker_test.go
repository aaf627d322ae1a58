package replication

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// peerDown reports whether the node's breaker holds the peer named name down.
func (n *Node) peerDown(name string) bool { return slices.Contains(n.PeersDown(), name) }

// A home that does not answer is waited for once: until a probe finds it again, the requests
// forwarded to it fail at once, without a call, so that the next pod serves them; once it answers
// a probe, it is called again.
func TestAnUnansweringHomeIsWaitedForOnce(t *testing.T) {
	net := peer.NewNetwork()
	home := joinFake(net, "home", &fakePeer{}, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("false")) })
	n := nodeIn(t, net, "self", Options{Timeout: 100 * time.Millisecond}, 1, home)
	forward := func() error {
		_, err := n.Forward(t.Context(), home, http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`))
		return err
	}
	net.Delay("self", "home", time.Hour) // a peer behind a DROP rule: nothing comes back
	if err := forward(); err == nil {
		t.Fatal("a forward to a home that does not answer: no error")
	}
	calls := net.Calls("self", "home")
	if err := forward(); !errors.Is(err, errPeerDown) || net.Calls("self", "home") != calls {
		t.Fatalf("the next forward: %v after %d more calls; want errPeerDown without a call", err, net.Calls("self", "home")-calls)
	}
	net.Heal()
	await.True(t, 10*time.Second, "the probe to find the home again", func() bool { return !n.peerDown("home") })
	if err := forward(); err != nil {
		t.Fatalf("a forward once the home answers probes: %v", err)
	}
}

// A write at consistency all fails at once while a peer is down, and one at quorum does not wait
// for it.
func TestWritesDoNotWaitForAPeerThatIsDown(t *testing.T) {
	net, nodes := threeNodes(t, Options{Timeout: 100 * time.Millisecond})
	a := nodes["a"]
	net.Delay("a", "c", time.Hour)
	if err := writeErr(t, a, wire.ConsistencyAll, addOf("x")); !errors.Is(err, ErrReplication) {
		t.Fatalf("a write at all with c not answering: %v, want ErrReplication", err)
	}
	await.True(t, 10*time.Second, "a to hold c down", func() bool { return a.peerDown("c") })
	calls := net.Calls("a", "c")
	if err := writeErr(t, a, wire.ConsistencyAll, addOf("y")); !errors.Is(err, ErrReplication) || net.Calls("a", "c") != calls {
		t.Fatalf("a write at all with c down: %v after %d more calls to c; want ErrReplication without a call", err, net.Calls("a", "c")-calls)
	}
	if err := writeErr(t, a, wire.ConsistencyQuorum, addOf("z")); err != nil {
		t.Fatalf("a write at quorum with c down: %v", err)
	}
}

// A peer that answers, even with an error, is reachable: its calls go on being made. A call its
// caller gave up, or gave less than half the replication timeout, says nothing of the peer either.
// A call that was given its time and got no answer holds the peer down.
func TestOnlyACallWithoutAnAnswerHoldsAPeerDown(t *testing.T) {
	net := peer.NewNetwork()
	refusing := &fakePeer{apply: func([]peer.Op) ([]peer.Outcome, error) { return nil, errors.New("refused") }}
	other := joinFake(net, "other", refusing, nil)
	n := nodeIn(t, net, "self", Options{Timeout: time.Second}, 1, other)
	link := n.peer(other)
	apply := func(ctx context.Context) error {
		_, err := link.Apply(ctx, []peer.Op{addOf("x")})
		return err
	}

	if err := apply(t.Context()); err == nil {
		t.Fatal("a batch the peer refuses: no error")
	}
	net.Delay("self", "other", time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := apply(ctx); err == nil {
		t.Fatal("a call its caller gave up: no error")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := apply(ctx); err == nil {
		t.Fatal("a call given 10 ms by a peer delayed an hour: no error")
	}
	if down := n.PeersDown(); len(down) != 0 {
		t.Fatalf("peers held down after an error answered, a call given up and one given 10 ms: %v, want none", down)
	}

	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := apply(ctx); err == nil {
		t.Fatal("a call given the replication timeout by a peer delayed an hour: no error")
	}
	if down := n.PeersDown(); !slices.Equal(down, []string{"other"}) {
		t.Fatalf("peers held down after a call got no answer in the replication timeout: %v, want other", down)
	}
	calls := net.Calls("self", "other")
	err := apply(t.Context())
	if !errors.Is(err, errPeerDown) || net.Calls("self", "other") != calls {
		t.Fatalf("a call to the peer held down: %v after %d more calls; want errPeerDown without a call", err, net.Calls("self", "other")-calls)
	}
	if got := n.FailedFastCalls()["other"]; got != 1 {
		t.Errorf("calls failed fast: %d, want 1", got)
	}
}

// A peer held down that comes back at another address, as a restarted pod does, is a new peer:
// it is called at once.
func TestAPeerBackAtAnotherAddressIsNotHeldDown(t *testing.T) {
	net := peer.NewNetwork()
	home := joinFake(net, "home", &fakePeer{}, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("false")) })
	n := nodeIn(t, net, "self", Options{Timeout: 100 * time.Millisecond}, 1, home)
	net.Delay("self", "home", time.Hour)
	if _, err := n.Forward(t.Context(), home, http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`)); err == nil {
		t.Fatal("a forward to a home that does not answer: no error")
	}
	if down := n.PeersDown(); !slices.Equal(down, []string{"home"}) {
		t.Fatalf("peers held down: %v, want home", down)
	}
	moved := wire.Member{Name: "home", URL: "http://home-again:8090"}
	if err := n.SetMembership(wire.Membership{Epoch: 2, Self: "self", Members: []wire.Member{member("self"), moved}}); err != nil {
		t.Fatal(err)
	}
	if down := n.PeersDown(); len(down) != 0 {
		t.Errorf("peers held down once the home is at another address: %v, want none", down)
	}
}
