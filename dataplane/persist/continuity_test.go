package persist

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// threeSegments writes a log of three segments, each with values of its own, and closes it
// without a snapshot, so that recovery must read all three. It returns each segment's values.
func threeSegments(t *testing.T, dir string) [3][]string {
	t.Helper()
	p, store, _ := open(t, dir)
	f := mustCreate(t, store, "f", scalable(1000, 0.01))
	var values [3][]string
	for i := range values {
		values[i] = keys(segmentName(uint64(i+1))+"-", 20)
		for _, v := range values[i] { // a record each
			if err := f.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		if i < len(values)-1 {
			if _, err := p.wal.rotate(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return values
}

// A sealed segment in the middle of the log that lost its end at a record's boundary ends its
// reading as cleanly as the end of its file or the zeros ahead of its records do: only the start record of the segment
// after it, which says how many bytes of records it held, tells the loss. The strict start
// refuses, naming the segment and the offset; the tolerant start keeps the rest and counts it.
func TestRecoverySeesAMiddleSegmentCutShortOrZeroed(t *testing.T) {
	middle := segmentName(2)
	damages := map[string]func(t *testing.T, path string, size int64){
		"truncated": func(t *testing.T, path string, _ int64) {
			t.Helper()
			if err := os.Truncate(path, middleRecord(t, path)); err != nil {
				t.Fatal(err)
			}
		},
		"emptied": func(t *testing.T, path string, _ int64) {
			t.Helper()
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		},
		"zeroed": func(t *testing.T, path string, size int64) {
			t.Helper()
			if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"tail zeroed": func(t *testing.T, path string, _ int64) {
			t.Helper()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			clear(b[middleRecord(t, path):])
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			values := threeSegments(t, dir)
			path := filepath.Join(dir, middle)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			damage(t, path, fi.Size())

			p, err := Open(Options{Dir: dir, Sync: SyncAlways})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Recover(filter.NewStore(filter.Limits{}, nil))
			_ = p.Close()
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("strict recovery of a damaged %s: %v; want an error naming %s and the offset", middle, err, path)
			}

			var logs bytes.Buffer
			_, store, rep := open(t, dir, func(o *Options) { o.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
			if rep.CorruptRecords != 1 {
				t.Errorf("tolerant recovery counted %d corrupt files, want 1", rep.CorruptRecords)
			}
			if !strings.Contains(logs.String(), "Log segment lost records") || !strings.Contains(logs.String(), middle) {
				t.Errorf("tolerant recovery did not log the loss of %s:\n%s", middle, logs.String())
			}
			for _, i := range []int{0, 2} {
				if missing := present(t, store, "f", values[i]); len(missing) > 0 {
					t.Errorf("tolerant recovery lost %d values of the undamaged %s", len(missing), segmentName(uint64(i+1)))
				}
			}
		})
	}
}

// middleRecord answers the offset where the middle record of the segment at path begins: a cut
// there leaves whole records, which read as a clean end.
func middleRecord(t *testing.T, path string) int64 {
	t.Helper()
	f, rr, err := openSegment(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var starts []int64
	for {
		start := rr.offset
		b, err := rr.next()
		if err != nil {
			break
		}
		if err := b.verify(); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, start)
	}
	return starts[len(starts)/2]
}

// A log that rotates and restarts chains every segment to the one before: the strict start reads
// it back without damage, so the check does not refuse what the log writes. (Healing after a full
// disk is checked likewise by TestLogHealsAfterAFullDisk.)
func TestRecoveryOfAnUndamagedLogIsStrictClean(t *testing.T) {
	dir := t.TempDir()
	values := threeSegments(t, dir)
	p, store, rep := open(t, dir, func(o *Options) { o.AllowCorruptSnapshot = false })
	if rep.CorruptRecords != 0 || rep.Skipped != 0 {
		t.Fatalf("recovery of an undamaged log: %+v", rep)
	}
	for _, v := range values {
		if missing := present(t, store, "f", v); len(missing) > 0 {
			t.Fatalf("%d values missing", len(missing))
		}
	}
	// The segment recovery opens chains to the newest it read: one more restart is clean.
	f, _ := store.Get("f")
	if err := f.AddMany(keys("after-", 5)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, rep := open(t, dir, func(o *Options) { o.AllowCorruptSnapshot = false }); rep.CorruptRecords != 0 {
		t.Fatalf("second recovery: %+v", rep)
	}
}

// Segments written before start records existed (testdata/log-before-segment-starts: three
// segments of ten values each in the filter "segments", written by the code of that version) are read as before,
// unchecked, and the log goes on after them with checked segments.
func TestSegmentsWithoutStartRecordsLoad(t *testing.T) {
	dir := copyTestdata(t, "log-before-segment-starts")
	strict := func(o *Options) { o.AllowCorruptSnapshot = false }
	p, store, rep := open(t, dir, strict)
	if rep.CorruptRecords != 0 || rep.Skipped != 0 || rep.LogSegments != 3 {
		t.Fatalf("recovery of the former format: %+v", rep)
	}
	var want []string
	for seg := range 3 {
		for i := range 10 {
			want = append(want, fmt.Sprintf("s%d-%d", seg, i))
		}
	}
	if missing := present(t, store, "segments", want); len(missing) > 0 {
		t.Fatalf("%d values of the former format missing, such as %q", len(missing), missing[0])
	}
	f, _ := store.Get("segments")
	if err := f.AddMany(keys("new-", 10)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, store, rep = open(t, dir, strict)
	if rep.CorruptRecords != 0 || rep.LogSegments != 4 {
		t.Fatalf("recovery after a segment of the new format: %+v", rep)
	}
	if missing := present(t, store, "segments", append(want, keys("new-", 10)...)); len(missing) > 0 {
		t.Fatalf("%d values missing after the restart", len(missing))
	}
}

// copyTestdata copies a directory of testdata into a temporary one, which recovery may change.
func copyTestdata(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
