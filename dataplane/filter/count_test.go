package filter

import (
	"testing"
)

// Describing a filter reads counts of the bits set that the engine keeps as it sets them: a GET
// of a filter of gigabytes used to count every bit, for seconds of CPU while writers waited. The
// kept counts must stay the counts of the bits, whatever set them: single and batched adds, a
// layer grown on the way, merges into a layer held and of a layer not yet held, and a restore.
func TestKeptCountsAreTheBitsSet(t *testing.T) {
	s := NewStore(Limits{}, nil)
	opts := Options{Capacity: 500, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Partitions: 2}
	f := mustCreate(t, s, "f", opts)
	for _, k := range keys("one", 300) {
		if _, err := f.CheckAndSet(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.AddMany(append(keys("many", 1500), keys("one", 300)...)); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, f, "after adds")

	// A merge from a filter with more layers: ORed into the layers held, new ones taken whole.
	other := mustCreate(t, s, "other", opts)
	if err := other.AddMany(keys("other", 4000)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.MergeBits(other.State()); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, f, "after a merge")

	restored := NewStore(Limits{}, nil)
	if err := restored.Restore(f.State()); err != nil {
		t.Fatal(err)
	}
	g, err := restored.Get("f")
	if err != nil {
		t.Fatal(err)
	}
	wantCounted(t, g, "after a restore")
	if a, b := f.Info(), g.Info(); a.FillRatio != b.FillRatio || a.EstimatedFPP != b.EstimatedFPP {
		t.Errorf("restored: fill %v fpp %v, want the original's %v %v", b.FillRatio, b.EstimatedFPP, a.FillRatio, a.EstimatedFPP)
	}
}

// wantCounted fails unless f's kept count of every layer is the number of its bits set.
func wantCounted(t *testing.T, f *Filter, when string) {
	t.Helper()
	var bits, set uint64
	for _, p := range f.held() {
		p.mu.RLock()
		if len(p.layers) < 2 {
			t.Errorf("%s: partition %d has %d layers, want a grown one", when, p.index, len(p.layers))
		}
		for i, layer := range p.layers {
			counted := layer.BitSet().Count()
			if p.ones[i] != uint64(counted) {
				t.Errorf("%s: partition %d layer %d keeps %d bits set, holds %d", when, p.index, i, p.ones[i], counted)
			}
			bits += uint64(layer.Cap())
			set += uint64(counted)
		}
		p.mu.RUnlock()
	}
	if info, want := f.Info(), float64(set)/float64(bits); info.FillRatio != want {
		t.Errorf("%s: fill ratio %v, want %v", when, info.FillRatio, want)
	}
}
