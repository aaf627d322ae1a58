package filter

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
)

// referenceCheckAndSet is the engine's check-and-set written the plain way, key by key with
// bloom.Locations: the batch path must answer and set exactly what it does.
func referenceCheckAndSet(layers *[]*bloom.BloomFilter, newestItems *uint64, opts Options, key string) bool {
	var maxK uint
	for _, l := range *layers {
		maxK = max(maxK, l.K())
	}
	locs := bloom.Locations([]byte(key), maxK)
	for _, l := range *layers {
		if l.TestLocations(locs[:l.K()]) {
			return true
		}
	}
	shape, _ := opts.LayerShape(len(*layers) - 1)
	if *newestItems >= shape.Capacity {
		next, _ := opts.LayerShape(len(*layers))
		*layers = append(*layers, bloom.New(next.Bits, next.Hashes))
		*newestItems = 0
	}
	newest := (*layers)[len(*layers)-1]
	for _, loc := range bloom.Locations([]byte(key), newest.K()) {
		newest.BitSet().Set(uint(loc % uint64(newest.Cap())))
	}
	*newestItems++
	return false
}

// Batches of every size, with keys repeated inside a batch and across batches, across several
// layer growths, answer and set the bits of the key-by-key reference, and CheckMany agrees with
// Check.
func TestBatchesMatchKeyByKeyReference(t *testing.T) {
	opts := scalable(100, 0.01)
	f := mustCreate(t, NewStore(Limits{}, nil), "batch", opts)
	shape, _ := opts.LayerShape(0)
	layers := []*bloom.BloomFilter{bloom.New(shape.Bits, shape.Hashes)}
	var newestItems uint64
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		keys := make([]string, rng.IntN(3*batchChunk+2))
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(rng.IntN(3000)) // about a third repeat
		}
		want := make([]bool, len(keys))
		for i, key := range keys {
			want[i] = referenceCheckAndSet(&layers, &newestItems, opts, key)
		}
		got, err := f.CheckAndSetMany(keys)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: CheckAndSetMany(%v)\n got %v\nwant %v", round, keys, got, want)
		}
		probe := make([]string, 50)
		for i := range probe {
			probe[i] = "k" + strconv.Itoa(rng.IntN(6000))
		}
		many := f.CheckMany(probe)
		for i, key := range probe {
			if one := f.Check(key); one != many[i] {
				t.Fatalf("round %d: Check(%q) = %v, CheckMany says %v", round, key, one, many[i])
			}
		}
	}
	if len(f.partList()[0].layers) != len(layers) || len(layers) < 4 {
		t.Fatalf("engine has %d layers, reference %d; want the same and at least 4", len(f.partList()[0].layers), len(layers))
	}
	for i := range layers {
		// Words, not Equal: the engine's bit sets span whole words (bitset.From), the reference's
		// exactly m bits; the bits are what must agree.
		if f.partList()[0].layers[i].Cap() != layers[i].Cap() || !slices.Equal(f.partList()[0].layers[i].BitSet().Words(), layers[i].BitSet().Words()) {
			t.Fatalf("layer %d differs from the reference", i)
		}
	}
}
