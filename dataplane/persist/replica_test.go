package persist

import (
	"bytes"
	"errors"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// A delete's tombstone survives a restart, from the log and from a snapshot, so that a replica's
// stale copy cannot bring the filter back after the pod restarts.
func TestTombstonesSurviveRestarts(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		dir := t.TempDir()
		p, store, _ := open(t, dir)
		f := mustCreate(t, store, "gone", scalable(100, 0.01))
		stale := f.State()
		if _, _, err := store.Delete("gone"); err != nil {
			t.Fatal(err)
		}
		if snapshot {
			if err := p.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		_, store, _ = open(t, dir)
		if len(store.Tombstones()) != 1 {
			t.Fatalf("snapshot=%t: after a restart the store has tombstones %v, want one for gone", snapshot, store.Tombstones())
		}
		if res, err := store.Merge(stale); err != nil || !res.Stale {
			t.Fatalf("snapshot=%t: after a restart a merge of the deleted filter = %+v, %v; want stale", snapshot, res, err)
		}
	}
}

func TestDumpRoundTrip(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	f := mustCreate(t, store, "d", scalable(1000, 0.01))
	if err := f.AddMany(keys("k", 5000)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteDump(&buf, f.State()); err != nil {
		t.Fatal(err)
	}
	got, _, err := ReadDump(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, got, f.State())

	corrupt := bytes.Clone(buf.Bytes())
	corrupt[len(corrupt)-1] ^= 1
	if _, _, err := ReadDump(bytes.NewReader(corrupt), int64(len(corrupt))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a dump with a flipped bit reads as %v, want ErrCorrupt", err)
	}
	if _, _, err := ReadDump(bytes.NewReader(buf.Bytes()), int64(buf.Len()/2)); err == nil {
		t.Fatal("a dump larger than its limit was read")
	}
}
