package filter

import (
	"math"
	"strconv"
	"testing"
)

// The estimate metrics publish must track the fill ratio that counting the bits gives, for fixed
// filters, scalable filters with several layers, and filters filled past their capacity.
func TestEstimatedFillRatioTracksTheCountedOne(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		keys int
	}{
		{"empty", scalable(1000, 0.01), 0},
		{"fixed, a tenth full", Options{Capacity: 10_000, FPP: 0.01}, 1_000},
		{"fixed, full", Options{Capacity: 10_000, FPP: 0.01}, 10_000},
		{"fixed, three times over capacity", Options{Capacity: 10_000, FPP: 0.01}, 30_000},
		{"scalable, four layers", scalable(1000, 0.001), 12_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustCreate(t, NewStore(Limits{}, nil), "f", tt.opts)
			for i := range tt.keys {
				if err := f.Add("key-" + strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
			}
			info, usage := f.Info(), f.Usage()
			if usage.Layers != info.Layers || usage.Items != info.Items || usage.SizeBytes != info.SizeBytes {
				t.Errorf("usage %+v disagrees with info %+v on layers, items or size", usage, info)
			}
			if diff := math.Abs(usage.EstimatedFillRatio - info.FillRatio); diff > 0.005 {
				t.Errorf("estimated fill ratio %.4f, counted %.4f: off by %.4f", usage.EstimatedFillRatio, info.FillRatio, diff)
			}
			// The rate is a power of the fill ratio, which multiplies the fill ratio's error:
			// compare it relatively.
			if diff := math.Abs(usage.EstimatedFPP - info.EstimatedFPP); diff > 0.1*info.EstimatedFPP+1e-12 {
				t.Errorf("estimated rate %.4g, from the counted bits %.4g: off by %.4g", usage.EstimatedFPP, info.EstimatedFPP, diff)
			}
			t.Logf("%d layers: estimated %.4f, counted %.4f; rate estimated %.4g, counted %.4g",
				usage.Layers, usage.EstimatedFillRatio, info.FillRatio, usage.EstimatedFPP, info.EstimatedFPP)
		})
	}
}

func TestUsageCountsCheckedAndSetKeys(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f := mustCreate(t, s, "f", scalable(1000, 0.01))
	f.Check("a")
	f.CheckMany([]string{"a", "b", "c"})
	if _, err := f.CheckAndSet("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.CheckAndSetMany([]string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Add("d"); err != nil {
		t.Fatal(err)
	}
	if err := f.AddMany([]string{"e", "f", "g"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Replay([]string{"replayed"}); err != nil { // recovery is not traffic
		t.Fatal(err)
	}
	if u := f.Usage(); u.Checked != 4 || u.Set != 7 || u.Items != 8 {
		t.Errorf("usage = %+v, want 4 checked, 7 set, 8 items", u)
	}
}

// Totals over all filters are the live filters' counts plus the retired ones': deleting, purging
// or replacing a filter moves its counts, it does not lose them.
func TestRetiredCountsSurviveTheFilter(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	total := func() (checked, set uint64) {
		checked, set = s.Retired()
		s.Range(func(f *Filter) bool {
			u := f.Usage()
			checked, set = checked+u.Checked, set+u.Set
			return true
		})
		return checked, set
	}
	deleted := mustCreate(t, s, "deleted", scalable(100, 0.01))
	replaced := mustCreate(t, s, "replaced", scalable(100, 0.01))
	expiring := mustCreate(t, s, "expiring", Options{Capacity: 100, FPP: 0.01, ValidAfterCreate: 1})
	for i, f := range []*Filter{deleted, replaced, expiring} {
		f.CheckMany(make([]string, i+1))
		if err := f.AddMany([]string{"x", "y"}); err != nil {
			t.Fatal(err)
		}
	}
	if c, st := total(); c != 6 || st != 6 {
		t.Fatalf("before: %d checked, %d set; want 6 and 6", c, st)
	}
	if _, _, err := s.Delete("deleted"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create("replaced", scalable(100, 0.01), true); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2)
	if purged := s.PurgeExpired(); len(purged) != 1 {
		t.Fatalf("purged %v, want [expiring]", purged)
	}
	if c, st := total(); c != 6 || st != 6 {
		t.Errorf("after delete, overwrite and purge: %d checked, %d set; want 6 and 6", c, st)
	}
	if c, st := s.Retired(); c != 6 || st != 6 {
		t.Errorf("retired: %d checked, %d set; want 6 and 6", c, st)
	}
}
