package filter

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingJournal counts the keys it is told of.
type countingJournal struct {
	mu    sync.Mutex
	added int
}

func (j *countingJournal) Created(*Filter) error       { return nil }
func (j *countingJournal) Deleted(string, int64) error { return nil }
func (j *countingJournal) Accessed(string, time.Time)  {}
func (j *countingJournal) Purged(string)               {}
func (j *countingJournal) Applied()                    {}
func (j *countingJournal) ExpiryChanged(string, int64, Expiry) error {
	return nil
}
func (j *countingJournal) Loaded(string, int64, Load) error { return nil }
func (j *countingJournal) Added(_ string, keys []string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.added += len(keys)
	return nil
}

// Recovery attaches the journal while requests may already arrive; under the race detector a
// plain field would be reported here.
func TestJournalAttachedWhileWriting(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f, _, err := s.Create("f", Options{Capacity: 1000, FPP: 0.01}, false)
	if err != nil {
		t.Fatal(err)
	}
	j := &countingJournal{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			if _, err := f.CheckAndSet("before-or-after"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	s.SetJournal(j)
	<-done
	if _, err := f.CheckAndSet("after"); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.added == 0 {
		t.Error("a write after SetJournal was not journaled")
	}
}

// A new incarnation's generation never falls below the one it replaces, even at the largest
// generation, where adding one would wrap to the smallest.
func TestGenerationsDoNotWrap(t *testing.T) {
	s := NewStore(Limits{}, nil)
	opts := Options{Capacity: 100, FPP: 0.01}
	if _, err := s.CreateReplica("f", opts, time.Unix(0, math.MaxInt64), All); err != nil {
		t.Fatal(err)
	}
	f, created, err := s.Create("f", opts, true)
	if err != nil || !created {
		t.Fatalf("overwrite = %v, %v", created, err)
	}
	if f.Generation() != math.MaxInt64 {
		t.Errorf("generation after the largest: %d, want it to stay at %d", f.Generation(), int64(math.MaxInt64))
	}
}

// A false positive rate so small that a key would need more than MaxHashes hash functions is
// refused at create, and a scalable filter stops growing before a layer would need them.
func TestHashFunctionsAreBounded(t *testing.T) {
	s := NewStore(Limits{}, nil)
	_, _, err := s.Create("tiny", Options{Capacity: 1000, FPP: 1e-30}, false)
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "the smallest fpp is about 5.4e-20") {
		t.Errorf("fpp 1e-30: %v, want ErrInvalidOptions naming the smallest fpp", err)
	}
	if _, _, err := s.Create("small", Options{Capacity: 1000, FPP: 1e-19}, false); err != nil {
		t.Errorf("fpp 1e-19, 63 hash functions: %v", err)
	}

	// The first layer needs 63 hash functions; every next one, tightened by half, one more.
	opts := Options{Capacity: 100, FPP: math.Exp2(-61), Scalable: true, Growth: 2, Tightening: 0.5}
	f, _, err := s.Create("deep", opts, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.CheckAndSetMany(keys("k", 100*(1+2)+1))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "layer 2 would need 65 hash functions") {
		t.Fatalf("growth past %d hash functions: %v, want ErrTooLarge naming the layer", MaxHashes, err)
	}
	if n := len(f.State().Parts[0].Layers); n != 2 {
		t.Errorf("%d layers, want the 2 of at most %d hash functions", n, MaxHashes)
	}
}

// The store holds at most Limits.Filters filters: a create of another name is refused, a replica
// too, and room returns as filters are deleted or purged; replacing a filter takes no more room.
func TestFilterCountLimit(t *testing.T) {
	now := time.Now()
	s := NewStore(Limits{Filters: 2}, func() time.Time { return now })
	opts := Options{Capacity: 100, FPP: 0.01}
	if _, _, err := s.Create("a", opts, false); err != nil {
		t.Fatal(err)
	}
	expiring := opts
	expiring.ValidAfterCreate = time.Minute
	if _, _, err := s.Create("b", expiring, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create("c", opts, false); !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "maxFilters") {
		t.Errorf("a third filter: %v, want ErrOutOfMemory naming maxFilters", err)
	}
	if _, err := s.CreateReplica("c", opts, now, All); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("a third filter from a peer: %v, want ErrOutOfMemory", err)
	}
	if _, created, err := s.Create("a", opts, true); err != nil || !created {
		t.Errorf("overwriting a filter at the limit: %v, %v", created, err)
	}
	if _, _, err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create("c", opts, false); err != nil {
		t.Errorf("a create after a delete made room: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if purged := s.PurgeExpired(); len(purged) != 1 {
		t.Fatalf("purged %v, want b", purged)
	}
	if _, _, err := s.Create("d", opts, false); err != nil {
		t.Errorf("a create after a purge made room: %v", err)
	}
}

// Every filter is charged FilterOverhead beyond its bits, so that many tiny filters count against
// TotalBytes as they cost; SizeBytes stays the bits alone.
func TestFilterOverheadIsCharged(t *testing.T) {
	tiny := Options{Capacity: 1, FPP: 0.1}
	shape, _ := tiny.LayerShape(0)
	s := NewStore(Limits{TotalBytes: 10 * (shape.SizeBytes() + FilterOverhead)}, nil)
	for i := range 10 {
		f := mustCreate(t, s, "tiny-"+strconv.Itoa(i), tiny)
		if f.SizeBytes() != shape.SizeBytes() {
			t.Fatalf("SizeBytes = %d, want the bits alone, %d", f.SizeBytes(), shape.SizeBytes())
		}
	}
	if want := 10 * (shape.SizeBytes() + FilterOverhead); s.UsedBytes() != want {
		t.Errorf("used %d after 10 tiny filters, want %d", s.UsedBytes(), want)
	}
	if _, _, err := s.Create("one-more", tiny, false); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("an eleventh tiny filter past the total: %v, want ErrOutOfMemory", err)
	}
}

// Whatever path a filter comes and goes by, the budget ends where it started.
func TestBudgetBalancesOverManyFilters(t *testing.T) {
	s := NewStore(Limits{}, nil)
	opts := scalable(10, 0.01)
	for i := range 2_000 {
		name := "f-" + strconv.Itoa(i%50)
		switch i % 4 {
		case 0: // create, grow
			f, _, err := s.Create(name, opts, true)
			if err != nil {
				t.Fatal(err)
			}
			for k := range 40 {
				_ = f.Add(strconv.Itoa(k))
			}
		case 1: // restore over it
			if f, ok := s.Lookup(name); ok {
				if err := s.Restore(f.State()); err != nil {
					t.Fatal(err)
				}
			}
		case 2: // a replica's create and merge
			at := time.Unix(0, int64(1_700_000_000_000_000_000+i))
			if _, err := s.CreateReplica(name+"-r", opts, at, All); err != nil {
				t.Fatal(err)
			}
			if f, ok := s.Lookup(name); ok {
				st := f.State()
				st.Name = name + "-m"
				if _, err := s.Merge(st); err != nil {
					t.Fatal(err)
				}
			}
		case 3:
			_, _, _ = s.Delete(name)
		}
	}
	if s.UsedBytes() == 0 {
		t.Fatal("nothing charged while filters are held")
	}
	for _, name := range s.Names() {
		if _, _, err := s.Delete(name); err != nil {
			t.Fatal(err)
		}
	}
	// Expired filters too: Names skips them.
	for i := range 50 {
		for _, suffix := range []string{"", "-r", "-m"} {
			if f, ok := s.Lookup("f-" + strconv.Itoa(i) + suffix); ok {
				_, _, _ = s.Delete(f.Name())
			}
		}
	}
	if s.UsedBytes() != 0 {
		t.Errorf("used %d bytes with no filter left, want 0", s.UsedBytes())
	}
}

// A growth the budget refuses leaves the budget as it was.
func TestRefusedGrowthLeavesTheBudget(t *testing.T) {
	opts := scalable(100, 0.01)
	first, _ := opts.LayerShape(0)
	s := NewStore(Limits{TotalBytes: first.SizeBytes() + FilterOverhead}, nil)
	f := mustCreate(t, s, "f", opts)
	var err error
	for i := 0; err == nil && i < 10_000; i++ {
		_, err = f.CheckAndSet(strconv.Itoa(i))
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("err = %v, want ErrOutOfMemory", err)
	}
	if s.UsedBytes() != first.SizeBytes()+FilterOverhead {
		t.Errorf("used %d after a refused growth, want %d", s.UsedBytes(), first.SizeBytes()+FilterOverhead)
	}
	_, _, _ = s.Delete("f")
	if s.UsedBytes() != 0 {
		t.Errorf("used %d after the delete, want 0", s.UsedBytes())
	}
}

// FilterOverhead covers the heap a filter takes beyond its bits, measured over 10,000 tiny
// filters (docs/performance.md).
func TestFilterOverheadCoversTheHeap(t *testing.T) {
	s := NewStore(Limits{}, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 10_000
	for i := range n {
		mustCreate(t, s, fmt.Sprintf("filter-name-%06d", i), Options{Capacity: 1, FPP: 0.1})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	bits := (s.UsedBytes() - n*FilterOverhead) / n
	perFilter := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes of heap a filter beside %d bytes of bits", perFilter, bits)
	if perFilter > FilterOverhead {
		t.Errorf("a tiny filter takes %d bytes of heap, more than the FilterOverhead of %d the budget charges", perFilter, FilterOverhead)
	}
	runtime.KeepAlive(s)
}

// refusingJournal cannot record anything, as a log on a full disk.
type refusingJournal struct{ countingJournal }

func (j *refusingJournal) Added(string, []string) error {
	return fmt.Errorf("%w: no space left on device", ErrNotJournaled)
}

// The journal records a write before the engine applies it: a write it cannot record leaves no
// bit behind, since adds cannot be undone.
func TestWriteTheJournalRefusesAppliesNothing(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f, _, err := s.Create("f", Options{Capacity: 1000, FPP: 0.001}, false)
	if err != nil {
		t.Fatal(err)
	}
	s.SetJournal(&refusingJournal{})
	if _, err := f.CheckAndSet("one"); !errors.Is(err, ErrNotJournaled) {
		t.Errorf("CheckAndSet: %v, want ErrNotJournaled", err)
	}
	if _, err := f.CheckAndSetMany(keys("many", 100)); !errors.Is(err, ErrNotJournaled) {
		t.Errorf("CheckAndSetMany: %v, want ErrNotJournaled", err)
	}
	for i, present := range f.CheckMany(append(keys("many", 100), "one")) {
		if present {
			t.Errorf("value %d of a refused write tests present", i)
		}
	}
	if n := f.Items(); n != 0 {
		t.Errorf("%d items after refused writes, want 0", n)
	}
}
