package persist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/internal/tick/ticktest"
)

// fullDisk makes every segment's writes fail with ENOSPC while full is set, after writing half
// of the records they were given, as a write cut short by a full disk leaves them.
type fullDisk struct {
	segmentFile
	full *atomic.Bool
}

func (s fullDisk) write(records []byte, sync bool) error {
	if !s.full.Load() {
		return s.segmentFile.write(records, sync)
	}
	if b, ok := s.segmentFile.(*bufferedSegment); ok {
		_, _ = b.file.WriteAt(records[:len(records)/2], b.size)
	}
	return fmt.Errorf("write: %w", syscall.ENOSPC)
}

// withFullDisk routes every segment of the test through fullDisk, written through the page cache
// so that the torn half reaches the file.
func withFullDisk(t *testing.T) *atomic.Bool {
	t.Helper()
	full := new(atomic.Bool)
	savedFaults, savedDirect := faults, openDirect
	t.Cleanup(func() { faults, openDirect = savedFaults, savedDirect })
	faults = func(s segmentFile) segmentFile { return fullDisk{s, full} }
	openDirect = func(*os.File, *asyncIO) (segmentFile, error) { return nil, syscall.EINVAL }
	return full
}

func waitHealed(t *testing.T, p *Persister) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().LogBroken() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the log did not heal: %v", p.Stats().LogBroken())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func present(t *testing.T, s *filter.Store, name string, values []string) []string {
	t.Helper()
	f, err := s.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for i, ok := range f.CheckMany(values) {
		if !ok {
			missing = append(missing, values[i])
		}
	}
	return missing
}

// Under logSync: always a write the disk refuses is not acknowledged; the log refuses writes
// until it heals on its own, then takes them again; after a restart every acknowledged write is
// there, and the segment the failure tore is cut cleanly.
func TestLogHealsAfterAFullDisk(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncEverySecond} {
		t.Run(string(policy), func(t *testing.T) {
			full := withFullDisk(t)
			dir := t.TempDir()
			p, store, _ := open(t, dir, func(o *Options) { o.Sync = policy })
			store.SetJournal(p)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); p.Run(ctx) }()

			f := mustCreate(t, store, "f", scalable(1000, 0.01))
			acked := keys("before-", 50)
			if err := f.AddMany(acked); err != nil {
				t.Fatal(err)
			}
			if err := p.wal.flush(true); err != nil {
				t.Fatal(err)
			}

			full.Store(true)
			// Under everysec these are acknowledged once buffered: the flush that fails must not
			// lose them.
			buffered := keys("buffered-", 50)
			err := f.AddMany(buffered)
			if policy == SyncAlways {
				// The answer's 507 code 12 is chosen on ErrNotJournaled, and the reason is the system's.
				if !errors.Is(err, filter.ErrNotJournaled) || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("a write the disk refused: %v, want ErrNotJournaled and ENOSPC", err)
				}
			} else {
				if err != nil {
					t.Fatalf("a buffered write under everysec: %v", err)
				}
				acked = append(acked, buffered...)
				if err := p.wal.flush(true); err == nil {
					t.Fatal("a flush to a full disk succeeded")
				}
			}
			// The record comes before the bits: the batch whose own flush failed left none.
			if missing := present(t, store, "f", buffered); policy == SyncAlways && len(missing) != len(buffered) {
				t.Fatalf("%d values of the write the disk refused were applied", len(buffered)-len(missing))
			}
			if p.Stats().LogBroken() == nil || p.Stats().LogWriteErrors.Load() == 0 {
				t.Fatalf("after a failed write: broken %v, %d write errors", p.Stats().LogBroken(), p.Stats().LogWriteErrors.Load())
			}
			// Refused before it is applied: the log is known to be broken.
			refused := keys("while-broken-", 20)
			if err := f.AddMany(refused); !errors.Is(err, filter.ErrNotJournaled) {
				t.Fatalf("a write while the log is broken: %v, want ErrNotJournaled", err)
			}
			if _, err := f.CheckAndSet(refused[0]); !errors.Is(err, filter.ErrNotJournaled) {
				t.Fatalf("a check-and-set while the log is broken: %v, want ErrNotJournaled", err)
			}
			if missing := present(t, store, "f", refused); len(missing) != len(refused) {
				t.Fatalf("%d values of writes refused while the log is broken were applied", len(refused)-len(missing))
			}
			// The first try to heal, after the back-off, fails too, and leaves the log broken.
			failures := p.Stats().LogWriteErrors.Load()
			deadline := time.Now().Add(10 * time.Second)
			for p.Stats().LogWriteErrors.Load() == failures {
				if time.Now().After(deadline) {
					t.Fatal("no try to heal the log while the disk is full")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if p.Stats().LogBroken() == nil {
				t.Fatal("the log healed while the disk is still full")
			}

			full.Store(false)
			waitHealed(t, p)
			after := keys("after-", 50)
			if err := f.AddMany(after); err != nil {
				t.Fatalf("a write after the log healed: %v", err)
			}
			acked = append(acked, after...)
			cancel()
			<-done
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}

			// Strict: the segments the healing cut and opened must chain without a gap.
			_, recovered, rep := open(t, dir, func(o *Options) { o.AllowCorruptSnapshot = false })
			if missing := present(t, recovered, "f", acked); len(missing) > 0 {
				t.Fatalf("after a restart %d acknowledged values are missing, such as %q", len(missing), missing[0])
			}
			if rep.CorruptRecords != 0 || rep.Skipped != 0 {
				t.Errorf("recovery found damage: %+v", rep)
			}
			if policy == SyncAlways {
				// Healing must not write the refused batch's records after all.
				if missing := present(t, recovered, "f", buffered); len(missing) != len(buffered) {
					t.Errorf("after a restart %d values of the write the disk refused are there", len(buffered)-len(missing))
				}
			}
			segments, err := listSegments(dir)
			if err != nil || len(segments) < 2 || !slices.IsSorted(segments) {
				t.Errorf("segments %v, %v: want the torn one and those after it", segments, err)
			}
		})
	}
}

// Once the log written since the last snapshot exceeds SnapshotLogBytes a snapshot is taken at
// the next check and the segments it covers go, whatever the update-count criteria say. A
// snapshot that fails is tried again after failedSnapshotPause, not at every check.
func TestSnapshotOnLogSize(t *testing.T) {
	dir := t.TempDir()
	tk := new(ticktest.Ticker)
	clock := ticktest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	p, store, _ := open(t, dir, func(o *Options) {
		o.SnapshotLogBytes = 64 << 10
		o.Criteria = nil
		o.Every, o.Clock = tk.Every, clock.Now
	})
	running(t, p)

	f := mustCreate(t, store, "f", scalable(100_000, 0.01))
	if err := f.AddMany(keys("below-", 100)); err != nil {
		t.Fatal(err)
	}
	tk.Tick(t, logCheckInterval)
	if n := p.Stats().SnapshotsTaken.Load(); n != 0 {
		t.Fatalf("%d snapshots with a few KiB of log, want none", n)
	}
	for i := range 20 {
		if err := f.AddMany(keys(fmt.Sprint("above-", i, "-"), 500)); err != nil {
			t.Fatal(err)
		}
	}

	// A directory where snapshot.tmp goes makes the snapshot fail.
	blocker := filepath.Join(dir, snapshotTmp)
	if err := os.Mkdir(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	tk.Tick(t, logCheckInterval)
	if n := p.Stats().SnapshotFailures.Load(); n != 1 {
		t.Fatalf("%d failed snapshots with snapshot.tmp a directory, want 1", n)
	}
	clock.Advance(failedSnapshotPause - time.Second)
	tk.Tick(t, logCheckInterval)
	if n := p.Stats().SnapshotFailures.Load(); n != 1 {
		t.Fatalf("%d failed snapshots within %s of the first, want no second try", n, failedSnapshotPause)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	tk.Tick(t, logCheckInterval)
	if n := p.Stats().SnapshotsTaken.Load(); n != 1 {
		t.Fatalf("%d snapshots after %d bytes of log and the pause, want 1", n, p.Stats().LogBytes.Load())
	}
	segments, err := listSegments(dir)
	if err != nil || len(segments) != 1 {
		t.Errorf("segments after the snapshot: %v, %v; want only the new one", segments, err)
	}
	tk.Tick(t, logCheckInterval)
	if n := p.Stats().SnapshotsTaken.Load(); n != 1 {
		t.Errorf("%d snapshots with no log written since the last, want 1", n)
	}
}

// An add is recorded before it is applied. A snapshot that moved the log on between the two
// would drop the segment holding the record and copy a filter without the keys: lost, though
// acknowledged. The snapshot waits for the apply instead.
func TestSnapshotWaitsForAnAddBetweenRecordAndApply(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	f := mustCreate(t, store, "f", scalable(1000, 0.01))
	added := keys("between-", 20)
	if err := p.Added("f", added); err != nil { // the engine's first step of f.AddMany
		t.Fatal(err)
	}
	snapshotted := make(chan error, 1)
	go func() { snapshotted <- p.Snapshot() }()
	select {
	case err := <-snapshotted:
		t.Fatalf("the snapshot finished (%v) while an add it covers was not applied", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := f.Replay(added); err != nil { // the engine's second step, without a new record
		t.Fatal(err)
	}
	p.Applied()
	if err := <-snapshotted; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, recovered, _ := open(t, dir)
	if missing := present(t, recovered, "f", added); len(missing) > 0 {
		t.Fatalf("after the snapshot and a restart %d of %d added values are missing", len(missing), len(added))
	}
}
