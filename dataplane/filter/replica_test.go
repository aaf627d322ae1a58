package filter

import (
	"fmt"
	"slices"
	"testing"
)

// replicaPair is two stores holding one incarnation of a filter, as two pods do after a
// replicated create.
func replicaPair(t *testing.T, opts Options) (a, b *Store, fa, fb *Filter) {
	t.Helper()
	a, b = NewStore(Limits{}, nil), NewStore(Limits{}, nil)
	fa = mustCreate(t, a, "f", opts)
	if created, err := b.CreateReplica("f", opts, fa.Created(), All); !created || err != nil {
		t.Fatalf("CreateReplica = %v, %v", created, err)
	}
	fb = mustGet(t, b, "f")
	if fa.Generation() != fb.Generation() {
		t.Fatalf("replicas of one create have generations %d and %d", fa.Generation(), fb.Generation())
	}
	return a, b, fa, fb
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// Two replicas that took different keys, and so grew different numbers of layers, merge into
// one that holds every key of both: exactly, layer by layer.
func TestMergeOfReplicasThatGrewDifferently(t *testing.T) {
	a, b, fa, fb := replicaPair(t, scalable(1000, 0.01))
	onA, onB := keys("a", 5000), keys("b", 500)
	if err := fa.AddMany(onA); err != nil {
		t.Fatal(err)
	}
	if err := fb.AddMany(onB); err != nil {
		t.Fatal(err)
	}
	if fa.Info().Layers <= fb.Info().Layers {
		t.Fatalf("want a with more layers than b, got %d and %d", fa.Info().Layers, fb.Info().Layers)
	}
	resB, err := b.Merge(fa.State())
	if err != nil {
		t.Fatal(err)
	}
	resA, err := a.Merge(fb.State())
	if err != nil {
		t.Fatal(err)
	}
	if resB.Installed || resA.Installed || resB.LayersChanged == 0 || resA.LayersChanged == 0 {
		t.Fatalf("merges into the same incarnation: %+v and %+v", resA, resB)
	}
	for _, f := range []*Filter{fa, fb} {
		for _, k := range append(onA, onB...) {
			if !f.Check(k) {
				t.Fatalf("after the merges a replica lacks %q", k)
			}
		}
	}
	if da, db := fa.Digest(), fb.Digest(); !sameLayers(da, db) {
		t.Fatalf("merged replicas differ: %v and %v", da.Parts, db.Parts)
	}
	// Merging again changes nothing: OR is idempotent.
	if res, err := a.Merge(fb.State()); err != nil || res.LayersChanged != 0 {
		t.Fatalf("a second merge = %+v, %v; want no change", res, err)
	}
}

func sameLayers(a, b Digest) bool {
	return a.Generation == b.Generation && slices.EqualFunc(a.Parts, b.Parts, slices.Equal)
}
