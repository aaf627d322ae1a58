package replication

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A placed add sends each peer one write of all the keys it is a writer of, and counts every set
// of keys over its own writers: a set of two writers with one of them down falls short at
// quorum, a set this pod and a live peer hold does not.
func TestAddPlacedSendsEachPeerOneWriteAndCountsEachSet(t *testing.T) {
	var mu sync.Mutex
	var got []peer.Op
	net := peer.NewNetwork()
	b := joinFake(net, "b", &fakePeer{apply: func(ops []peer.Op) ([]peer.Outcome, error) {
		mu.Lock()
		got = append(got, ops...)
		mu.Unlock()
		return allApplied(ops)
	}}, nil)
	n := nodeIn(t, net, "a", Options{}, 1, b, member("c")) // c never joined the network: it is down
	sets := []PlacedKeys{
		{Writers: []string{"a", "b"}, Keys: []string{"k1", "k2"}, Applied: true},
		{Writers: []string{"b", "c"}, Keys: []string{"k3"}},
		{Writers: []string{"a", "c"}, Keys: []string{"k4"}, Applied: true},
	}
	if err := n.AddPlaced(t.Context(), wire.ConsistencyOne, "f", 1, sets, nil, 0); err != nil {
		t.Fatalf("consistency one: %v; every set has a writer that holds its keys", err)
	}
	mu.Lock()
	if len(got) != 1 || got[0].Kind != peer.OpAdd || strings.Join(got[0].AllKeys(), ",") != "k1,k2,k3" {
		t.Errorf("b got %+v, want one add of k1, k2 and k3", got)
	}
	got = nil
	mu.Unlock()

	err := n.AddPlaced(t.Context(), wire.ConsistencyQuorum, "f", 1, sets[:1], nil, 0)
	if err != nil {
		t.Fatalf("quorum of a and b: %v", err)
	}
	err = n.AddPlaced(t.Context(), wire.ConsistencyQuorum, "f", 1, sets, nil, 0)
	if !errors.Is(err, ErrReplication) || !strings.Contains(err.Error(), "(b, c)") && !strings.Contains(err.Error(), "(a, c)") {
		t.Fatalf("quorum with c down: %v, want a replication error naming a set with c", err)
	}
}
