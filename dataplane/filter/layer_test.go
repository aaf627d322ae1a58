package filter

import (
	"runtime"
	"testing"
	"time"
)

// Large bit arrays live outside the heap and go back to the system once their filter is gone
// and unreachable; small ones stay in the heap.
func TestLargeLayersAreUnmappedWhenUnreachable(t *testing.T) {
	before := settledOffHeapBytes()
	s := NewStore(Limits{}, nil)
	small := mustCreate(t, s, "small", Options{Capacity: 100, FPP: 0.01})
	if got := offHeapBytes.Load(); got != before {
		t.Fatalf("a %d-byte filter mapped %d bytes outside the heap", small.SizeBytes(), got-before)
	}
	big := mustCreate(t, s, "big", Options{Capacity: 1_000_000, FPP: 0.01})
	if got := offHeapBytes.Load() - before; got != int64(big.SizeBytes()) {
		t.Fatalf("a %d-byte filter mapped %d bytes", big.SizeBytes(), got)
	}
	if err := big.AddMany([]string{"a", "b"}); err != nil || !big.Check("a") || big.Check("zzz") {
		t.Fatalf("the mapped filter does not work: %v", err)
	}
	big = nil //nolint:wastedassign // drops the last reference before the collections below
	if _, _, err := s.Delete("big"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for offHeapBytes.Load() != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still mapped after the filter was deleted", offHeapBytes.Load()-before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// settledOffHeapBytes collects until the filters of earlier tests are unmapped, so that only
// this test's filters move the count.
func settledOffHeapBytes() int64 {
	last := int64(-1)
	for stable := 0; stable < 3; {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		if now := offHeapBytes.Load(); now == last {
			stable++
		} else {
			last, stable = now, 0
		}
	}
	return last
}
