package persist

import (
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// The pieces of a dump loaded into a filter (BF.LOADCHUNK's) are journaled as they are applied:
// a crash without a snapshot loses none, in a data directory of the format before loads
// existed too, whose own records replay as they did.
func TestLoadedPiecesSurviveACrash(t *testing.T) {
	dir := copyTestdata(t, "datadir-before-expiry")
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	withClock := func(o *Options) { o.Clock = func() time.Time { return now } }
	p, store, _ := open(t, dir, withClock)

	opts := filter.Options{Capacity: 200, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: filter.LayoutRedisBloom}
	src := filter.NewStore(filter.Limits{}, nil)
	dumped := mustCreate(t, src, "dumped", opts)
	if err := dumped.AddMany(keys("k", 1000)); err != nil { // three layers
		t.Fatal(err)
	}
	st := dumped.State()
	loaded := mustCreate(t, store, "loaded", opts)
	if err := loaded.Load(filter.LoadHeadOf(st)); err != nil {
		t.Fatal(err)
	}
	for i, layer := range st.Parts[0].Layers {
		b := wordBytes(layer.Words)
		half := len(b) / 16 * 8 // two pieces of whole words
		for _, at := range []int{half, 0} {
			end := len(b)
			if at == 0 {
				end = half
			}
			if err := loaded.Load(filter.Load{Layer: i, Offset: uint64(at), Bytes: b[at:end]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if snapshots := p.Stats().SnapshotsTaken.Load(); snapshots != 0 {
		t.Fatalf("%d snapshots taken while loading, want none", snapshots)
	}
	_ = p.wal.close() // what a crash leaves: the log, no snapshot, the lock dropped
	_ = p.lock.release()

	_, recovered, rep := open(t, dir, withClock)
	if rep.Skipped != 0 || rep.CorruptRecords != 0 {
		t.Errorf("recovery skipped %d records and met %d corrupt files", rep.Skipped, rep.CorruptRecords)
	}
	got := stateOf(t, recovered, "loaded")
	if !slices.EqualFunc(got.AllLayers(), st.AllLayers(), func(a, b filter.LayerState) bool { return slices.Equal(a.Words, b.Words) }) {
		t.Error("the loaded filter's bits differ from the dump's after the crash")
	}
	if got.Items() != st.Items() {
		t.Errorf("%d items after the crash, want the dump's %d", got.Items(), st.Items())
	}
	if f, err := recovered.Get("in-log"); err != nil || f.Items() != 50 {
		t.Errorf("the former format's filter in-log: %v; want 50 items", err)
	}
}
