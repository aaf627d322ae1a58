package filter

import (
	"testing"
	"time"
)

func setAt(at time.Time) ExpiryChange {
	return func(time.Time) (Expiry, bool) { return Expiry{Mode: ExpiryAt, At: at}, true }
}

func never(time.Time) (Expiry, bool) { return Expiry{Mode: ExpiryNever}, true }

// An override decides expiry in place of the options, sliding expiry included, and the purge
// and lookups follow it.
func TestExpiryOverrideDecides(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	opts := Options{Capacity: 100, FPP: 0.01, ValidAfterCreate: time.Minute}
	kept, _, _ := s.Create("kept", opts, false)
	sliding, _, _ := s.Create("sliding", Options{Capacity: 100, FPP: 0.01, ValidAfterAccess: time.Minute}, false)
	shortened, _, _ := s.Create("shortened", Options{Capacity: 100, FPP: 0.01}, false)

	if _, ok, err := kept.ChangeExpiry("a", never); !ok || err != nil {
		t.Fatalf("PERSIST: %v, %v", ok, err)
	}
	deadline := clock.Now().Add(10 * time.Second)
	if _, ok, err := sliding.ChangeExpiry("a", setAt(deadline)); !ok || err != nil {
		t.Fatalf("EXPIRE: %v, %v", ok, err)
	}
	if _, _, err := shortened.ChangeExpiry("a", setAt(clock.Now().Add(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	if !kept.Expiry().IsZero() || !sliding.Expiry().Equal(deadline) {
		t.Fatalf("expiries %v %v, want never and %v", kept.Expiry(), sliding.Expiry(), deadline)
	}
	clock.Advance(6 * time.Second)
	if _, err := s.Get("shortened"); err == nil {
		t.Error("a filter past its deadline is still served")
	}
	sliding.Check("x") // an access no longer moves the deadline
	clock.Advance(5 * time.Second)
	if _, err := s.Get("sliding"); err == nil {
		t.Error("an access extended a filter whose expiry was set to a deadline")
	}
	clock.Advance(2 * time.Minute)
	if _, err := s.Get("kept"); err != nil {
		t.Errorf("a filter set never to expire expired by its options: %v", err)
	}
	if purged := s.PurgeExpired(); len(purged) != 2 {
		t.Errorf("purged %v, want shortened and sliding", purged)
	}
}

// A declined change changes nothing; an accepted one is stamped past the one it replaces, by
// the clock, so that a pod's later change always wins.
func TestChangeExpiryStamps(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	f, _, _ := s.Create("f", Options{Capacity: 100, FPP: 0.01}, false)
	if _, ok, _ := f.ChangeExpiry("a", func(current time.Time) (Expiry, bool) {
		if !current.IsZero() {
			t.Errorf("current expiry of a filter that never expires = %v", current)
		}
		return Expiry{}, false
	}); ok || f.ExpiryOverride().Mode != ExpiryByOptions {
		t.Fatal("a declined change was applied")
	}
	// A peer's change from the future, as far as this clock goes.
	future := Expiry{Mode: ExpiryNever, Stamp: clock.Now().Add(time.Second).UnixNano(), Origin: "b"}
	if ok, err := f.MergeExpiry(future); !ok || err != nil {
		t.Fatalf("MergeExpiry: %v, %v", ok, err)
	}
	e, ok, err := f.ChangeExpiry("a", setAt(clock.Now().Add(time.Hour)))
	if !ok || err != nil || e.Stamp != future.Stamp+1 || e.Origin != "a" {
		t.Fatalf("a change after a newer one = %+v, %v, %v; want stamp %d", e, ok, err, future.Stamp+1)
	}
	if ok, _ := f.MergeExpiry(future); ok {
		t.Error("an older override replaced a newer one")
	}
	tie := e
	tie.Origin, tie.Mode, tie.At = "b", ExpiryNever, time.Time{}
	if ok, _ := f.MergeExpiry(tie); !ok || f.ExpiryOverride().Mode != ExpiryNever {
		t.Error("of two overrides of one stamp, the later origin does not win")
	}
	if _, err := f.MergeExpiry(Expiry{Mode: ExpiryAt, Stamp: 1}); err == nil {
		t.Error("a deadline of 1970 was taken")
	}
}

// The override is part of the state: a restore, a merge that installs and ExpiredAt keep it.
func TestExpiryOverrideInState(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	f, _, _ := s.Create("f", Options{Capacity: 100, FPP: 0.01, ValidAfterCreate: time.Second}, false)
	if _, _, err := f.ChangeExpiry("a", never); err != nil {
		t.Fatal(err)
	}
	st := f.State()
	clock.Advance(time.Minute)
	if st.ExpiredAt(clock.Now()) {
		t.Error("a state whose override is never expired by its options")
	}
	for _, apply := range []func(*Store) error{
		func(s *Store) error { return s.Restore(st) },
		func(s *Store) error { _, err := s.Merge(st); return err },
	} {
		other := NewStore(Limits{}, clock.Now)
		if err := apply(other); err != nil {
			t.Fatal(err)
		}
		g, err := other.Get("f")
		if err != nil || !g.ExpiryOverride().Equal(st.Expiry) {
			t.Errorf("restored filter: %v, override %+v; want %+v", err, g, st.Expiry)
		}
	}
	if ok, err := s.ExpireReplica("f", f.Generation()-1, Expiry{Mode: ExpiryNever, Stamp: 1 << 62}); !ok || err != nil {
		t.Errorf("a change of an older incarnation: %v, %v; want acknowledged (it is gone everywhere)", ok, err)
	}
	if ok, _ := s.ExpireReplica("f", f.Generation()+1, Expiry{Mode: ExpiryNever, Stamp: 1 << 62}); ok {
		t.Error("a change of an incarnation this store lacks was acknowledged")
	}
	if ok, _ := s.ExpireReplica("missing", 1, Expiry{Mode: ExpiryNever, Stamp: 1 << 62}); ok {
		t.Error("a change of a missing filter was acknowledged")
	}
}
