package filter

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
)

func partitioned(capacity uint64, fpp float64, partitions uint32) Options {
	o := scalable(capacity, fpp)
	o.Partitions = partitions
	return o
}

// A filter split into 8 partitions, each of capacity ⌈n/8⌉ at the filter's rate, filled to its
// capacity and probed with a million values never added, keeps the rate asked for (with three
// standard deviations of the estimate's slack): the partition does not depend on the bit
// positions. Fixed filters, so that no layer's tightening hides a dependence.
func TestPartitionedFilterKeepsItsFalsePositiveRate(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 200,000 values and probes a million")
	}
	const n, fpp, probes = 200_000, 0.01, 1_000_000
	f := mustCreate(t, NewStore(Limits{}, nil), "split", Options{Capacity: n, FPP: fpp, Partitions: 8})
	if err := f.AddMany(values("added-", n)); err != nil {
		t.Fatal(err)
	}
	positives := 0
	for _, present := range f.CheckMany(values("absent-", probes)) {
		if present {
			positives++
		}
	}
	rate := float64(positives) / probes
	slack := 3 * math.Sqrt(fpp*(1-fpp)/probes)
	t.Logf("false positive rate %.5f over %d probes (asked for %.2f; the filter estimates %.5f)", rate, probes, fpp, f.Info().EstimatedFPP)
	if rate > fpp+slack {
		t.Errorf("false positive rate %.5f, more than the %.2f asked for (+%.5f)", rate, fpp, slack)
	}
	if info := f.Info(); info.Items < n*99/100 || info.Layers != 1 {
		t.Errorf("info %+v: want about %d items in one layer per partition", info, n)
	}
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// Every key goes to the partition PartitionOf names, and every partition is a filter of
// ⌈capacity/partitions⌉: many-key answers are those of key-by-key ones, in the request's order,
// with a repeat answering true.
func TestPartitionsTakeTheirKeysInOrder(t *testing.T) {
	opts := partitioned(1001, 1e-9, 4) // a rate at which none of the 3000 new keys tests present
	f := mustCreate(t, NewStore(Limits{}, nil), "split", opts)
	if shape, _ := opts.LayerShape(0); shape.Capacity != 251 {
		t.Errorf("partition capacity %d, want ⌈1001/4⌉ = 251", shape.Capacity)
	}
	keys := append(values("k", 3000), "k7", "k2999")
	got, err := f.CheckAndSetMany(keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, present := range got {
		if want := i >= 3000; present != want {
			t.Fatalf("key %d (%s) answered %v, want %v", i, keys[i], present, want)
		}
	}
	for p, part := range f.partList() {
		if part.items.Load() == 0 || len(part.layers) < 2 {
			t.Errorf("partition %d took %d keys in %d layers; want a share that grew it", p, part.items.Load(), len(part.layers))
		}
	}
	if !slices.Equal(f.CheckMany(keys), slices.Repeat([]bool{true}, len(keys))) {
		t.Error("a key added is not found by CheckMany")
	}
	for _, key := range keys[:100] {
		p := f.partList()[PartitionOf(key, 4)]
		var buf [stackHashes]uint64
		if !p.contains(p.locations(buf[:0], key)) {
			t.Fatalf("%s is not in partition %d", key, PartitionOf(key, 4))
		}
	}
	if info := f.Info(); info.Items < 2950 || info.SizeBytes != f.SizeBytes() || info.Bits == 0 {
		t.Errorf("info %+v", info)
	}
}

// Of concurrent check-and-sets of one new key exactly one answers false, in every partition.
func TestPartitionedCheckAndSetAnswersFalseOnce(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "split", partitioned(1000, 0.001, 8))
	for _, key := range values("race-", 50) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		falses := 0
		for range 8 {
			wg.Go(func() {
				present, err := f.CheckAndSet(key)
				if err != nil {
					t.Error(err)
				}
				if !present {
					mu.Lock()
					falses++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if falses != 1 {
			t.Fatalf("%s: %d check-and-sets answered false, want 1", key, falses)
		}
	}
}

// A batch refused by the per-partition limit in one partition answers the keys before the first
// refused one, whatever the order of the partitions; those are all in the filter.
func TestPartitionedBatchStopsAtTheFirstRefusedKey(t *testing.T) {
	opts := partitioned(100, 0.01, 4)
	first, _ := opts.LayerShape(0)
	s := NewStore(Limits{FilterBytes: first.SizeBytes()}, nil) // no partition may grow
	f := mustCreate(t, s, "split", opts)
	keys := values("k", 1000)
	got, err := f.CheckAndSetMany(keys)
	if err == nil || len(got) == len(keys) {
		t.Fatalf("answered %d of %d keys, err %v; want the limit to stop the batch", len(got), len(keys), err)
	}
	// The first refused key is the first that found its partition full.
	seen := make([]int, 4)
	full := len(keys)
	for i, key := range keys {
		p := PartitionOf(key, 4)
		if seen[p]++; seen[p] > int(first.Capacity) {
			full = i
			break
		}
	}
	if len(got) != full {
		t.Errorf("answered %d keys, want the %d before the first key whose partition is full", len(got), full)
	}
	for i, present := range f.CheckMany(keys[:len(got)]) {
		if !present {
			t.Fatalf("key %d answered but not in the filter", i)
		}
	}
	if s.UsedBytes() != 4*first.SizeBytes()+FilterOverhead {
		t.Errorf("budget holds %d, want 4 first layers and the overhead, %d", s.UsedBytes(), 4*first.SizeBytes()+FilterOverhead)
	}
}

// A partitioned filter's state restores and merges partition by partition, and a state of
// another partition count is refused.
func TestPartitionedStateRestoresAndMerges(t *testing.T) {
	opts := partitioned(200, 0.01, 3)
	a := mustCreate(t, NewStore(Limits{}, nil), "split", opts)
	if err := a.AddMany(values("a", 2000)); err != nil {
		t.Fatal(err)
	}
	st := a.State()
	if len(st.Parts) != 3 || st.Items() != a.Items() {
		t.Fatalf("state of %d partitions, %d items; want 3, %d", len(st.Parts), st.Items(), a.Items())
	}
	restored := NewStore(Limits{}, nil)
	if err := restored.Restore(st); err != nil {
		t.Fatal(err)
	}
	b, _ := restored.Get("split")
	if a.Digest().Generation != b.Digest().Generation || !slices.Equal(a.Digest().Layers(), b.Digest().Layers()) {
		t.Error("restored filter differs from the original")
	}
	if err := b.AddMany(values("b", 500)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MergeBits(b.State()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Digest().Layers(), b.Digest().Layers()) {
		t.Error("after the merge the replicas differ")
	}
	for i, present := range a.CheckMany(values("b", 500)) {
		if !present {
			t.Fatalf("b%d missing after the merge", i)
		}
	}
	other := mustCreate(t, NewStore(Limits{}, nil), "split", partitioned(200, 0.01, 2))
	if _, err := other.MergeBits(st); err == nil {
		t.Error("a state of 3 partitions merged into a filter of 2")
	}
	st.Parts = st.Parts[:2]
	if err := NewStore(Limits{}, nil).Restore(st); err == nil {
		t.Error("a state missing a partition restored")
	}
}

// The fewest partitions, a power of two, whose partition's first layer fits the limit.
func TestAutoPartitions(t *testing.T) {
	opts := Options{Capacity: 10_000_000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5}
	whole, _ := opts.LayerShape(0)
	for _, tc := range []struct {
		limit uint64
		want  uint32
	}{
		{0, 1},
		{whole.SizeBytes(), 1},
		{whole.SizeBytes() - 1, 2},
		{whole.SizeBytes()/3 + 1, 4},
		{1, MaxPartitions},
	} {
		if got := opts.AutoPartitions(tc.limit); got != tc.want {
			t.Errorf("limit %d: %d partitions, want %d", tc.limit, got, tc.want)
		}
	}
}

// TestPartitionsAreEven spreads a million values over 8 partitions.
func TestPartitionsAreEven(t *testing.T) {
	const values, partitions = 1_000_000, 8
	var count [partitions]int
	for i := range values {
		count[PartitionOf("user:"+strconv.Itoa(i), partitions)]++
	}
	for p, c := range count {
		if share := float64(c) / values; math.Abs(share-1.0/partitions) > 0.005 {
			t.Errorf("partition %d holds %.4f of the values, want %.4f", p, share, 1.0/partitions)
		}
	}
	if PartitionOf("anything", 1) != 0 || PartitionOf("anything", 0) != 0 {
		t.Error("a filter of one partition has only partition 0")
	}
}
