package filter

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// A merge is what a client may send: a state it made up must be refused whole, before a bit of
// it is applied, and nothing it holds may make the filter's description NaN.

// poisonTail sets the bits past m in the last word of every layer of st that has bits.
func poisonTail(st State) {
	for _, l := range st.AllLayers() {
		if l.Words != nil && l.Bits%64 != 0 {
			l.Words[len(l.Words)-1] |= ^uint64(0) << (l.Bits % 64)
		}
	}
}

func TestMergeRefusesBitsPastTheLayersSize(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f := mustCreate(t, s, "f", Options{Capacity: 1000, FPP: 0.01}) // m = 9586: 50 bits in the last word
	if err := f.AddMany(keys("k", 100)); err != nil {
		t.Fatal(err)
	}
	before := f.Digest()
	st := f.State()
	st.Parts[0].Layers[0].Words[0] = ^uint64(0) // bits that would be applied if the merge went on
	poisonTail(st)
	_, err := f.MergeBits(st)
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "bits set past its m=9586") {
		t.Fatalf("MergeBits of bits past m = %v, want ErrInvalidOptions naming them", err)
	}
	if !sameLayers(before, f.Digest()) {
		t.Fatal("a refused merge changed the filter's bits")
	}
	if info := f.Info(); info.FillRatio > 1 || math.IsNaN(info.EstimatedFPP) {
		t.Fatalf("after a refused merge: fill %v, fpp %v", info.FillRatio, info.EstimatedFPP)
	}
}

func TestMergeRefusesCountsNoFilterReaches(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "f", scalable(1000, 0.01))
	for name, poison := range map[string]func(*PartState){
		"more items in the newest layer than in all":   func(p *PartState) { p.Items, p.NewestItems = 5, 6 },
		"more items in the newest layer than it holds": func(p *PartState) { p.Items, p.NewestItems = 1<<40, 1<<40 },
	} {
		st := f.State()
		poison(&st.Parts[0])
		if _, err := f.MergeBits(st); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: MergeBits = %v, want ErrInvalidOptions", name, err)
		}
	}
	if info := f.Info(); info.Items != 0 {
		t.Errorf("refused merges counted %d items", info.Items)
	}
}

// A merge that needs more layers than the memory limit admits applies none of its bits, not even
// those of the layers the filter already has, and gives back the memory it took for the others.
func TestMergeRefusedForMemoryAppliesNothing(t *testing.T) {
	src := mustCreate(t, NewStore(Limits{}, nil), "f", scalable(1000, 0.01))
	if err := src.AddMany(keys("k", 7000)); err != nil { // layers of 1000, 2000, 4000: three full, a fourth
		t.Fatal(err)
	}
	st := src.State()
	if len(st.Parts[0].Layers) < 3 {
		t.Fatalf("the source has %d layers, want at least 3", len(st.Parts[0].Layers))
	}
	shape1, _ := st.Options.LayerShape(1)
	// Room for the filter and its second layer, not the third.
	dstStore := NewStore(Limits{TotalBytes: FilterOverhead + mustShape(t, st.Options, 0).SizeBytes() + shape1.SizeBytes() + 8}, nil)
	dst := mustCreate(t, dstStore, "f", st.Options)
	before, used := dst.Digest(), dstStore.UsedBytes()
	if _, err := dst.MergeBits(st); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("MergeBits beyond the memory limit = %v, want ErrOutOfMemory", err)
	}
	if !sameLayers(before, dst.Digest()) {
		t.Fatal("a merge refused for memory changed the filter's bits")
	}
	if got := dstStore.UsedBytes(); got != used {
		t.Fatalf("a refused merge left %d bytes in use, %d before", got, used)
	}
}

func mustShape(t *testing.T, o Options, i int) LayerShape {
	t.Helper()
	shape, err := o.LayerShape(i)
	if err != nil {
		t.Fatal(err)
	}
	return shape
}

// A last access in the future would keep a filter that expires after access alive for ever.
func TestMergeTakesNoLastAccessFromTheFuture(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	opts := Options{Capacity: 1000, FPP: 0.01, ValidAfterAccess: time.Hour}
	f := mustCreate(t, NewStore(Limits{}, func() time.Time { return now }), "f", opts)
	st := f.State()
	st.LastAccess = time.Unix(0, math.MaxInt64)
	if _, err := f.MergeBits(st); err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Hour); !f.Expiry().Equal(want) {
		t.Fatalf("after a merge from the future the filter expires at %v, want %v", f.Expiry(), want)
	}
}

// Bits past m that a filter already holds (merged in by a version that did not refuse them) are
// not counted, and a restore clears them.
func TestBitsPastTheLayersSizeAreNeitherCountedNorRestored(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f := mustCreate(t, s, "f", Options{Capacity: 1000, FPP: 0.01})
	p := f.partList()[0]
	words := p.layers[0].BitSet().Words()
	for i := range words {
		words[i] = ^uint64(0)
	}
	p.ones[0] = countOnes(words) // as the merge that set them would have counted them
	info := f.Info()
	if info.FillRatio != 1 || info.EstimatedFPP != 1 {
		t.Fatalf("a filter of every bit set, and more: fill %v, fpp %v; want 1 and 1", info.FillRatio, info.EstimatedFPP)
	}
	st := f.State()
	restored := NewStore(Limits{}, nil)
	if err := restored.RestoreFilling(withoutWords(st), func(layers [][]uint64) error {
		copy(layers[0], st.Parts[0].Layers[0].Words)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if tail := tailBits(mustGet(t, restored, "f").State().Parts[0].Layers[0].Words, st.Parts[0].Layers[0].Bits); tail != 0 {
		t.Fatalf("the restored filter keeps bits past m: %#x", tail)
	}
}

func withoutWords(st State) State {
	out := st
	out.Parts = make([]PartState, len(st.Parts))
	for i, p := range st.Parts {
		out.Parts[i] = p
		out.Parts[i].Layers = make([]LayerState, len(p.Layers))
		for j, l := range p.Layers {
			out.Parts[i].Layers[j] = LayerState{Bits: l.Bits, Hashes: l.Hashes}
		}
	}
	return out
}
