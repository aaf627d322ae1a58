package replication

import (
	"net/http"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The replication logic's tests run their pods in a peer.Network: in memory, with partitions,
// delays and lost answers, without a socket.

// member is the member name of a test cluster.
func member(name string) wire.Member { return wire.Member{Name: name, URL: "http://" + name + ":8090"} }

// fakePeer is a peer that a test scripts: batches of writes go to apply (nil: every write
// applied), and its inventory and membership are those of inventory and membership (nil: empty).
type fakePeer struct {
	apply      func(ops []peer.Op) ([]peer.Outcome, error)
	inventory  func() wire.Inventory
	membership func() wire.Membership
}

func (f *fakePeer) Apply(ops []peer.Op) ([]peer.Outcome, error) {
	if f.apply == nil {
		return make([]peer.Outcome, len(ops)), nil
	}
	return f.apply(ops)
}

func (f *fakePeer) Inventory() wire.Inventory {
	if f.inventory == nil {
		return wire.Inventory{}
	}
	return f.inventory()
}

func (f *fakePeer) Membership() wire.Membership {
	if f.membership == nil {
		return wire.Membership{}
	}
	return f.membership()
}

func (*fakePeer) CheckRoom(string, filter.Options) error { return nil }
func (*fakePeer) SetMembership(wire.Membership) error    { return nil }
func (*fakePeer) PlacementStatus() wire.PlacementStatus  { return wire.PlacementStatus{} }

// joinFake joins f to net as the pod name, serving forwarded requests with handle (nil refuses
// them), and answers its member.
func joinFake(net *peer.Network, name string, f *fakePeer, handle http.HandlerFunc) wire.Member {
	var h http.Handler
	if handle != nil {
		h = handle
	}
	net.Join(name, peer.NewServer(peer.ServerOptions{Host: f, MaxRequestBytes: 1 << 20}), h)
	return member(name)
}

// allApplied applies every op.
func allApplied(ops []peer.Op) ([]peer.Outcome, error) {
	applied := make([]peer.Outcome, len(ops))
	for i := range applied {
		applied[i] = peer.Holds
	}
	return applied, nil
}

// newNode is the pod self of net, over a store of its own, which its peers reach through net.
func newNode(t testing.TB, net *peer.Network, self string, opts Options) *Node {
	t.Helper()
	if opts.Store == nil {
		opts.Store = filter.NewStore(filter.Limits{}, nil)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	opts.PodName, opts.Transport = self, net.From(self)
	n := NewNode(opts)
	t.Cleanup(n.Close)
	net.Join(self, peer.NewServer(peer.ServerOptions{Host: n, Store: opts.Store, MaxRequestBytes: 1 << 20}), nil)
	return n
}

// nodeIn is newNode told a membership of itself and others, at epoch.
func nodeIn(t testing.TB, net *peer.Network, self string, opts Options, epoch uint64, others ...wire.Member) *Node {
	t.Helper()
	n := newNode(t, net, self, opts)
	if err := n.SetMembership(wire.Membership{Epoch: epoch, Self: self, Members: append([]wire.Member{member(self)}, others...)}); err != nil {
		t.Fatal(err)
	}
	return n
}
