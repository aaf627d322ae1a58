package persist

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

type testSegment struct {
	segmentFile
	path string
}

// segmentKinds opens a new segment in dir of every kind this system has.
func segmentKinds(t *testing.T, dir string) map[string]testSegment {
	t.Helper()
	kinds := map[string]testSegment{}
	f, err := createSegmentFile(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	kinds["buffered"] = testSegment{&bufferedSegment{file: f}, f.Name()}
	aio, err := newAsyncIO()
	if err != nil {
		t.Logf("no direct segment: %v", err)
		return kinds
	}
	t.Cleanup(func() { _ = aio.close() })
	f, err = createSegmentFile(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := openDirectSegment(f, aio)
	if err != nil {
		t.Logf("no direct segment: %v", err)
		_ = f.Close()
		return kinds
	}
	kinds["direct"] = testSegment{direct, f.Name()}
	return kinds
}

// TestSegmentsHoldWhatWasWritten writes batches of every size around the blocks, chunks and
// write bounds of the segments and reads the files back: the records, then zeros to a multiple
// of preallocChunk; after close, the records alone.
func TestSegmentsHoldWhatWasWritten(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 12, directBlock - 13, directBlock, directBlock + 1, 3*directBlock - 1, 100, directWriteSize - 7,
		directWriteSize, directWriteSize + directBlock + 5, 2*preallocChunk + 3, 1, 40, 13}
	for name, seg := range segmentKinds(t, dir) {
		t.Run(name, func(t *testing.T) {
			var want []byte
			for i, n := range sizes {
				batch := make([]byte, n)
				for j := range batch {
					batch[j] = byte(1 + rng.IntN(255)) // never zero, so that a lost byte shows
				}
				if err := seg.write(batch, i%2 == 0); err != nil {
					t.Fatalf("write %d of %d bytes: %v", i, n, err)
				}
				want = append(want, batch...)
			}
			path := seg.path
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(got)%preallocChunk != 0 || len(got) < len(want) {
				t.Errorf("file of %d bytes for %d bytes of records: want a multiple of %d", len(got), len(want), preallocChunk)
			}
			if !bytes.Equal(got[:min(len(want), len(got))], want) {
				t.Errorf("the file does not start with the %d bytes written", len(want))
			}
			if len(got) > len(want) && !isZero(got[len(want):]) {
				t.Errorf("bytes after the records are not all zeros")
			}
			if err := seg.close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
				t.Errorf("after close: %d bytes, want the %d bytes of records alone", len(got), len(want))
			}
		})
	}
}

// TestZerosEndALogSegment reads back a segment as a crash leaves it, zeros after its records:
// every record, and no torn tail reported. A record torn before the zeros is reported.
func TestZerosEndALogSegment(t *testing.T) {
	for _, torn := range []bool{false, true} {
		dir := t.TempDir()
		p, store, _ := open(t, dir)
		f := mustCreate(t, store, "f", filter.Options{Capacity: 1000, FPP: 0.01})
		if _, err := f.CheckAndSet("x"); err != nil {
			t.Fatal(err)
		}
		if torn {
			whole := appendRecord(nil, appendAdd(nil, "f", []string{"torn"}))
			if err := p.wal.file.write(whole[:len(whole)-3], true); err != nil {
				t.Fatal(err)
			}
		}
		seg := filepath.Join(dir, segmentName(p.wal.segment))
		_ = p.lock.release() // a crash: no close, so the zeros stay
		if fi, err := os.Stat(seg); err != nil || fi.Size() != preallocChunk {
			t.Fatalf("segment %s: %v, want %d bytes, records then zeros", seg, err, preallocChunk)
		}
		_, recovered, rep := open(t, dir)
		got, err := recovered.Get("f")
		if err != nil || !got.Check("x") {
			t.Errorf("torn=%t: %v; want f with x", torn, err)
		}
		if wantCorrupt := map[bool]int{false: 0, true: 1}[torn]; rep.CorruptRecords != wantCorrupt {
			t.Errorf("torn=%t: %d corrupt records reported, want %d", torn, rep.CorruptRecords, wantCorrupt)
		}
	}
}

// TestZerosInASnapshotAreCorruption keeps snapshots strict: they are never preallocated, so zeros
// where a record should be are damage.
func TestZerosInASnapshotAreCorruption(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(appendRecord(nil, []byte{kindTombstone}))
	buf.Write(make([]byte, 64))
	got, _ := decodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()), keepAll, filter.NewStore(filter.Limits{}, nil).RestoreFilling)
	if !errors.Is(got.corrupt, ErrCorrupt) {
		t.Errorf("zeros after a snapshot record read as %v, want ErrCorrupt", got.corrupt)
	}
}
