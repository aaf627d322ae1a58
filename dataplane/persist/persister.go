package persist

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/internal/tick"
)

// Criterion asks for a snapshot every Period when more than UpdatesMoreThan updates happened
// since the last one (filter-service's triggerPersistenceCriteria).
type Criterion struct {
	Period          time.Duration
	UpdatesMoreThan int64
}

// Options configure a Persister.
type Options struct {
	Dir  string
	Sync SyncPolicy
	// AllowCorruptSnapshot starts from the valid records before a corrupt one in snapshot.db
	// instead of refusing to start.
	AllowCorruptSnapshot bool
	Criteria             []Criterion
	// AllowLowDiskSpace starts, with a warning, on a volume without room for one more snapshot;
	// otherwise recovery refuses to.
	AllowLowDiskSpace bool
	// SnapshotLogBytes takes a snapshot once the log written since the last one exceeds it, so
	// that the log cannot outgrow the volume; 0 takes none for that.
	SnapshotLogBytes int64
	Log              *slog.Logger
	// Clock decides which filters expired, and when a snapshot that failed may be tried again;
	// nil means time.Now.
	Clock func() time.Time
	// Every runs the periodic checks of the snapshot triggers (Criteria, SnapshotLogBytes); nil
	// means tick.Every. Tests pass a ticktest.Ticker to say when a period has passed.
	Every tick.Func
	// SyncObserver, if set, hears how long each durable flush of the log took (metrics): an
	// fdatasync, or under SyncAlways a direct write. It is called on the writer's path, after
	// the flush and outside the log's lock, so it must be quick.
	SyncObserver func(time.Duration)
}

// Persister keeps one store on disk. It is the store's filter.Journal.
type Persister struct {
	opts  Options
	lock  *dirLock
	wal   *wal
	store *filter.Store

	// updates counts changes since the last snapshot started, for the triggers.
	updates atomic.Int64
	// logBytesAtSnapshot is Stats.LogBytes when the last snapshot moved the log on.
	logBytesAtSnapshot atomic.Int64
	// snapshotting lets one snapshot run at a time.
	snapshotting sync.Mutex
	// applying is held for reading from an add's record to the end of its apply (Added to
	// Applied), and for writing while a snapshot moves the log to a new segment: each record of
	// the segments the snapshot covers, and drops, is then in the filters it copies.
	applying sync.RWMutex
	// snapshotsBegun numbers snapshots as they begin; lastGoodSnapshot is the number of the
	// last that succeeded, read and written under snapshotting.
	snapshotsBegun   atomic.Uint64
	lastGoodSnapshot uint64
	stats            Stats
}

// Stats are counters for metrics and logs.
type Stats struct {
	SnapshotsTaken     atomic.Int64
	SnapshotFailures   atomic.Int64
	LastSnapshotUnix   atomic.Int64 // seconds; from snapshot.db at recovery, 0 while there is none
	LastSnapshotMicros atomic.Int64 // how long the last snapshot took
	LastSnapshotBytes  atomic.Int64
	LogRecords         atomic.Int64
	LogBytes           atomic.Int64
	// LogWriteErrors counts the log's failed writes and syncs, and its failed attempts to heal.
	LogWriteErrors atomic.Int64
	// logBroken is why the log is broken, nil while it is healthy.
	logBroken atomic.Pointer[error]
}

// LogBroken answers why the log cannot be written, or nil while it can: writes then fail, and the
// pod should not take traffic.
func (s *Stats) LogBroken() error {
	if err := s.logBroken.Load(); err != nil {
		return *err
	}
	return nil
}

func (s *Stats) logHealth(err error) {
	if err == nil {
		s.logBroken.Store(nil)
		return
	}
	s.LogWriteErrors.Add(1)
	s.logBroken.Store(&err)
}

// Open locks the data directory, creating it if needed. A second process on the same directory
// gets ErrLocked.
func Open(opts Options) (*Persister, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Every == nil {
		opts.Every = tick.Every
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if _, err := ParseSyncPolicy(string(opts.Sync)); err != nil {
		return nil, err
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	return &Persister{opts: opts, lock: lock}, nil
}

// Stats are the persister's counters.
func (p *Persister) Stats() *Stats { return &p.stats }

// RecoveryReport says what recovery read and skipped.
type RecoveryReport struct {
	Filters        int // live filters in the store after recovery
	SnapshotBytes  int64
	SnapshotTmp    bool // snapshot.tmp held records, left by a snapshot that did not finish
	LogSegments    int
	LogRecords     int
	Recovered      int // records used: filters restored from the snapshot files, log records applied
	Skipped        int // records that could not be used
	Expired        int // filters that expired while the process was down
	CorruptRecords int // files whose reading stopped at a torn or corrupt record, missing log segments, and segments that lost their end
	Duration       time.Duration
}

// Recover loads snapshot.db, then snapshot.tmp (whose valid records win), then the log into
// store, which must be empty; then it opens a new log segment and becomes the store's journal.
func (p *Persister) Recover(store *filter.Store) (RecoveryReport, error) {
	start := time.Now()
	var rep RecoveryReport
	now := p.opts.Clock()
	// A filter with sliding expiry may be revived by an access in the log, and any filter by a
	// change of its expiry there (PERSIST, or EXPIRE to a later deadline); it is purged after the
	// replay if not. Otherwise expiry is final, and an expired filter is not worth its memory.
	revivable, err := p.expiryChangesInLog()
	if err != nil {
		return rep, err
	}
	live := func(st filter.State) bool {
		return st.Options.ValidAfterAccess > 0 || revivable[st.Name] || !st.ExpiredAt(now)
	}

	// Filters are restored as they are read, straight into their own memory. snapshot.tmp's
	// come second and replace snapshot.db's of the same name.
	restore := func(head filter.State, fill func([][]uint64) error) error {
		if err := store.RestoreFilling(head, fill); err != nil {
			return fmt.Errorf("restoring filter %q: %w", head.Name, err)
		}
		return nil
	}
	dbPath := filepath.Join(p.opts.Dir, snapshotFile)
	db, err := readSnapshot(dbPath, live, restore)
	if err != nil {
		return rep, fmt.Errorf("reading %s: %w", dbPath, err)
	}
	if db.corrupt != nil {
		if !p.opts.AllowCorruptSnapshot {
			return rep, fmt.Errorf("%s is corrupt: %w (allowRecoverFromCorruptedPersistentFile is false)", dbPath, db.corrupt)
		}
		p.opts.Log.Warn("Snapshot is corrupt; recovering the records before the damage", "file", dbPath, "error", db.corrupt.Error())
		rep.CorruptRecords++
	}
	tmpPath := filepath.Join(p.opts.Dir, snapshotTmp)
	tmp, err := readSnapshot(tmpPath, live, restore)
	if err != nil {
		return rep, fmt.Errorf("reading %s: %w", tmpPath, err)
	}
	if tmp.corrupt != nil {
		// A snapshot interrupted by a crash ends in a torn record: expected, never fatal.
		p.opts.Log.Info("Unfinished snapshot ends in a torn record", "file", tmpPath, "error", tmp.corrupt.Error())
		rep.CorruptRecords++
	}
	rep.SnapshotBytes, rep.SnapshotTmp = db.bytesRead, tmp.records > 0
	rep.Skipped, rep.Expired = db.skipped+tmp.skipped, db.expired+tmp.expired
	rep.Recovered = db.restored + tmp.restored
	for _, t := range append(db.tombstones, tmp.tombstones...) {
		store.RestoreTombstone(t)
	}

	var first uint64
	if db.header != nil {
		first = db.header.FirstSegment
		// The snapshot on disk is the last one, whichever process took it.
		p.stats.LastSnapshotUnix.Store(db.header.Taken.Unix())
	}
	segments, err := listSegments(p.opts.Dir)
	if err != nil {
		return rep, err
	}
	next := first
	var since []uint64 // the segments written since the snapshot
	for _, seq := range segments {
		next = max(next, seq+1)
		if seq >= first {
			since = append(since, seq)
		}
	}
	if err := p.checkSequence(since, first, db.header != nil, &rep); err != nil {
		return rep, err
	}
	var last replayed
	for i, seq := range since {
		rep.LogSegments++
		if err := p.replaySegment(store, seq, i == len(since)-1, &last, &rep); err != nil {
			return rep, err
		}
	}
	rep.Expired += len(store.PurgeExpired())
	store.Range(func(*filter.Filter) bool { rep.Filters++; return true })
	if err := p.roomForASnapshot(store.UsedBytes()); err != nil {
		return rep, err
	}

	next = max(next, 1)
	var previousBytes int64
	if last.read && last.seq == next-1 {
		previousBytes = last.end
	}
	if p.wal, err = openWAL(p.opts.Dir, next, previousBytes, p.opts.Sync, p.opts.Log); err != nil {
		return rep, err
	}
	p.wal.observe = p.opts.SyncObserver
	p.wal.health = p.stats.logHealth
	p.store = store
	store.SetJournal(p)
	if rep.SnapshotTmp {
		// What came only from snapshot.tmp (bits merged from peers are in no log) would be lost
		// to the next snapshot, which writes over that file: snapshot it into snapshot.db first.
		if err := p.Snapshot(); err != nil {
			return rep, fmt.Errorf("snapshotting what the unfinished snapshot held: %w", err)
		}
	}
	rep.Duration = time.Since(start)
	p.opts.Log.Info("Recovered filters", "filters", rep.Filters, "snapshotBytes", rep.SnapshotBytes,
		"unfinishedSnapshot", rep.SnapshotTmp, "logSegments", rep.LogSegments, "logRecords", rep.LogRecords,
		"recovered", rep.Recovered, "skipped", rep.Skipped, "expired", rep.Expired, "corruptFiles", rep.CorruptRecords, "duration", rep.Duration.String())
	return rep, nil
}

// checkSequence makes sure no segment is missing: they are numbered one after the other from the
// one the snapshot names (from the first there is without a snapshot), and a gap means writes that
// were acknowledged are gone. With AllowCorruptSnapshot the start goes on without them.
func (p *Persister) checkSequence(since []uint64, first uint64, fromSnapshot bool, rep *RecoveryReport) error {
	if len(since) == 0 {
		return nil
	}
	want := since[0]
	if fromSnapshot {
		want = first
	}
	for _, seq := range since {
		if seq != want {
			err := fmt.Errorf("log segment %s is missing: segments %s to %s are on disk after it",
				filepath.Join(p.opts.Dir, segmentName(want)), segmentName(seq), segmentName(since[len(since)-1]))
			if !p.opts.AllowCorruptSnapshot {
				return fmt.Errorf("%w; the writes it held are lost (allowRecoverFromCorruptedPersistentFile is false)", err)
			}
			p.opts.Log.Warn("Log segment is missing; recovering without the writes it held", "error", err.Error())
			rep.CorruptRecords++
		}
		want = seq + 1
	}
	return nil
}

// openSegment opens a log segment for reading its records; the caller closes the file.
func openSegment(path string) (*os.File, *recordReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // only read
		return nil, nil, err
	}
	return f, &recordReader{r: bufio.NewReaderSize(f, 1<<20), remaining: fi.Size(), zerosEnd: true}, nil
}

// replaySegment applies one log segment. In the newest, a torn or corrupt record is the tail a
// crash cut short (nothing after it was acknowledged under SyncAlways): it ends the segment, which
// is cut there, so that the tail is never taken for damage once a newer segment follows. In an
// older segment it is damage, and the records after it are lost: the start refuses unless
// AllowCorruptSnapshot.
//
// The segment's start record, when it has one, says how many bytes of records the segment before
// it held when it was sealed: last, what the replay read of that one, must match, or the end of
// last was lost (cut short, zeroed) although its reading ended cleanly. last becomes this
// segment's reading.
func (p *Persister) replaySegment(store *filter.Store, seq uint64, newest bool, last *replayed, rep *RecoveryReport) error {
	path := filepath.Join(p.opts.Dir, segmentName(seq))
	f, rr, err := openSegment(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	previous := *last
	*last = replayed{seq: seq, read: true}
	for {
		start := rr.offset
		last.end = start
		b, err := rr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			last.damaged = true
			return p.segmentEnds(path, start, newest, err, rep)
		}
		d := decoder{r: b, left: b.length}
		c := d.change()
		if err := b.verify(); err != nil {
			last.damaged = true
			return p.segmentEnds(path, start, newest, err, rep)
		}
		if c.kind == kindSegmentStart && d.err == nil {
			if start == 0 {
				if err := p.checkPrevious(previous, seq, c, rep); err != nil {
					return err
				}
			}
			continue
		}
		rep.LogRecords++
		if d.err != nil || apply(store, c) != nil {
			rep.Skipped++
		} else {
			rep.Recovered++
		}
	}
}

// replayed is what the replay read of a log segment.
type replayed struct {
	seq     uint64
	read    bool  // a segment was replayed
	end     int64 // the offset where its reading ended
	damaged bool  // its reading ended at damage, already reported
}

// checkPrevious compares the start record c of segment seq with what the replay read of the
// segment before it. A segment whose own damage was reported, or that was not replayed (the
// snapshot covers it), is not judged again.
func (p *Persister) checkPrevious(previous replayed, seq uint64, c change, rep *RecoveryReport) error {
	if c.segment != seq {
		return p.lostWrites(fmt.Errorf("log segment %s starts as segment %d",
			filepath.Join(p.opts.Dir, segmentName(seq)), c.segment), rep)
	}
	if !previous.read || previous.seq+1 != seq || previous.damaged || previous.end == c.previousBytes {
		return nil
	}
	return p.lostWrites(fmt.Errorf("log segment %s is damaged: its records end at offset %d, and %s says it held %d bytes of records when it was sealed",
		filepath.Join(p.opts.Dir, segmentName(previous.seq)), previous.end, segmentName(seq), c.previousBytes), rep)
}

// lostWrites reports damage that loses acknowledged writes: it stops the start unless
// AllowCorruptSnapshot, and is counted and logged otherwise.
func (p *Persister) lostWrites(damage error, rep *RecoveryReport) error {
	rep.CorruptRecords++
	if !p.opts.AllowCorruptSnapshot {
		return fmt.Errorf("%w; the writes it held are lost (allowRecoverFromCorruptedPersistentFile is false)", damage)
	}
	p.opts.Log.Warn("Log segment lost records; recovering without them", "error", damage.Error())
	return nil
}

// expiryChangesInLog names the filters whose expiry a record of the log changes. It reads every
// segment there is, the kinds and names of their records only, and stops quietly at a damaged
// record, which the replay reports: a name too many costs only the memory of an expired filter
// until the purge after the replay.
func (p *Persister) expiryChangesInLog() (map[string]bool, error) {
	segments, err := listSegments(p.opts.Dir)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, seq := range segments {
		if err := scanExpiryChanges(filepath.Join(p.opts.Dir, segmentName(seq)), names); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func scanExpiryChanges(path string, names map[string]bool) error {
	f, rr, err := openSegment(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for {
		b, err := rr.next()
		if err != nil {
			return nil // the end, or damage that the replay reports
		}
		d := decoder{r: b, left: b.length}
		if d.u8() == kindExpiry {
			if name := d.str(); d.err == nil {
				names[name] = true
			}
		}
		// The rest of the body is skipped, unchecked: the replay checks every record.
		if _, err := io.Copy(io.Discard, b); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
	}
}

// segmentEnds handles a record of the segment at path that cannot be read, at offset start.
func (p *Persister) segmentEnds(path string, start int64, newest bool, damage error, rep *RecoveryReport) error {
	rep.CorruptRecords++
	if newest {
		p.opts.Log.Warn("Log segment ends in a torn record, the tail of a crash; cutting it there", "file", path, "error", damage.Error())
		return cutSegment(path, start)
	}
	if !p.opts.AllowCorruptSnapshot {
		return fmt.Errorf("log segment %s is damaged: %w; the writes after the damage would be lost (allowRecoverFromCorruptedPersistentFile is false)", path, damage)
	}
	p.opts.Log.Warn("Log segment is damaged; recovering without the writes after the damage", "file", path, "error", damage.Error())
	return nil
}

// cutSegment truncates a segment to its first size bytes, durably.
func cutSegment(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return fmt.Errorf("cutting the torn tail of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("cutting the torn tail of %s: %w", path, err)
	}
	return f.Close()
}

// apply replays one change. Changes to filters that are gone are no-ops; expired filters are
// purged after the whole replay.
func apply(store *filter.Store, c change) error {
	switch c.kind {
	case kindCreate:
		st, err := filter.EmptyState(c.name, c.options, c.at)
		if err != nil {
			return err
		}
		for p, held := range c.held {
			if !held {
				st.Parts[p].Layers = nil
			}
		}
		return store.Restore(st)
	case kindDelete:
		_, _, err := store.Delete(c.name)
		return err
	case kindTombstone:
		store.RestoreTombstone(filter.Tombstone{Name: c.name, Generation: c.generation, DeletedAt: c.at})
		_, err := store.DeleteReplica(c.name, c.generation)
		return err
	case kindAdd:
		if f, ok := store.Lookup(c.name); ok {
			return f.Replay(c.keys)
		}
	case kindAccess:
		if f, ok := store.Lookup(c.name); ok {
			f.SetLastAccess(c.at)
		}
	case kindExpiry:
		if f, ok := store.Lookup(c.name); ok && f.Generation() == c.generation {
			f.RestoreExpiry(c.expiry)
		}
	case kindLoad:
		if f, ok := store.Lookup(c.name); ok && f.Generation() == c.generation {
			return f.ReplayLoad(c.load)
		}
	}
	return nil
}

// Run flushes the log on its timer and takes snapshots when a criterion says so, until ctx
// ends. Call it after Recover.
func (p *Persister) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { p.wal.run(ctx) })
	for _, c := range p.opts.Criteria {
		wg.Go(func() { p.trigger(ctx, c) })
	}
	if p.opts.SnapshotLogBytes > 0 {
		wg.Go(func() { p.triggerOnLogSize(ctx) })
	}
	wg.Wait()
}

// logCheckInterval is how often the log's size is compared with SnapshotLogBytes, and
// failedSnapshotPause how long a snapshot that failed waits before the size triggers it again.
const (
	logCheckInterval    = time.Second
	failedSnapshotPause = 30 * time.Second
)

// triggerOnLogSize takes a snapshot whenever the log written since the last one exceeds
// SnapshotLogBytes.
func (p *Persister) triggerOnLogSize(ctx context.Context) {
	var notBefore time.Time
	p.opts.Every(ctx, logCheckInterval, func() {
		written := p.stats.LogBytes.Load() - p.logBytesAtSnapshot.Load()
		if written <= p.opts.SnapshotLogBytes || p.opts.Clock().Before(notBefore) {
			return
		}
		if err := p.Snapshot(); err != nil {
			notBefore = p.opts.Clock().Add(failedSnapshotPause)
			p.opts.Log.Error("Snapshot failed", "error", err.Error(), "logBytes", written, "retryIn", failedSnapshotPause.String())
		}
	})
}

// trigger takes a snapshot every period in which more than the criterion's updates happened.
func (p *Persister) trigger(ctx context.Context, c Criterion) {
	p.opts.Every(ctx, c.Period, func() {
		if updates := p.updates.Load(); updates > c.UpdatesMoreThan {
			if err := p.Snapshot(); err != nil {
				p.opts.Log.Error("Snapshot failed", "error", err.Error(), "updates", updates)
			}
		}
	})
}

// MakeDurable returns once everything the store held when it was called is in snapshot.db, for
// bits that reach no log (merged from a dump). Callers that arrive while a snapshot is being
// written share the next one, so a burst of merges costs two snapshots, not one each.
func (p *Persister) MakeDurable() error { return p.snapshotAfter(p.snapshotTicket()) }

// snapshotTicket is the number of the last snapshot that began before the call.
func (p *Persister) snapshotTicket() uint64 { return p.snapshotsBegun.Load() }

// snapshotAfter returns once a snapshot numbered above ticket has succeeded, taking one if none
// has.
func (p *Persister) snapshotAfter(ticket uint64) error {
	p.snapshotting.Lock()
	defer p.snapshotting.Unlock()
	if p.lastGoodSnapshot > ticket {
		return nil
	}
	return p.snapshotLocked()
}

// Snapshot writes every live filter to snapshot.tmp, makes it snapshot.db, and drops the log
// segments it covers. Each filter's lock is held only while its bits are copied.
func (p *Persister) Snapshot() error {
	p.snapshotting.Lock()
	defer p.snapshotting.Unlock()
	return p.snapshotLocked()
}

func (p *Persister) snapshotLocked() error {
	number := p.snapshotsBegun.Add(1)
	start := time.Now()
	updates := p.updates.Load()
	err := p.snapshot()
	if err != nil {
		p.stats.SnapshotFailures.Add(1)
		return err
	}
	p.lastGoodSnapshot = number
	// Updates that raced with the snapshot may be in it or not; counting them again is safe.
	p.updates.Add(-updates)
	elapsed := time.Since(start)
	p.stats.SnapshotsTaken.Add(1)
	p.stats.LastSnapshotUnix.Store(time.Now().Unix())
	p.stats.LastSnapshotMicros.Store(elapsed.Microseconds())
	p.opts.Log.Info("Snapshot written", "bytes", p.stats.LastSnapshotBytes.Load(), "duration", elapsed.String(), "updates", updates)
	return nil
}

func (p *Persister) snapshot() error {
	// Records appended from here on go to the new segment, which the snapshot does not cover.
	// Adds are recorded before they are applied: those recorded in the segments the snapshot
	// covers finish first, so that the copies below hold them.
	p.applying.Lock()
	first, err := p.wal.rotate()
	p.applying.Unlock()
	if err != nil {
		return err
	}
	logBytes := p.stats.LogBytes.Load() // the log the snapshot covers, once it is durable
	w, err := createSnapshot(p.opts.Dir)
	if err != nil {
		return err
	}
	if err := w.writeHeader(snapshotHeader{Taken: time.Now(), FirstSegment: first}); err != nil {
		w.abort()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	now := p.opts.Clock()
	var werr error
	p.store.Range(func(f *filter.Filter) bool {
		if f.Expired(now) {
			return true
		}
		werr = w.writeFilter(f)
		return werr == nil
	})
	for _, t := range p.store.Tombstones() {
		if werr != nil {
			break
		}
		werr = w.writeTombstone(t)
	}
	if werr != nil {
		w.abort()
		return fmt.Errorf("writing snapshot: %w", werr)
	}
	if err := w.commit(); err != nil {
		return err
	}
	p.stats.LastSnapshotBytes.Store(w.size)
	p.logBytesAtSnapshot.Store(logBytes)
	return p.wal.removeBefore(first)
}

// Close flushes the log and releases the directory. It does not snapshot; the server takes a
// final snapshot first on a graceful shutdown.
func (p *Persister) Close() error {
	var err error
	if p.wal != nil {
		err = p.wal.close()
	}
	return errors.Join(err, p.lock.release())
}

// The filter.Journal side. Creates and deletes wait for the policy's durability inside the
// store's lock for such changes; adds wait before the filter's lock is taken.

// Created records a new filter.
func (p *Persister) Created(f *filter.Filter) error {
	var held []bool
	if f.HeldPartitions() < f.Partitions() {
		held = make([]bool, f.Partitions())
		for i := range held {
			held[i] = f.Holds(i)
		}
	}
	return p.record(encodeCreate(f.Name(), f.Options(), f.Created(), held), 1)
}

// Deleted records a delete and the tombstone it leaves.
func (p *Persister) Deleted(name string, generation int64) error {
	return p.record(encodeTombstone(filter.Tombstone{Name: name, Generation: generation, DeletedAt: p.opts.Clock()}), 1)
}

var addBuffers = sync.Pool{New: func() any { return new([]byte) }}

// Added records keys about to be added to a filter: as durably as the policy promises when it
// returns nil, and then Applied must follow. A write the log cannot take is refused, whether the
// log is known to be broken or the flush of its own record fails.
func (p *Persister) Added(name string, keys []string) error {
	if err := p.stats.LogBroken(); err != nil { // spares the record's encoding
		return fmt.Errorf("%w: %w", filter.ErrNotJournaled, err)
	}
	p.applying.RLock()
	buf := addBuffers.Get().(*[]byte)
	*buf = appendAdd((*buf)[:0], name, keys)
	err := p.record(*buf, int64(len(keys)))
	addBuffers.Put(buf)
	if err != nil {
		p.applying.RUnlock()
	}
	return err
}

// Applied says the keys of an add that Added recorded are in their filter.
func (p *Persister) Applied() { p.applying.RUnlock() }

// Accessed records that a filter with sliding expiry was used; failures only cost accuracy of
// expiry after a restart, so they are not reported to the reader.
func (p *Persister) Accessed(name string, at time.Time) {
	_, _ = p.append(encodeAccess(name, at))
}

// ExpiryChanged records a filter's new expiry override.
func (p *Persister) ExpiryChanged(name string, generation int64, e filter.Expiry) error {
	return p.record(encodeExpiry(name, generation, e), 1)
}

// Loaded records a piece of a dump about to be loaded into a filter, as Added records keys:
// Applied must follow a nil error.
func (p *Persister) Loaded(name string, generation int64, l filter.Load) error {
	if err := p.stats.LogBroken(); err != nil {
		return fmt.Errorf("%w: %w", filter.ErrNotJournaled, err)
	}
	p.applying.RLock()
	err := p.record(encodeLoad(name, generation, l), 1)
	if err != nil {
		p.applying.RUnlock()
	}
	return err
}

// Purged counts an expired filter's removal as an update; expiry itself needs no record.
func (p *Persister) Purged(string) { p.updates.Add(1) }

func (p *Persister) record(body []byte, updates int64) error {
	ticket, err := p.append(body)
	if err != nil {
		return fmt.Errorf("%w: %w", filter.ErrNotJournaled, err)
	}
	p.updates.Add(updates)
	if err := p.wal.commit(ticket); err != nil {
		return fmt.Errorf("%w: %w", filter.ErrNotJournaled, err)
	}
	return nil
}

// append appends a record to the log and counts it.
func (p *Persister) append(body []byte) (uint64, error) {
	ticket, err := p.wal.append(body)
	if err != nil {
		return 0, err
	}
	p.stats.LogRecords.Add(1)
	p.stats.LogBytes.Add(int64(len(body) + recordHeaderSize))
	return ticket, nil
}

// roomForASnapshot refuses a volume that cannot hold one more snapshot of data bytes of filters
// beside what it holds: the pod could neither snapshot nor, once its log filled the rest, take a
// write. AllowLowDiskSpace turns the refusal into a warning.
func (p *Persister) roomForASnapshot(data uint64) error {
	free, err := freeSpace(p.opts.Dir)
	if err != nil || free >= data {
		return nil //nolint:nilerr // a file system that cannot say is not refused
	}
	msg := fmt.Sprintf("the data directory %s has %s free, and the next snapshot of the filters needs about %s: free space or grow the volume",
		p.opts.Dir, filter.FormatBytes(free), filter.FormatBytes(data))
	if p.opts.AllowLowDiskSpace {
		p.opts.Log.Warn("Low disk space: starting anyway, as allowStartWithLowDiskSpace says", "problem", msg)
		return nil
	}
	return errors.New(msg + " (allowStartWithLowDiskSpace: true starts anyway)")
}
