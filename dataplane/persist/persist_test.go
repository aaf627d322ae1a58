package persist

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/internal/tick/ticktest"
)

func scalable(capacity uint64, fpp float64) filter.Options {
	return filter.Options{Capacity: capacity, FPP: fpp, Scalable: true, Growth: 2, Tightening: 0.5}
}

// open opens dir and recovers it into a fresh store.
func open(t *testing.T, dir string, mutate ...func(*Options)) (*Persister, *filter.Store, RecoveryReport) {
	t.Helper()
	opts := Options{Dir: dir, Sync: SyncAlways, AllowCorruptSnapshot: true}
	for _, m := range mutate {
		m(&opts)
	}
	p, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	store := filter.NewStore(filter.Limits{}, opts.Clock)
	rep, err := p.Recover(store)
	if err != nil {
		_ = p.Close()
		t.Fatalf("Recover: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, store, rep
}

func mustCreate(t *testing.T, s *filter.Store, name string, opts filter.Options) *filter.Filter {
	t.Helper()
	f, _, err := s.Create(name, opts, false)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// sameState compares what a snapshot must keep of a filter.
func sameState(t *testing.T, got, want filter.State) {
	t.Helper()
	if got.Name != want.Name || got.Options != want.Options || !got.Created.Equal(want.Created) || got.Items() != want.Items() {
		t.Errorf("filter %q: got %+v / created %v / items %d, want %+v / %v / %d", want.Name, got.Options, got.Created, got.Items(), want.Options, want.Created, want.Items())
	}
	if len(got.Parts) != len(want.Parts) {
		t.Fatalf("filter %q: %d partitions, want %d", want.Name, len(got.Parts), len(want.Parts))
	}
	for p := range want.Parts {
		g, w := got.Parts[p], want.Parts[p]
		if g.Items != w.Items || g.NewestItems != w.NewestItems || len(g.Layers) != len(w.Layers) {
			t.Fatalf("filter %q partition %d: items %d, newest %d, %d layers; want %d, %d, %d", want.Name, p, g.Items, g.NewestItems, len(g.Layers), w.Items, w.NewestItems, len(w.Layers))
		}
		for i := range w.Layers {
			g, w := g.Layers[i], w.Layers[i]
			if g.Bits != w.Bits || g.Hashes != w.Hashes || !slices.Equal(g.Words, w.Words) {
				t.Errorf("filter %q partition %d layer %d differs after the round trip", want.Name, p, i)
			}
		}
	}
}

func stateOf(t *testing.T, s *filter.Store, name string) filter.State {
	t.Helper()
	f, err := s.Get(name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return f.State()
}

// populate makes a fixed, a grown scalable, an expiring, a sliding, a grown partitioned filter, a
// grown filter of RedisBloom's layout and a grown partitioned filter with an owner.
func populate(t *testing.T, s *filter.Store) map[string]filter.State {
	t.Helper()
	fixed := mustCreate(t, s, "fixed", filter.Options{Capacity: 1000, FPP: 0.01})
	grown := mustCreate(t, s, "grown", scalable(100, 0.001))
	expiring := mustCreate(t, s, "expiring", filter.Options{Capacity: 50, FPP: 0.1, ValidAfterCreate: time.Hour})
	sliding := mustCreate(t, s, "sliding", filter.Options{Capacity: 50, FPP: 0.1, ValidAfterAccess: time.Hour})
	split := scalable(100, 0.01)
	split.Partitions = 4
	grownSplit := mustCreate(t, s, "split", split)
	redisBloom := scalable(100, 0.01)
	redisBloom.Layout = filter.LayoutRedisBloom
	grownRedisBloom := mustCreate(t, s, "redisbloom", redisBloom)
	ownedSplit := split
	ownedSplit.Owner = filter.OwnerID{0x37, 0xe7, 0xe5, 0x8f, 15: 0xe9}
	owned := mustCreate(t, s, "owned", ownedSplit)
	for _, f := range []*filter.Filter{fixed, grown, expiring, sliding, grownSplit, grownRedisBloom, owned} {
		if err := f.AddMany(keys(f.Name()+"-", 700)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(grown.State().Parts[0].Layers); n < 3 {
		t.Fatalf("grown filter has %d layers, want >= 3", n)
	}
	want := map[string]filter.State{}
	for _, name := range s.Names() {
		want[name] = stateOf(t, s, name)
	}
	return want
}

func TestSnapshotRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	want := populate(t, store)
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := listSegments(dir); len(segs) != 1 {
		t.Errorf("segments after snapshot: %v, want only the new one", segs)
	}

	_, recovered, rep := open(t, dir)
	if rep.Filters != len(want) || rep.LogRecords != 0 {
		t.Errorf("report %+v: want %d filters from the snapshot alone", rep, len(want))
	}
	for name, st := range want {
		sameState(t, stateOf(t, recovered, name), st)
	}
}

func TestLogReplayWithoutSnapshot(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	want := populate(t, store)
	// Overwrite and delete must replay in order too.
	replaced, _, err := store.Create("fixed", filter.Options{Capacity: 10, FPP: 0.2}, true)
	if err != nil {
		t.Fatal(err)
	}
	_ = replaced.Add("after-overwrite")
	if _, _, err := store.Delete("expiring"); err != nil {
		t.Fatal(err)
	}
	want["fixed"] = replaced.State()
	delete(want, "expiring")
	_ = p.wal.close() // what a crash leaves: the log, no snapshot, the lock dropped
	_ = p.lock.release()

	_, recovered, rep := open(t, dir)
	if got := recovered.Names(); fmt.Sprint(got) != "[fixed grown owned redisbloom sliding split]" {
		t.Fatalf("names after replay = %v", got)
	}
	if rep.LogRecords == 0 || rep.Skipped != 0 {
		t.Errorf("report %+v: want log records and nothing skipped", rep)
	}
	for name, st := range want {
		got := stateOf(t, recovered, name)
		if got.Options != st.Options {
			t.Errorf("filter %q replayed with options %+v, want %+v", name, got.Options, st.Options)
		}
		// Replayed adds land in the same bits; items may differ only by false positives.
		if !slices.EqualFunc(got.AllLayers(), st.AllLayers(), func(a, b filter.LayerState) bool { return slices.Equal(a.Words, b.Words) }) {
			t.Errorf("filter %q differs after replay", name)
		}
	}
	f, _ := recovered.Get("fixed")
	if !f.Check("after-overwrite") || f.Options().Capacity != 10 {
		t.Errorf("overwrite was not replayed: capacity %d", f.Options().Capacity)
	}
}

func TestSnapshotThenLogThenRestart(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	f := mustCreate(t, store, "f", scalable(1000, 0.01))
	_ = f.AddMany(keys("before-", 500))
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_ = f.AddMany(keys("after-", 500))
	mustCreate(t, store, "g", filter.Options{Capacity: 10, FPP: 0.1})
	_ = p.Close()

	_, recovered, rep := open(t, dir)
	if rep.LogSegments != 1 || rep.LogRecords != 2 {
		t.Errorf("report %+v: want the one segment written after the snapshot, with 2 records", rep)
	}
	got, err := recovered.Get("f")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys("before-", 500), keys("after-", 500)...) {
		if !got.Check(k) {
			t.Fatalf("lost %q", k)
		}
	}
	if _, err := recovered.Get("g"); err != nil {
		t.Errorf("filter created after the snapshot: %v", err)
	}
}

func TestExpiredFiltersAreNotRecovered(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	p, store, _ := open(t, dir, func(o *Options) { o.Clock = clock })
	mustCreate(t, store, "short", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterCreate: time.Minute})
	mustCreate(t, store, "long", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterCreate: time.Hour})
	mustCreate(t, store, "in-log-only", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterCreate: time.Minute})
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()

	now = now.Add(2 * time.Minute)
	_, recovered, rep := open(t, dir, func(o *Options) { o.Clock = clock })
	if names := fmt.Sprint(recovered.Names()); names != "[long]" || rep.Expired != 2 {
		t.Errorf("names %s, expired %d; want [long] and 2 expired", names, rep.Expired)
	}
}

func TestSlidingExpiryFollowsLoggedAccesses(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	dir := t.TempDir()
	p, store, _ := open(t, dir, func(o *Options) { o.Clock = clock })
	f := mustCreate(t, store, "sliding", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterAccess: time.Minute})
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	advance(50 * time.Second)
	f.Check("x") // logged as an access: the snapshot's last access is 50 s old
	_ = p.Close()

	advance(30 * time.Second) // 80 s after the snapshot, 30 s after the access
	_, recovered, _ := open(t, dir, func(o *Options) { o.Clock = clock })
	if _, err := recovered.Get("sliding"); err != nil {
		t.Errorf("filter accessed 30 s before the restart was not recovered: %v", err)
	}
}

// writeSnapshotOf writes a snapshot of two filters, a then b, and returns its bytes. It writes
// the records itself: a store ranges over its filters in no fixed order.
func writeSnapshotOf(t *testing.T, dir string) []byte {
	t.Helper()
	store := filter.NewStore(filter.Limits{}, nil)
	w, err := createSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.writeHeader(snapshotHeader{Taken: time.Now(), FirstSegment: 1}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		f := mustCreate(t, store, name, filter.Options{Capacity: 100, FPP: 0.01})
		_ = f.AddMany(keys(name, 50))
		if err := w.writeFilter(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.commit(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// recordOffsets lists the offsets of the records in a snapshot: header, a, b.
func recordOffsets(t *testing.T, data []byte) []int {
	t.Helper()
	var offsets []int
	for off := 0; off < len(data); {
		offsets = append(offsets, off)
		off += recordHeaderSize + int(binary.LittleEndian.Uint64(data[off:]))
	}
	if len(offsets) != 3 {
		t.Fatalf("snapshot has %d records, want 3", len(offsets))
	}
	return offsets
}

func TestCorruptSnapshots(t *testing.T) {
	dir := t.TempDir()
	good := writeSnapshotOf(t, dir)
	off := recordOffsets(t, good)
	last := off[2] // the record of filter b

	cases := []struct {
		name    string
		corrupt func([]byte) []byte
		// names recovered when corruption is tolerated
		want string
	}{
		{"truncated header", func(d []byte) []byte { return d[:last+5] }, "[a]"},
		{"truncated body", func(d []byte) []byte { return d[:len(d)-3] }, "[a]"},
		{"bad magic", func(d []byte) []byte { d[last+8] = 0x42; return d }, "[a]"},
		{"bad checksum", func(d []byte) []byte { d[len(d)-1] ^= 0xff; return d }, "[a]"},
		{"huge length", func(d []byte) []byte { binary.LittleEndian.PutUint64(d[last:], 1<<39); return d }, "[a]"},
		{"negative length", func(d []byte) []byte { binary.LittleEndian.PutUint64(d[last:], ^uint64(0)); return d }, "[a]"},
		{"first record corrupt", func(d []byte) []byte { d[12] ^= 0xff; return d }, "[]"},
		{"empty file", func([]byte) []byte { return nil }, "[]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A snapshot of its own, without the log segment that followed it.
			caseDir := t.TempDir()
			data := tc.corrupt(slices.Clone(good))
			if err := os.WriteFile(filepath.Join(caseDir, snapshotFile), data, 0o644); err != nil {
				t.Fatal(err)
			}

			p, err := Open(Options{Dir: caseDir, Sync: SyncNo})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Recover(filter.NewStore(filter.Limits{}, nil))
			_ = p.Close()
			if tc.name == "empty file" {
				if err != nil {
					t.Errorf("strict recovery of an empty snapshot: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), snapshotFile) || !strings.Contains(err.Error(), "offset") {
				t.Errorf("strict recovery: err = %v, want one naming %s and the offset", err, snapshotFile)
			}

			_, store, rep := open(t, caseDir)
			if got := fmt.Sprint(store.Names()); got != tc.want {
				t.Errorf("tolerant recovery: names %s, want %s (report %+v)", got, tc.want, rep)
			}
		})
	}
}

func TestSnapshotTmp(t *testing.T) {
	dir := t.TempDir()
	good := writeSnapshotOf(t, dir)
	off := recordOffsets(t, good)

	t.Run("tmp only", func(t *testing.T) {
		caseDir := t.TempDir()
		_ = os.WriteFile(filepath.Join(caseDir, snapshotTmp), good, 0o644)
		_, store, rep := open(t, caseDir)
		if got := fmt.Sprint(store.Names()); got != "[a b]" || !rep.SnapshotTmp {
			t.Errorf("names %s, report %+v", got, rep)
		}
	})
	t.Run("tmp records win over db", func(t *testing.T) {
		caseDir := t.TempDir()
		_ = os.WriteFile(filepath.Join(caseDir, snapshotFile), good, 0o644)
		// A newer, unfinished snapshot in which a has one more key, torn in the middle of b.
		store := filter.NewStore(filter.Limits{}, nil)
		a := mustCreate(t, store, "a", filter.Options{Capacity: 100, FPP: 0.01})
		_ = a.AddMany(append(keys("a", 50), "only-in-tmp"))
		b := mustCreate(t, store, "b", filter.Options{Capacity: 100, FPP: 0.01})
		w, err := createSnapshot(caseDir)
		if err != nil {
			t.Fatal(err)
		}
		_ = w.writeHeader(snapshotHeader{FirstSegment: 1})
		_ = w.writeFilter(a)
		_ = w.writeFilter(b)
		_ = w.w.Flush()
		_ = w.file.Truncate(int64(off[2] + 20))
		_ = w.file.Close()

		_, recovered, rep := open(t, caseDir, func(o *Options) { o.AllowCorruptSnapshot = false })
		got, err := recovered.Get("a")
		if err != nil || !got.Check("only-in-tmp") {
			t.Errorf("a from tmp: err %v; want the tmp version", err)
		}
		fromDB, err := recovered.Get("b")
		if err != nil || !fromDB.Check("b7") {
			t.Errorf("b from db: err %v; want the db version", err)
		}
		if rep.CorruptRecords != 1 {
			t.Errorf("report %+v: want the torn tmp counted", rep)
		}
		// What came from snapshot.tmp is in snapshot.db before the pod serves: a crash in the
		// next snapshot, which writes over snapshot.tmp, cannot lose it.
		if _, err := os.Stat(filepath.Join(caseDir, snapshotTmp)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("snapshot.tmp after recovery: %v, want it made snapshot.db", err)
		}
		fromDisk := filter.NewStore(filter.Limits{}, nil)
		if _, err := readSnapshot(filepath.Join(caseDir, snapshotFile), keepAll, fromDisk.RestoreFilling); err != nil {
			t.Fatal(err)
		}
		if a, err := fromDisk.Get("a"); err != nil || !a.Check("only-in-tmp") {
			t.Errorf("snapshot.db after recovery lacks the value only snapshot.tmp held (%v)", err)
		}
	})
}

func TestTornLogTail(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	f := mustCreate(t, store, "f", filter.Options{Capacity: 100, FPP: 0.01})
	_ = f.AddMany([]string{"x", "y"})
	seg := p.wal.segment
	_ = p.Close()
	path := filepath.Join(dir, segmentName(seg))
	fh, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = fh.Write(appendRecord(nil, appendAdd(nil, "f", []string{"torn"}))[:20])
	_ = fh.Close()

	reopened, recovered, rep := open(t, dir, func(o *Options) { o.AllowCorruptSnapshot = false })
	got, err := recovered.Get("f")
	if err != nil || !got.Check("x") || !got.Check("y") || rep.CorruptRecords != 1 {
		t.Errorf("err %v, report %+v: want x and y recovered and the torn tail counted", err, rep)
	}
	// The next run appends to a fresh segment, never after the torn bytes.
	if segs, _ := listSegments(dir); len(segs) != 2 {
		t.Errorf("segments %v, want the torn one and a new one", segs)
	}
	// The torn tail was cut, so once a newer segment follows it is not taken for damage.
	_ = reopened.Close()
	_, again, rep := open(t, dir, func(o *Options) { o.AllowCorruptSnapshot = false })
	if got, err := again.Get("f"); err != nil || !got.Check("x") || rep.CorruptRecords != 0 {
		t.Errorf("err %v, report %+v: want x recovered and nothing damaged", err, rep)
	}
}

// recoverDir opens dir, recovers it and closes it, and answers what Recover answered.
func recoverDir(t *testing.T, dir string, allowCorrupt bool) (*filter.Store, RecoveryReport, error) {
	t.Helper()
	p, err := Open(Options{Dir: dir, Sync: SyncAlways, AllowCorruptSnapshot: allowCorrupt})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = p.Close() }()
	store := filter.NewStore(filter.Limits{}, nil)
	rep, err := p.Recover(store)
	return store, rep, err
}

// writeSegments writes one log segment per batch of keys, each by a process of its own (no
// snapshot in between), and returns their numbers.
func writeSegments(t *testing.T, dir string, batches ...[]string) []uint64 {
	t.Helper()
	var segs []uint64
	for i, batch := range batches {
		p, store, _ := open(t, dir)
		if i == 0 {
			mustCreate(t, store, "f", filter.Options{Capacity: 1000, FPP: 0.01})
		}
		f, err := store.Get("f")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddMany(batch); err != nil {
			t.Fatal(err)
		}
		segs = append(segs, p.wal.segment)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return segs
}

// A damaged record in a segment that is not the newest loses acknowledged writes: the start
// refuses, naming the file and the offset, unless told to go on, which it then does and counts.
func TestDamagedOlderSegment(t *testing.T) {
	dir := t.TempDir()
	segs := writeSegments(t, dir, []string{"a"}, []string{"b"})
	path := filepath.Join(dir, segmentName(segs[0]))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const first = 0 // the segment's first record: the filter's create
	data[first+recordHeaderSize+1] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	_, _, err = recoverDir(t, dir, false)
	if err == nil || !strings.Contains(err.Error(), path+" is damaged") || !strings.Contains(err.Error(), fmt.Sprintf("at offset %d", first)) {
		t.Fatalf("Recover = %v, want it to name %s and offset %d", err, path, first)
	}
	store, rep, err := recoverDir(t, dir, true)
	if err != nil {
		t.Fatalf("Recover with allowRecoverFromCorruptedPersistentFile: %v", err)
	}
	if rep.CorruptRecords != 1 {
		t.Errorf("report %+v: want the damage counted", rep)
	}
	if _, err := store.Get("f"); err == nil {
		t.Error("the filter whose create was in the damaged record is back")
	}
}

// A segment missing between others loses the writes it held: the start refuses, naming it,
// unless told to go on.
func TestMissingSegment(t *testing.T) {
	dir := t.TempDir()
	segs := writeSegments(t, dir, []string{"a"}, []string{"b"}, []string{"c"})
	missing := filepath.Join(dir, segmentName(segs[1]))
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	if _, _, err := recoverDir(t, dir, false); err == nil || !strings.Contains(err.Error(), missing+" is missing") {
		t.Fatalf("Recover = %v, want it to name %s", err, missing)
	}
	store, rep, err := recoverDir(t, dir, true)
	if err != nil {
		t.Fatalf("Recover with allowRecoverFromCorruptedPersistentFile: %v", err)
	}
	f, err := store.Get("f")
	if err != nil || !f.Check("a") || !f.Check("c") || rep.CorruptRecords != 1 {
		t.Errorf("err %v, report %+v: want a and c recovered and the gap counted", err, rep)
	}
}

func TestDataDirectoryIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	_ = os.WriteFile(path, []byte("x"), 0o644)
	_, err := Open(Options{Dir: path, Sync: SyncNo})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("err = %v, want 'not a directory'", err)
	}
}

// TestLockHeldByAnotherProcess runs this test binary again as a second process on the same
// directory.
func TestLockHeldByAnotherProcess(t *testing.T) {
	if dir := os.Getenv("BLOOMERY_LOCK_CHILD"); dir != "" {
		_, err := Open(Options{Dir: dir, Sync: SyncNo})
		if errors.Is(err, ErrLocked) {
			fmt.Println("LOCKED:", err)
			os.Exit(3)
		}
		fmt.Println("OPENED:", err)
		os.Exit(0)
	}
	dir := t.TempDir()
	p, err := Open(Options{Dir: dir, Sync: SyncNo})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestLockHeldByAnotherProcess$")
	cmd.Env = append(os.Environ(), "BLOOMERY_LOCK_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(string(out), dir) {
		t.Errorf("second process: %v, output %q; want exit 3 and a message naming %s", err, out, dir)
	}
	_ = p.Close()
	// Released: the next process gets it.
	cmd = exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestLockHeldByAnotherProcess$")
	cmd.Env = append(os.Environ(), "BLOOMERY_LOCK_CHILD="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("after release: %v, %s", err, out)
	}
}

// TestGroupCommitMakesEveryAnsweredWriteDurable runs writers concurrently under SyncAlways, with
// the flusher goroutine of Run and without it (before Run, the writers flush for themselves).
func TestGroupCommitMakesEveryAnsweredWriteDurable(t *testing.T) {
	for _, flusher := range []bool{false, true} {
		t.Run(map[bool]string{false: "writers flush", true: "flusher"}[flusher], func(t *testing.T) {
			dir := t.TempDir()
			p, store, _ := open(t, dir)
			if flusher {
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); p.Run(ctx) }()
				defer func() { cancel(); <-done }()
			}
			groupCommit(t, p, store)
		})
	}
}

func groupCommit(t *testing.T, p *Persister, store *filter.Store) {
	t.Helper()
	f := mustCreate(t, store, "f", filter.Options{Capacity: 100_000, FPP: 0.01})
	var fsyncs, writes int64
	var mu sync.Mutex
	p.wal.observe = func(time.Duration) { mu.Lock(); fsyncs++; mu.Unlock() }
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := f.CheckAndSet(fmt.Sprintf("w%d-%d", w, i)); err != nil {
					t.Error(err)
				}
				mu.Lock()
				writes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Read the log as a crash would leave it: no close, no final flush.
	_ = p.lock.release()
	_, recovered, _ := open(t, p.opts.Dir)
	got, _ := recovered.Get("f")
	for w := range 16 {
		for i := range 50 {
			if !got.Check(fmt.Sprintf("w%d-%d", w, i)) {
				t.Fatalf("answered write w%d-%d was not on disk", w, i)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d writes, %d durable flushes", writes, fsyncs)
	if fsyncs >= writes {
		t.Errorf("%d durable flushes for %d concurrent writes: no group commit", fsyncs, writes)
	}
}

// running runs p until the test ends.
func running(t *testing.T, p *Persister) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A criterion takes a snapshot at the end of a period with more than its updates, and only then.
func TestTriggersSnapshotOnlyAboveTheThreshold(t *testing.T) {
	dir := t.TempDir()
	const period = 20 * time.Second
	tk := new(ticktest.Ticker)
	p, store, _ := open(t, dir, func(o *Options) {
		o.Criteria = []Criterion{{Period: period, UpdatesMoreThan: 3}}
		o.Every = tk.Every
	})
	running(t, p)

	f := mustCreate(t, store, "f", filter.Options{Capacity: 100, FPP: 0.01})
	_ = f.AddMany([]string{"a", "b"}) // 3 updates with the create: not more than 3
	// Ten periods without a snapshot: the threshold is strict, as in filter-service.
	for range 10 {
		tk.Tick(t, period)
	}
	if n := p.Stats().SnapshotsTaken.Load(); n != 0 {
		t.Fatalf("%d snapshots after 3 updates with updatesMoreThan 3, want none", n)
	}
	_ = f.Add("c") // the fourth
	if n := p.Stats().SnapshotsTaken.Load(); n != 0 {
		t.Fatalf("%d snapshots before the period ended, want none", n)
	}
	tk.Tick(t, period)
	if n := p.Stats().SnapshotsTaken.Load(); n != 1 {
		t.Fatalf("%d snapshots at the end of the period of the fourth update, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil {
		t.Errorf("snapshot file: %v", err)
	}
	// The counter starts over: no second snapshot without new updates.
	for range 10 {
		tk.Tick(t, period)
	}
	if n := p.Stats().SnapshotsTaken.Load(); n != 1 {
		t.Errorf("%d snapshots without new updates after the first, want none", n-1)
	}
}

func keepAll(filter.State) bool { return true }

// A filter created holding some of its partitions (placed on other pods too) is replayed holding
// those alone, and a snapshot keeps them alone: a restart takes no memory for the others.
func TestFilterHoldingSomePartitionsReplaysThem(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	opts := filter.Options{Capacity: 1000, FPP: 0.01, Partitions: 5}
	holds := func(p int) bool { return p == 1 || p == 4 }
	f, _, err := store.CreateHolding("some", opts, false, holds)
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, k := range keys("k", 200) {
		if holds(f.PartitionOf(k)) {
			mine = append(mine, k)
		}
	}
	if err := f.AddMany(mine); err != nil {
		t.Fatal(err)
	}
	_ = p.wal.close() // a crash: the log alone
	_ = p.lock.release()

	p, recovered, _ := open(t, dir)
	got, err := recovered.Get("some")
	if err != nil {
		t.Fatal(err)
	}
	if got.HeldPartitions() != 2 || !got.Holds(1) || !got.Holds(4) || got.SizeBytes() != f.SizeBytes() {
		t.Fatalf("replayed holding %d partitions (1: %v, 4: %v) of %d bytes; want 1 and 4, %d bytes", got.HeldPartitions(), got.Holds(1), got.Holds(4), got.SizeBytes(), f.SizeBytes())
	}
	if present := got.CheckMany(mine); slices.Contains(present, false) {
		t.Fatal("a replayed value is missing")
	}
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_ = p.wal.close()
	_ = p.lock.release()
	_, again, _ := open(t, dir)
	if g, _ := again.Get("some"); g == nil || g.HeldPartitions() != 2 || !g.Holds(4) {
		t.Fatalf("restored from the snapshot: %v", g)
	}
}
