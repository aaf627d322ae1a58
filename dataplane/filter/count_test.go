package filter

import (
	"testing"
)

// Describing a filter counts every bit it holds. A GET of a filter of gigabytes counted them all
// under one hold of the read lock, and every write to it waited seconds: the count now holds the
// lock for at most countChunkWords at a time, which this test checks by counting what each hold
// covers and taking the lock for writing between them (BenchmarkWriteDuringInfo measures what a
// writer waits).
func TestCountHoldsTheLockForOneChunkAtATime(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "f", Options{Capacity: 3_000_000, FPP: 0.01}) // 3.4 MiB: four chunks
	if err := f.AddMany(keys("k", 10_000)); err != nil {
		t.Fatal(err)
	}
	p := f.partList()[0]
	words := p.layers[0].BitSet().Words()
	if len(words) <= 2*countChunkWords {
		t.Fatalf("the layer has %d words, want more than two chunks of %d", len(words), countChunkWords)
	}
	var holds, counted int
	onCountChunk = func(n int) {
		holds++
		counted += n
		if n > countChunkWords {
			t.Errorf("one hold of the lock counted %d words, more than a chunk of %d", n, countChunkWords)
		}
		// Between chunks a writer takes the lock at once.
		if !p.mu.TryLock() {
			t.Errorf("after chunk %d the count still holds the lock", holds)
			return
		}
		p.mu.Unlock()
	}
	defer func() { onCountChunk = nil }()
	info := f.Info()
	if want := (len(words) + countChunkWords - 1) / countChunkWords; holds != want || counted != len(words) {
		t.Errorf("counted %d words in %d holds of the lock, want %d in %d", counted, holds, len(words), want)
	}
	if want := float64(p.layers[0].BitSet().Count()) / float64(p.layers[0].Cap()); info.FillRatio != want {
		t.Errorf("fill ratio %v, want %v", info.FillRatio, want)
	}
}
