package filter

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable time source for expiry tests.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func scalable(capacity uint64, fpp float64) Options {
	return Options{Capacity: capacity, FPP: fpp, Scalable: true, Growth: DefaultGrowth, Tightening: DefaultTightening}
}

func mustCreate(t testing.TB, s *Store, name string, opts Options) *Filter {
	t.Helper()
	f, created, err := s.Create(name, opts, false)
	if err != nil || !created {
		t.Fatalf("Create(%q) = created %v, err %v", name, created, err)
	}
	return f
}

// measureFPP adds n keys, checks that every one is found, and returns the share of n other keys
// that the filter claims to hold.
func measureFPP(t *testing.T, f *Filter, n int) float64 {
	t.Helper()
	for i := range n {
		if err := f.Add("in-" + strconv.Itoa(i)); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	for i := range n {
		if !f.Check("in-" + strconv.Itoa(i)) {
			t.Fatalf("false negative for in-%d", i)
		}
	}
	falsePositives := 0
	for i := range n {
		if f.Check("out-" + strconv.Itoa(i)) {
			falsePositives++
		}
	}
	return float64(falsePositives) / float64(n)
}

func TestFalsePositiveRateStaysUnderTheConfiguredRate(t *testing.T) {
	const n = 100_000
	cases := []struct {
		name       string
		opts       Options
		wantLayers int
	}{
		{"fixed at capacity", Options{Capacity: n, FPP: 0.01}, 1},
		{"fixed, tight", Options{Capacity: n, FPP: 0.001}, 1},
		// 10x the first layer's capacity: layers of 10k, 20k, 40k and 80k hold it.
		{"scalable grown 10x", scalable(n/10, 0.01), 4},
		{"scalable grown 10x, tight", scalable(n/10, 0.001), 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := mustCreate(t, NewStore(Limits{}, nil), "f", tc.opts)
			got := measureFPP(t, f, n)
			t.Logf("measured false positive rate %.5f (configured %.5f)", got, tc.opts.FPP)
			// The margin covers sampling noise: at p=0.001 over 1e5 probes the standard
			// deviation is about 0.0001.
			if limit := tc.opts.FPP * 1.25; got > limit {
				t.Errorf("measured false positive rate %.5f, want <= %.5f (configured %.5f)", got, limit, tc.opts.FPP)
			}
			info := f.Info()
			if info.Layers != tc.wantLayers {
				t.Errorf("layers = %d, want %d", info.Layers, tc.wantLayers)
			}
			// A new key that hits a false positive is not counted, so items fall short of n
			// by about the false positive rate.
			if floor := uint64(n * (1 - tc.opts.FPP)); info.Items > n || info.Items < floor {
				t.Errorf("items = %d, want between %d and %d", info.Items, floor, n)
			}
			if info.EstimatedFPP <= 0 || info.EstimatedFPP > tc.opts.FPP*1.1 {
				t.Errorf("estimated fpp = %v, want in (0, %v]", info.EstimatedFPP, tc.opts.FPP*1.1)
			}
		})
	}
}

func TestFixedFilterNeverGrows(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "f", Options{Capacity: 100, FPP: 0.01})
	for i := range 1000 {
		if err := f.Add(strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if info := f.Info(); info.Layers != 1 || info.EstimatedFPP < 0.5 {
		t.Errorf("fixed filter 10x over capacity: layers %d, estimated fpp %v; want 1 layer and a high rate", info.Layers, info.EstimatedFPP)
	}
}

func TestLayerShapesArePureFunctionsOfTheOptions(t *testing.T) {
	opts := scalable(1000, 0.01)
	a := mustCreate(t, NewStore(Limits{}, nil), "a", opts)
	b := mustCreate(t, NewStore(Limits{}, nil), "b", opts)
	for i := range 5000 {
		_ = a.Add("a" + strconv.Itoa(i))
		_ = b.Add("b" + strconv.Itoa(4999-i))
	}
	if len(a.partList()[0].layers) != len(b.partList()[0].layers) || len(a.partList()[0].layers) < 3 {
		t.Fatalf("layers %d and %d, want equal and >= 3", len(a.partList()[0].layers), len(b.partList()[0].layers))
	}
	for i := range a.partList()[0].layers {
		if a.partList()[0].layers[i].Cap() != b.partList()[0].layers[i].Cap() || a.partList()[0].layers[i].K() != b.partList()[0].layers[i].K() {
			t.Errorf("layer %d: (m=%d,k=%d) vs (m=%d,k=%d)", i, a.partList()[0].layers[i].Cap(), a.partList()[0].layers[i].K(), b.partList()[0].layers[i].Cap(), b.partList()[0].layers[i].K())
		}
		shape, err := opts.LayerShape(i)
		if err != nil || shape.Bits != a.partList()[0].layers[i].Cap() || shape.Hashes != a.partList()[0].layers[i].K() {
			t.Errorf("layer %d differs from layerShape: %+v, %v", i, shape, err)
		}
	}
	// Tighter error in every later layer keeps the compound rate under p.
	first, _ := opts.LayerShape(0)
	second, _ := opts.LayerShape(1)
	if second.Capacity != 2*first.Capacity || second.Hashes <= first.Hashes {
		t.Errorf("layer 1 %+v does not grow and tighten layer 0 %+v", second, first)
	}
}

func TestCheckAndSetMany(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "f", scalable(1000, 0.001))
	got, err := f.CheckAndSetMany([]string{"a", "b", "a", "", "", "日本語", "b"})
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, false, true, false, true, false, true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("CheckAndSetMany = %v, want %v", got, want)
	}
	if checks := f.CheckMany([]string{"a", "", "日本語", "c"}); fmt.Sprint(checks) != "[true true true false]" {
		t.Errorf("CheckMany = %v", checks)
	}
	if f.Items() != 4 {
		t.Errorf("items = %d, want 4", f.Items())
	}
}

func TestConcurrentCheckAndSetOfOneNewValueAnswersFalseOnce(t *testing.T) {
	f := mustCreate(t, NewStore(Limits{}, nil), "f", scalable(100, 0.01)) // small, so layers grow meanwhile
	const goroutines, values = 16, 500
	var newAnswers [values]atomic.Int32
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for v := range values {
				present, err := f.CheckAndSet("value-" + strconv.Itoa(v))
				if err != nil {
					t.Error(err)
					return
				}
				if !present {
					newAnswers[v].Add(1)
				}
			}
		})
	}
	// Readers alongside the writers, for the race detector.
	wg.Go(func() {
		for v := range values {
			f.Check("value-" + strconv.Itoa(v))
			_ = f.Info()
		}
	})
	wg.Wait()
	for v := range values {
		// A false positive may make a new value answer true for everyone; more than one
		// false is a lost update.
		if n := newAnswers[v].Load(); n > 1 {
			t.Errorf("value-%d: %d goroutines were told it was new", v, n)
		}
	}
	if f.Items() < values*95/100 {
		t.Errorf("items = %d, want about %d", f.Items(), values)
	}
}

func TestExpiry(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	afterCreate := mustCreate(t, s, "after-create", Options{Capacity: 10, FPP: 0.01, ValidAfterCreate: time.Minute})
	afterAccess := mustCreate(t, s, "after-access", Options{Capacity: 10, FPP: 0.01, ValidAfterAccess: time.Minute})
	mustCreate(t, s, "forever", Options{Capacity: 10, FPP: 0.01})

	if want := clock.Now().Add(time.Minute); !afterCreate.Expiry().Equal(want) {
		t.Errorf("after-create expiry = %v, want %v", afterCreate.Expiry(), want)
	}
	clock.Advance(50 * time.Second)
	afterCreate.Check("x") // access does not extend expiry after create
	afterAccess.Check("x") // but does extend it after access
	clock.Advance(20 * time.Second)

	if _, err := s.Get("after-create"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(after-create) after 70s: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Get("after-access"); err != nil {
		t.Errorf("Get(after-access) 20s after a check: %v", err)
	}
	_ = afterAccess.Info() // reading info is not an access
	clock.Advance(41 * time.Second)
	if _, err := s.Get("after-access"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(after-access) 61s after the last check: err = %v, want ErrNotFound", err)
	}
	if names := fmt.Sprint(s.Names()); names != "[forever]" {
		t.Errorf("Names() = %s, want [forever]", names)
	}
	used := s.UsedBytes()
	purged := s.PurgeExpired()
	if fmt.Sprint(purged) != "[after-access after-create]" && fmt.Sprint(purged) != "[after-create after-access]" {
		t.Errorf("PurgeExpired() = %v", purged)
	}
	if s.UsedBytes() >= used || s.UsedBytes() != mustGet(t, s, "forever").SizeBytes()+FilterOverhead {
		t.Errorf("used bytes after purge = %d, want the size of the one live filter", s.UsedBytes())
	}
	// An expired name can be created again at once.
	if _, created, err := s.Create("after-create", Options{Capacity: 10, FPP: 0.01}, false); err != nil || !created {
		t.Errorf("re-create after expiry: created %v, err %v", created, err)
	}
}

// A filter created here, never accessed, expires its sliding period after its creation, however
// long its making took: each read of this store's clock is a millisecond later than the last.
func TestASlidingFilterCountsFromItsCreation(t *testing.T) {
	var now time.Time
	s := NewStore(Limits{}, func() time.Time { now = now.Add(time.Millisecond); return now })
	f := mustCreate(t, s, "sliding", Options{Capacity: 10, FPP: 0.01, ValidAfterAccess: time.Minute})
	if d := f.Expiry().Sub(f.Created()); d != time.Minute {
		t.Errorf("expiry - created = %s, want 1m", d)
	}
}

func TestCreateOverExpiredFilterBeforePurge(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	old := mustCreate(t, s, "f", Options{Capacity: 10, FPP: 0.01, ValidAfterCreate: time.Second})
	_ = old.Add("old")
	clock.Advance(time.Second)
	fresh, created, err := s.Create("f", Options{Capacity: 10, FPP: 0.01}, false)
	if err != nil || !created || fresh == old || fresh.Check("old") {
		t.Fatalf("create over expired filter: created %v, err %v, same %v", created, err, fresh == old)
	}
	if s.UsedBytes() != fresh.SizeBytes()+FilterOverhead {
		t.Errorf("used %d, want %d: the expired filter's memory was not returned", s.UsedBytes(), fresh.SizeBytes()+FilterOverhead)
	}
}

func mustGet(t *testing.T, s *Store, name string) *Filter {
	t.Helper()
	f, err := s.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCreateOverwriteAndDelete(t *testing.T) {
	s := NewStore(Limits{}, nil)
	first := mustCreate(t, s, "f", Options{Capacity: 100, FPP: 0.01})
	_ = first.Add("x")

	again, created, err := s.Create("f", Options{Capacity: 999, FPP: 0.5}, false)
	if err != nil || created || again != first {
		t.Errorf("create without overwrite: created %v, err %v, same filter %v; want the existing one", created, err, again == first)
	}
	replaced, created, err := s.Create("f", Options{Capacity: 999, FPP: 0.5}, true)
	if err != nil || !created || replaced == first || replaced.Check("x") {
		t.Errorf("create with overwrite: created %v, err %v; want a new, empty filter", created, err)
	}
	if s.UsedBytes() != replaced.SizeBytes()+FilterOverhead {
		t.Errorf("used %d, want %d", s.UsedBytes(), replaced.SizeBytes()+FilterOverhead)
	}
	if deleted, _, err := s.Delete("f"); !deleted || err != nil {
		t.Errorf("first Delete = %v, %v; want true", deleted, err)
	}
	if deleted, _, err := s.Delete("f"); deleted || err != nil {
		t.Errorf("second Delete = %v, %v; want false", deleted, err)
	}
	if _, err := s.Get("f"); !errors.Is(err, ErrNotFound) || s.UsedBytes() != 0 {
		t.Errorf("after delete: err %v, used %d", err, s.UsedBytes())
	}
}

func TestConcurrentCreatesOfOneNameMakeOneFilter(t *testing.T) {
	s := NewStore(Limits{}, nil)
	var createdCount atomic.Int32
	filters := make([]*Filter, 8)
	var wg sync.WaitGroup
	for i := range filters {
		wg.Go(func() {
			f, created, err := s.Create("f", Options{Capacity: 1000, FPP: 0.01}, false)
			if err != nil {
				t.Error(err)
			}
			if created {
				createdCount.Add(1)
			}
			filters[i] = f
		})
	}
	wg.Wait()
	if createdCount.Load() != 1 {
		t.Errorf("%d creates reported created, want 1", createdCount.Load())
	}
	for _, f := range filters {
		if f != filters[0] {
			t.Fatal("concurrent creates returned different filters")
		}
	}
	if s.UsedBytes() != filters[0].SizeBytes()+FilterOverhead {
		t.Errorf("used %d, want %d: a losing create kept its memory", s.UsedBytes(), filters[0].SizeBytes()+FilterOverhead)
	}
}

func TestMemoryLimits(t *testing.T) {
	small := Options{Capacity: 1000, FPP: 0.01} // 9592 bits: 1200 bytes
	size, _ := small.LayerShape(0)
	if size.SizeBytes() != 1200 {
		t.Fatalf("test assumes 1200 bytes per filter, got %d", size.SizeBytes())
	}

	t.Run("per filter at create", func(t *testing.T) {
		s := NewStore(Limits{FilterBytes: 1000}, nil)
		_, _, err := s.Create("f", small, false)
		if !errors.Is(err, ErrTooLarge) || s.UsedBytes() != 0 {
			t.Errorf("err = %v, used %d; want ErrTooLarge and nothing used", err, s.UsedBytes())
		}
	})
	t.Run("total at create", func(t *testing.T) {
		s := NewStore(Limits{TotalBytes: 2*(1200+FilterOverhead) + 100}, nil)
		mustCreate(t, s, "a", small)
		mustCreate(t, s, "b", small)
		_, _, err := s.Create("c", small, false)
		if !errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("third filter: err = %v, want ErrOutOfMemory", err)
		}
		_, _, _ = s.Delete("a")
		mustCreate(t, s, "c", small)
		if s.UsedBytes() != 2*(1200+FilterOverhead) {
			t.Errorf("used = %d, want %d", s.UsedBytes(), 2*(1200+FilterOverhead))
		}
	})
	t.Run("growth of a scalable filter", func(t *testing.T) {
		opts := scalable(100, 0.01)
		first, _ := opts.LayerShape(0)
		second, _ := opts.LayerShape(1)
		s := NewStore(Limits{FilterBytes: first.SizeBytes() + second.SizeBytes()}, nil)
		f := mustCreate(t, s, "f", opts)
		var err error
		added := 0
		for ; err == nil && added < 10_000; added++ {
			_, err = f.CheckAndSet(strconv.Itoa(added))
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge once two layers are full", err)
		}
		if added < 300 || len(f.partList()[0].layers) != 2 || s.UsedBytes() != f.SizeBytes()+FilterOverhead {
			t.Errorf("refused after %d adds with %d layers, used %d of %d", added, len(f.partList()[0].layers), s.UsedBytes(), f.SizeBytes())
		}
		for i := range added - 1 {
			if !f.Check(strconv.Itoa(i)) {
				t.Fatalf("acknowledged key %d lost", i)
			}
		}
	})
	t.Run("absurd capacity is refused before allocation", func(t *testing.T) {
		_, _, err := NewStore(Limits{}, nil).Create("f", Options{Capacity: 1 << 62, FPP: 0.001}, false)
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("err = %v, want ErrTooLarge", err)
		}
	})
}

func TestValidateName(t *testing.T) {
	long := string(make([]byte, 254))
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"my-filter_1.v2", true}, {"UPPER", true}, {string(make([]byte, 0)), false},
		{"list", false}, {"lists", true}, {"has space", false}, {"slash/name", false}, {"日本", false},
		{"a%20b", false}, {long, false}, {long[:253], false}, // NUL bytes are not allowed either
	} {
		if err := ValidateName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if err := ValidateName(string(bytesOf('a', 253))); err != nil {
		t.Errorf("253 characters should be allowed: %v", err)
	}
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"zero capacity", Options{FPP: 0.1}},
		{"fpp 0", Options{Capacity: 1}},
		{"fpp 1", Options{Capacity: 1, FPP: 1}},
		{"negative period", Options{Capacity: 1, FPP: 0.1, ValidAfterCreate: -time.Second}},
		{"growth 0", Options{Capacity: 1, FPP: 0.1, Scalable: true, Tightening: 0.5}},
		{"tightening 1", Options{Capacity: 1, FPP: 0.1, Scalable: true, Growth: 2, Tightening: 1}},
	} {
		if err := tc.opts.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidOptions", tc.name, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 30: "3.0 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
