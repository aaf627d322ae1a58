package replication

import (
	"errors"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A write of several ops (a loaded chunk's pieces) counts a peer once it holds every one: a peer
// that applied the first piece and not the second counts as a failure, so the write reaches
// quorum (this pod and the peer that applied both) and not all.
func TestReplicateAllCountsAPeerThatHoldsEveryOp(t *testing.T) {
	net := peer.NewNetwork()
	partial := joinFake(net, "partial", &fakePeer{apply: func(ops []peer.Op) ([]peer.Outcome, error) {
		applied := make([]peer.Outcome, len(ops))
		for i, op := range ops {
			if op.Load.Offset == 0 { // the first piece only
				applied[i] = peer.Holds
			}
		}
		return applied, nil
	}}, nil)
	whole := joinFake(net, "whole", &fakePeer{apply: allApplied}, nil)
	n := nodeIn(t, net, "self", Options{}, 1, partial, whole)
	ops := []peer.Op{
		{Kind: peer.OpLoad, Name: "f", Generation: 1, Load: &filter.Load{Offset: 0, Bytes: make([]byte, 8)}},
		{Kind: peer.OpLoad, Name: "f", Generation: 1, Load: &filter.Load{Offset: 8, Bytes: make([]byte, 8)}},
	}
	if err := n.ReplicateAll(t.Context(), ops, wire.ConsistencyQuorum, nil); err != nil {
		t.Errorf("at quorum: %v", err)
	}
	if err := n.ReplicateAll(t.Context(), ops, wire.ConsistencyAll, nil); !errors.Is(err, ErrReplication) {
		t.Errorf("at all, with a peer that holds half of the write: %v, want ErrReplication", err)
	}
	// Named writers count alone: the whole peer and this pod are all of them.
	if err := n.ReplicateAll(t.Context(), ops, wire.ConsistencyAll, []string{"self", "whole"}); err != nil {
		t.Errorf("at all, to the writers self and whole: %v", err)
	}
}
