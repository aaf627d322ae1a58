package persist

import (
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// A data directory written before expiry overrides existed loads as it did: the files in
// testdata were written by that code (a snapshot, then a log of a create, adds and a delete).
func TestDataDirectoryOfTheFormerFormatLoads(t *testing.T) {
	dir := copyTestdata(t, "datadir-before-expiry")
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	_, store, rep := open(t, dir, func(o *Options) { o.Clock = func() time.Time { return now } })
	if rep.Skipped != 0 || rep.CorruptRecords != 0 {
		t.Errorf("recovery skipped %d records and met %d corrupt files", rep.Skipped, rep.CorruptRecords)
	}
	want := map[string]uint64{"in-snapshot": 60, "expires": 50, "sliding": 50, "in-log": 50}
	names := store.Names()
	if len(names) != len(want) {
		t.Errorf("filters %v, want %v", names, want)
	}
	for name, items := range want {
		f, err := store.Get(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f.Items() != items || f.ExpiryOverride().Mode != filter.ExpiryByOptions {
			t.Errorf("%s: %d items, override %+v; want %d and none", name, f.Items(), f.ExpiryOverride(), items)
		}
		// Written before layouts existed: bits-and-blooms', which hashes keys as they were.
		if f.Options().Layout != filter.LayoutBitsAndBlooms {
			t.Errorf("%s: layout %s, want %s", name, f.Options().Layout, filter.LayoutBitsAndBlooms)
		}
	}
	if f, _ := store.Get("expires"); f != nil && !f.Expiry().Equal(f.Created().Add(f.Options().ValidAfterCreate)) {
		t.Errorf("expires: expiry %v, want its options'", f.Expiry())
	}
}

// A change of expiry survives a restart from the log and from a snapshot, and a PERSIST in the
// log revives a filter that its options expired while the process was down.
func TestExpiryOverrideSurvivesRestarts(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	withClock := func(o *Options) { o.Clock = clock }
	dir := t.TempDir()

	p, store, _ := open(t, dir, withClock)
	persisted := mustCreate(t, store, "persisted", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterCreate: time.Minute})
	deadline := mustCreate(t, store, "deadline", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterAccess: time.Minute})
	if err := p.Snapshot(); err != nil { // the snapshot holds both without an override
		t.Fatal(err)
	}
	want := map[string]filter.Expiry{}
	for f, change := range map[*filter.Filter]filter.ExpiryChange{
		persisted: func(time.Time) (filter.Expiry, bool) { return filter.Expiry{Mode: filter.ExpiryNever}, true },
		deadline: func(time.Time) (filter.Expiry, bool) {
			return filter.Expiry{Mode: filter.ExpiryAt, At: now.Add(time.Hour)}, true
		},
	} {
		e, _, err := f.ChangeExpiry("pod-a", change)
		if err != nil {
			t.Fatal(err)
		}
		want[f.Name()] = e
	}
	_ = p.Close()

	check := func(when string, store *filter.Store) {
		t.Helper()
		for name, e := range want {
			f, err := store.Get(name)
			if err != nil {
				t.Errorf("%s: %s: %v", when, name, err)
				continue
			}
			if got := f.ExpiryOverride(); !got.Equal(e) {
				t.Errorf("%s: %s: override %+v, want %+v", when, name, got, e)
			}
		}
	}
	advance(2 * time.Minute) // both options have expired them
	p, store, _ = open(t, dir, withClock)
	check("after a restart from the log", store)
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	advance(time.Minute)
	_, store, _ = open(t, dir, withClock)
	check("after a restart from a snapshot", store)
}
