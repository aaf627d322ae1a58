package persist

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// largeFilterBytes is well above streamChunkWords, so a snapshot streams the filter.
const largeFilterBytes = 16 << 20

// heapAllocated is the heap the calling goroutine's work allocated while fn ran (every goroutine's
// in fact, which in these tests is fn's alone).
func heapAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// largeOptions are a fixed filter of about largeFilterBytes.
func largeOptions() filter.Options {
	// At fpp 0.01 a value takes about 9.6 bits.
	return filter.Options{Capacity: largeFilterBytes * 8 / 10, FPP: 0.01}
}

// TestSnapshotAndRecoveryHoldNoCopyOfALargeFilter bounds the heap that a snapshot and a recovery
// of a 16 MiB filter allocate: a snapshot streams it from its layers a chunk at a time, and
// recovery reads it straight into the memory it keeps. Either copying the filter whole would
// allocate its size.
func TestSnapshotAndRecoveryHoldNoCopyOfALargeFilter(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	large := mustCreate(t, store, "large", largeOptions())
	if large.SizeBytes() < largeFilterBytes*9/10 {
		t.Fatalf("the filter takes %d bytes, want about %d", large.SizeBytes(), largeFilterBytes)
	}
	if err := large.AddMany(keys("v", 10_000)); err != nil {
		t.Fatal(err)
	}
	want := large.State()
	const bound = 4 << 20 // the snapshot's write buffer and chunk, recovery's read buffer
	var err error
	if got := heapAllocated(func() { err = p.Snapshot() }); got > bound {
		t.Errorf("a snapshot of a %d-byte filter allocated %d bytes of heap, want at most %d", large.SizeBytes(), got, bound)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var recovered *filter.Store
	if got := heapAllocated(func() { _, recovered, _ = open(t, dir) }); got > bound {
		t.Errorf("recovering a %d-byte filter allocated %d bytes of heap, want at most %d", large.SizeBytes(), got, bound)
	}
	sameState(t, stateOf(t, recovered, "large"), want)
}

// TestReplayedCreateAllocatesNothing replays the create of a large filter from the log: its
// layer is mapped, never copied from zeros on the heap.
func TestReplayedCreateAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	mustCreate(t, store, "large", largeOptions())
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var recovered *filter.Store
	if got := heapAllocated(func() { _, recovered, _ = open(t, dir) }); got > 4<<20 {
		t.Errorf("replaying the create of a %d-byte filter allocated %d bytes of heap", largeFilterBytes, got)
	}
	if f, err := recovered.Get("large"); err != nil || f.SizeBytes() < largeFilterBytes*9/10 {
		t.Errorf("replayed filter: %v", err)
	}
}

// TestSnapshotStreamsWhileWritersWrite snapshots large filters while values are added to them:
// every value answered before the snapshot began is in it, and the record checks out whatever
// was added while it was streamed.
func TestSnapshotStreamsWhileWritersWrite(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	opts := filter.Options{Capacity: 2_000_000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5}
	a, b := mustCreate(t, store, "a", opts), mustCreate(t, store, "b", opts)
	before := keys("before-", 5_000)
	for _, f := range []*filter.Filter{a, b} {
		if err := f.AddMany(before); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var writers sync.WaitGroup
	for _, f := range []*filter.Filter{a, b} {
		writers.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if _, err := f.CheckAndSet("during-" + strconv.Itoa(i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	err := p.Snapshot()
	stop.Store(true)
	writers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// The log holds the writes; recovering from the snapshot alone shows what it holds.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	fromSnapshot := filter.NewStore(filter.Limits{}, nil)
	got, err := readSnapshot(dir+"/"+snapshotFile, keepAll, fromSnapshot.RestoreFilling)
	if err != nil || got.corrupt != nil || got.restored != 2 {
		t.Fatalf("snapshot: %d filters restored, corrupt %v, err %v; want both, intact", got.restored, got.corrupt, err)
	}
	for _, name := range []string{"a", "b"} {
		f, err := fromSnapshot.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range before {
			if !f.Check(v) {
				t.Fatalf("filter %q from the snapshot lacks %q, added before it began", name, v)
			}
		}
	}
}

// TestMergesShareSnapshots makes ten merges durable at once: they share one snapshot, which
// began after each of them asked. The next asks for one of its own.
func TestMergesShareSnapshots(t *testing.T) {
	p, store, _ := open(t, t.TempDir())
	mustCreate(t, store, "f", filter.Options{Capacity: 100, FPP: 0.01})
	tickets := make([]uint64, 10)
	for i := range tickets {
		tickets[i] = p.snapshotTicket()
	}
	var merges sync.WaitGroup
	for _, ticket := range tickets {
		merges.Go(func() {
			if err := p.snapshotAfter(ticket); err != nil {
				t.Error(err)
			}
		})
	}
	merges.Wait()
	if got := p.Stats().SnapshotsTaken.Load(); got != 1 {
		t.Errorf("ten merges waiting together took %d snapshots, want 1", got)
	}
	if err := p.MakeDurable(); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().SnapshotsTaken.Load(); got != 2 {
		t.Errorf("a merge after them took %d snapshots in all, want 2", got)
	}
}
