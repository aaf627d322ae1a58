package filter

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// replicaPair is two stores holding one incarnation of a filter, as two pods do after a
// replicated create.
func replicaPair(t *testing.T, opts Options) (a, b *Store, fa, fb *Filter) {
	t.Helper()
	a, b = NewStore(Limits{}, nil), NewStore(Limits{}, nil)
	fa = mustCreate(t, a, "f", opts)
	if created, err := b.CreateReplica("f", opts, fa.Created()); !created || err != nil {
		t.Fatalf("CreateReplica = %v, %v", created, err)
	}
	fb = mustGet(t, b, "f")
	if fa.Generation() != fb.Generation() {
		t.Fatalf("replicas of one create have generations %d and %d", fa.Generation(), fb.Generation())
	}
	return a, b, fa, fb
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// Two replicas that took different keys, and so grew different numbers of layers, merge into
// one that holds every key of both: exactly, layer by layer.
func TestMergeOfReplicasThatGrewDifferently(t *testing.T) {
	a, b, fa, fb := replicaPair(t, scalable(1000, 0.01))
	onA, onB := keys("a", 5000), keys("b", 500)
	if err := fa.AddMany(onA); err != nil {
		t.Fatal(err)
	}
	if err := fb.AddMany(onB); err != nil {
		t.Fatal(err)
	}
	if fa.Info().Layers <= fb.Info().Layers {
		t.Fatalf("want a with more layers than b, got %d and %d", fa.Info().Layers, fb.Info().Layers)
	}
	resB, err := b.Merge(fa.State())
	if err != nil {
		t.Fatal(err)
	}
	resA, err := a.Merge(fb.State())
	if err != nil {
		t.Fatal(err)
	}
	if resB.Installed || resA.Installed || resB.LayersChanged == 0 || resA.LayersChanged == 0 {
		t.Fatalf("merges into the same incarnation: %+v and %+v", resA, resB)
	}
	for _, f := range []*Filter{fa, fb} {
		for _, k := range append(onA, onB...) {
			if !f.Check(k) {
				t.Fatalf("after the merges a replica lacks %q", k)
			}
		}
	}
	if da, db := fa.Digest(), fb.Digest(); !sameLayers(da, db) {
		t.Fatalf("merged replicas differ: %v and %v", da.Layers, db.Layers)
	}
	// Merging again changes nothing: OR is idempotent.
	if res, err := a.Merge(fb.State()); err != nil || res.LayersChanged != 0 {
		t.Fatalf("a second merge = %+v, %v; want no change", res, err)
	}
}

func sameLayers(a, b Digest) bool {
	if a.Generation != b.Generation || len(a.Layers) != len(b.Layers) {
		return false
	}
	for i := range a.Layers {
		if a.Layers[i] != b.Layers[i] {
			return false
		}
	}
	return true
}

func TestMergeInstallsAMissingFilterAndReplacesAnOlderIncarnation(t *testing.T) {
	clock := newFakeClock()
	src, dst := NewStore(Limits{}, clock.Now), NewStore(Limits{}, clock.Now)
	old := mustCreate(t, dst, "f", scalable(100, 0.01))
	clock.Advance(time.Second)
	f := mustCreate(t, src, "f", scalable(100, 0.01))
	if err := f.AddMany(keys("k", 300)); err != nil {
		t.Fatal(err)
	}
	res, err := dst.Merge(f.State())
	if err != nil || !res.Installed {
		t.Fatalf("merge of a newer incarnation = %+v, %v; want installed", res, err)
	}
	got := mustGet(t, dst, "f")
	if got == old || got.Generation() != f.Generation() || !got.Check("k299") {
		t.Fatalf("the newer incarnation did not replace the older one")
	}
	// The older incarnation's state is now stale, and ignored.
	if res, err := src.Merge(old.State()); err != nil || !res.Stale {
		t.Fatalf("merge of an older incarnation = %+v, %v; want stale", res, err)
	}
	// A store without the filter takes it.
	empty := NewStore(Limits{}, clock.Now)
	if res, err := empty.Merge(f.State()); err != nil || !res.Installed || !mustGet(t, empty, "f").Check("k0") {
		t.Fatalf("merge into an empty store = %+v, %v", res, err)
	}
}

func TestTombstonesKeepDeletedFiltersDeleted(t *testing.T) {
	clock := newFakeClock()
	s := NewStore(Limits{}, clock.Now)
	f := mustCreate(t, s, "f", scalable(100, 0.01))
	stale := f.State()
	deleted, generation, err := s.Delete("f")
	if !deleted || err != nil || generation != f.Generation() {
		t.Fatalf("Delete = %v, %d, %v; want true, %d", deleted, generation, err, f.Generation())
	}
	if res, err := s.Merge(stale); err != nil || !res.Stale {
		t.Fatalf("merge of the deleted incarnation = %+v, %v; want stale", res, err)
	}
	if created, err := s.CreateReplica("f", stale.Options, stale.Created); created || err != nil {
		t.Fatalf("replicated create of the deleted incarnation = %v, %v; want ignored", created, err)
	}
	if _, err := s.Get("f"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted filter came back: %v", err)
	}
	// A new create is a newer incarnation, even if the clock went back.
	clock.Advance(-time.Hour)
	again := mustCreate(t, s, "f", scalable(100, 0.01))
	if again.Generation() <= generation {
		t.Fatalf("a create after a delete has generation %d, not above the tombstone's %d", again.Generation(), generation)
	}
	// A peer's delete of an older incarnation leaves the newer one alone.
	if deleted, err := s.DeleteReplica("f", generation); deleted || err != nil {
		t.Fatalf("DeleteReplica of an older generation = %v, %v; want no delete", deleted, err)
	}
	// Tombstones are forgotten after their retention.
	clock.Advance(time.Hour + TombstoneRetention + time.Second)
	if n := s.PurgeTombstones(); n != 1 || len(s.Tombstones()) != 0 {
		t.Fatalf("PurgeTombstones = %d, left %v", n, s.Tombstones())
	}
}

func TestMergeBitsRefusesAnotherShape(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f := mustCreate(t, s, "f", scalable(1000, 0.01))
	other := mustCreate(t, NewStore(Limits{}, nil), "g", scalable(1000, 0.001))
	if _, err := f.MergeBits(other.State()); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("MergeBits of another shape = %v, want ErrInvalidOptions", err)
	}
	same := mustCreate(t, NewStore(Limits{}, nil), "h", scalable(1000, 0.01))
	if err := same.Add("x"); err != nil {
		t.Fatal(err)
	}
	if res, err := f.MergeBits(same.State()); err != nil || res.LayersChanged != 1 || !f.Check("x") {
		t.Fatalf("MergeBits of the same shape = %+v, %v", res, err)
	}
}

func TestMergeRespectsMemoryLimits(t *testing.T) {
	src := NewStore(Limits{}, nil)
	f := mustCreate(t, src, "f", scalable(1000, 0.01))
	if err := f.AddMany(keys("k", 10_000)); err != nil {
		t.Fatal(err)
	}
	small := NewStore(Limits{TotalBytes: f.SizeBytes() / 2}, nil)
	if _, err := small.Merge(f.State()); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("merge beyond the total limit = %v, want ErrOutOfMemory", err)
	}
	if used, limit := small.UsedBytes(), small.Limits().TotalBytes; used > limit {
		t.Fatalf("the store holds %d bytes, above its limit of %d", used, limit)
	}
}
