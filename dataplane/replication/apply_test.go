package replication

import (
	"strconv"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
)

// Packed keys reach the filter, across ops of one run and past a chunk.
func TestApplyPackedKeys(t *testing.T) {
	n := NewNode(Options{Store: filter.NewStore(filter.Limits{}, nil)})
	defer n.Close()
	opts := filter.Options{Capacity: 100_000, FPP: 0.01}
	gen := time.Now().UnixNano()
	first, second := valuesFor("a", applyChunk+10), valuesFor("b", 3)
	ops, err := peer.DecodeOps(peer.AppendOps(nil, []peer.Op{
		{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: first},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: second},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := n.Apply(ops); err != nil || applied[1] != peer.Holds || applied[2] != peer.Holds {
		t.Fatalf("applied %v, %v", applied, err)
	}
	f, _ := n.opts.Store.Lookup("f")
	for i, ok := range f.CheckMany(append(first, second...)) {
		if !ok {
			t.Fatalf("key %d is missing after the apply", i)
		}
	}
}

func valuesFor(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}
