package persist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bloomery/bloomery/internal/tick"
)

// SyncPolicy says when the log reaches the disk.
type SyncPolicy string

const (
	// SyncAlways makes a write durable before it is answered; concurrent writers share one
	// durable flush.
	SyncAlways SyncPolicy = "always"
	// SyncEverySecond writes and fsyncs once a second: a crash loses at most about a second.
	SyncEverySecond SyncPolicy = "everysec"
	// SyncNo writes once a second and leaves fsync to the operating system.
	SyncNo SyncPolicy = "no"
)

// ParseSyncPolicy accepts always, everysec and no.
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch p := SyncPolicy(s); p {
	case SyncAlways, SyncEverySecond, SyncNo:
		return p, nil
	}
	return "", fmt.Errorf("log sync policy %q: want always, everysec or no", s)
}

// flushInterval is how often everysec and no write the log; also the bound on what a crash loses.
const flushInterval = time.Second

// bufferLimit makes a writer flush (without fsync) rather than let the buffer grow without bound
// between two timed flushes.
const bufferLimit = 4 << 20

const segmentPrefix, segmentSuffix = "log-", ".bin"

func segmentName(seq uint64) string {
	return fmt.Sprintf("%s%016d%s", segmentPrefix, seq, segmentSuffix)
}

// listSegments returns the sequence numbers of the log segments in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, segmentPrefix) || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segmentPrefix), segmentSuffix), 10, 64)
		if err == nil {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// wal is the append-only log. Writers append records to a buffer under a mutex and get a ticket;
// a flush writes the whole buffer at once, so under SyncAlways one fsync covers every writer that
// arrived while the previous one ran (group commit).
type wal struct {
	dir    string
	policy SyncPolicy

	mu       sync.Mutex
	cond     *sync.Cond
	file     segmentFile
	segment  uint64
	buf      []byte
	spare    []byte
	appended uint64 // ticket of the last record in buf or on disk
	written  uint64 // last ticket handed to the operating system
	synced   uint64 // last ticket durable
	flushing bool   // one flush (or rotation) at a time; the others wait on cond
	closed   bool

	// err is why the log is broken: a write or sync failed, and until heal succeeds the log
	// refuses records. The records of the failed flush stay in buf, first, for heal to write.
	err error
	// The tickets after droppedFrom up to dropped are the records that the last failed flush
	// under SyncAlways dropped, and droppedBy why: their writers are refused even once the log
	// has healed.
	droppedFrom, dropped uint64
	droppedBy            error
	// retryAt is when heal may try again, backoff apart from the last failure.
	retryAt time.Time
	backoff time.Duration
	// trim is the segment a failed write left behind, to cut at its last records before the log
	// goes on in a new one; nil when there is none.
	trim *segmentTrim
	// previousBytes is what the segment before the next one holds once cut, for the next
	// segment's start record, while the log heals.
	previousBytes int64
	// health hears every change of the log's health: the error that broke it, nil once healed.
	health func(error)

	// Under SyncAlways, flusher says that run's goroutine does the flushes, and kick, which
	// append fills, wakes it. Otherwise (before run, after it) a writer waiting for its record
	// flushes.
	flusher bool
	kick    chan struct{}

	// aio, under SyncAlways where the system has it, writes segments directly (directSegment).
	aio *asyncIO
	log *slog.Logger

	// observe, if set, hears how long each durable flush took.
	observe func(time.Duration)
}

// openWAL opens segment, the next after one that holds previousBytes of records (0 when there is
// none).
func openWAL(dir string, segment uint64, previousBytes int64, policy SyncPolicy, log *slog.Logger) (*wal, error) {
	w := &wal{dir: dir, policy: policy, segment: segment, kick: make(chan struct{}, 1), log: log}
	w.cond = sync.NewCond(&w.mu)
	if policy == SyncAlways {
		aio, err := newAsyncIO()
		if err != nil {
			w.bufferedFromNowOn(err)
		}
		w.aio = aio
	}
	f, err := w.createSegment(segment, previousBytes)
	if err != nil {
		return nil, errors.Join(err, w.closeAIO())
	}
	w.file = f
	if w.aio != nil {
		log.Info("Log writes are durable through direct I/O", "dir", dir)
	}
	return w, nil
}

// createSegment creates segment seq, durably opened by its start record, which says that the
// segment before it holds previousBytes of records. A segment whose start record cannot be
// written is removed: it holds nothing, and would otherwise be left behind by every attempt.
func (w *wal) createSegment(seq uint64, previousBytes int64) (segmentFile, error) {
	seg, err := w.openSegmentFile(seq)
	if err != nil {
		return nil, err
	}
	if err := seg.write(appendRecord(nil, encodeSegmentStart(seq, previousBytes)), true); err != nil {
		seg.abandon()
		path := filepath.Join(w.dir, segmentName(seq))
		return nil, errors.Join(fmt.Errorf("starting log segment %s: %w", segmentName(seq), err), os.Remove(path))
	}
	return seg, nil
}

func (w *wal) openSegmentFile(seq uint64) (segmentFile, error) {
	f, err := createSegmentFile(w.dir, seq)
	if err != nil {
		return nil, err
	}
	if w.aio != nil {
		seg, err := openDirect(f, w.aio)
		if err == nil {
			return faults(seg), nil
		}
		if diskFailure(err) {
			// The disk failed the preallocation, as it would any write: direct I/O is there, and
			// stays on for the next attempt once the disk has room again.
			_ = f.Close()
			return nil, errors.Join(fmt.Errorf("opening log segment %s: %w", segmentName(seq), err), os.Remove(f.Name()))
		}
		w.bufferedFromNowOn(err)
		_ = w.closeAIO()
	}
	return faults(&bufferedSegment{file: f}), nil
}

// faults passes every segment through; tests make segments fail as a full disk does.
var faults = func(s segmentFile) segmentFile { return s }

// openDirect is openDirectSegment; tests make it fail as file systems without O_DIRECT do.
var openDirect = openDirectSegment

// bufferedFromNowOn says why segments are written through the page cache under SyncAlways.
func (w *wal) bufferedFromNowOn(reason error) {
	w.log.Info("Log writes are durable through fdatasync: direct I/O is not available", "dir", w.dir, "reason", reason.Error())
}

func (w *wal) closeAIO() error {
	if w.aio == nil {
		return nil
	}
	err := w.aio.close()
	w.aio = nil
	return err
}

// append frames body into the buffer and returns its ticket.
func (w *wal) append(body []byte) (uint64, error) {
	w.mu.Lock()
	if w.err != nil || w.closed {
		err := w.errLocked()
		w.mu.Unlock()
		return 0, err
	}
	w.buf = appendRecord(w.buf, body)
	w.appended++
	ticket, full := w.appended, len(w.buf) > bufferLimit
	w.mu.Unlock()
	if w.policy == SyncAlways {
		select {
		case w.kick <- struct{}{}:
		default: // the flusher has been woken already and will take this record
		}
	} else if full {
		return ticket, w.flush(false)
	}
	return ticket, nil
}

func (w *wal) errLocked() error {
	if w.err != nil {
		return w.err
	}
	return errors.New("log is closed")
}

// commit returns once ticket is as durable as the policy promises before an answer: on disk
// for SyncAlways, buffered for the others, which append already did (a failed flush keeps the
// buffer for heal to write).
func (w *wal) commit(ticket uint64) error {
	if w.policy != SyncAlways {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.synced < ticket && w.err == nil {
		if w.flushing || w.flusher {
			w.cond.Wait()
			continue
		}
		w.flushLocked(true)
	}
	switch {
	case w.droppedFrom < ticket && ticket <= w.dropped:
		return w.droppedBy
	case w.synced >= ticket:
		return nil
	}
	return w.err
}

// flush writes the buffer and, with sync, makes it durable.
func (w *wal) flush(sync bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
	if w.err == nil && !w.closed {
		w.flushLocked(sync)
	}
	return w.err
}

// flushLocked is called with mu held and no flush running; it releases mu during the I/O so that
// writers keep appending to the next batch.
func (w *wal) flushLocked(sync bool) {
	if w.synced == w.appended || (!sync && w.written == w.appended) {
		return
	}
	w.flushing = true
	buf, target, f := w.buf, w.appended, w.file
	w.buf = w.spare[:0]
	w.mu.Unlock()

	start := time.Now()
	err := f.write(buf, sync)
	if sync && w.observe != nil {
		w.observe(time.Since(start))
	}

	w.mu.Lock()
	w.flushing = false
	if err != nil {
		w.fail(fmt.Errorf("writing log segment %s: %w", segmentName(w.segment), err))
		if w.policy == SyncAlways {
			// Nothing in the log but what is durable was acknowledged: every writer waiting for
			// this batch, or for the records appended meanwhile, is refused, and applied nothing
			// (records come before their effect), so none of it may reach the disk later.
			w.buf, w.spare = w.spare[:0], nil
			w.droppedFrom, w.dropped, w.droppedBy = w.synced, w.appended, w.err
			w.written, w.synced = w.appended, w.appended
		} else {
			// The batch goes back in front of what was appended meanwhile: heal writes it again,
			// in order, since it was acknowledged once buffered.
			w.buf, w.spare = append(buf, w.buf...), nil
		}
		// Cut at once what the failed write left in the segment: a crash before heal must not
		// find the records of refused writes there.
		w.setAside()
	} else {
		w.spare = buf[:0]
		w.written = target
		if sync {
			w.synced = target
		}
	}
	w.cond.Broadcast()
}

// The back-off between two attempts to heal the log.
const (
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// segmentTrim is a segment to cut at size bytes.
type segmentTrim struct {
	seq  uint64
	size int64
}

// fail marks the log broken by err, with mu held.
func (w *wal) fail(err error) {
	if w.err == nil {
		w.backoff = firstBackoff
		w.log.Error("The update log cannot be written: writes fail until it heals", "error", err.Error(), "retryIn", w.backoff.String())
	} else {
		w.backoff = min(2*w.backoff, maxBackoff)
		w.log.Warn("The update log is still broken", "error", err.Error(), "retryIn", w.backoff.String())
	}
	w.err, w.retryAt = err, time.Now().Add(w.backoff)
	if w.health != nil {
		w.health(err)
	}
}

// heal tries, once the back-off has passed (at once with force), to put a broken log back in
// service: it cuts the segment the failure left at its last records, opens the next segment,
// and writes there what the failure left unwritten. Called with mu held and no flush running.
func (w *wal) heal(force bool) {
	if w.err == nil || w.closed || (!force && time.Now().Before(w.retryAt)) {
		return
	}
	if !w.setAside() {
		return
	}
	next, err := w.createSegment(w.segment+1, w.previousBytes)
	if err != nil {
		w.fail(err)
		return
	}
	w.file, w.segment = next, w.segment+1
	broken := w.err
	w.err = nil
	w.flushLocked(true)
	if w.err == nil {
		w.log.Info("The update log is written again", "segment", segmentName(w.segment), "brokenBy", broken.Error())
		if w.health != nil {
			w.health(nil)
		}
	}
}

// setAside closes the segment a failed write left, if still open, and cuts it at its last
// records; it reports whether the cut is done (if not, it broke the log again, and heal tries
// again). Called with mu held and no flush running.
func (w *wal) setAside() bool {
	if w.file != nil {
		w.trim = &segmentTrim{seq: w.segment, size: w.file.abandon()}
		w.file = nil
	}
	if w.trim != nil {
		if err := trimSegment(w.dir, w.trim.seq, w.trim.size); err != nil {
			w.fail(fmt.Errorf("cutting log segment %s after a failed write: %w", segmentName(w.trim.seq), err))
			return false
		}
		w.previousBytes = w.trim.size
		w.trim = nil
	}
	return true
}

// healIfDue is heal on the timer: it waits for a running flush.
func (w *wal) healIfDue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
	w.heal(false)
}

// run flushes until ctx ends: on a timer for the policies that do not flush per write, and under
// SyncAlways as soon as records wait and no flush is running. One goroutine doing every flush,
// rather than one of the waiting writers, starts the next flush the moment the last one returns:
// a writer that had to lead would first be woken, behind the writers the last flush released.
// It made `always` about 9% faster (docs/performance.md).
func (w *wal) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { tick.Every(ctx, firstBackoff/4, w.healIfDue) })
	if w.policy == SyncAlways {
		w.runFlusher(ctx)
	} else {
		tick.Every(ctx, flushInterval, func() { _ = w.flush(w.policy == SyncEverySecond) })
	}
	wg.Wait()
}

func (w *wal) runFlusher(ctx context.Context) {
	w.mu.Lock()
	w.flusher = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.flusher = false
		w.cond.Broadcast() // waiting writers flush for themselves from now on
		w.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			_ = w.flush(true) // a failure breaks the log, which heals on its own timer
		}
	}
}

// rotate closes the current segment, durable, and starts the next one. Records appended from
// now on go to the new segment; it returns the new segment's number.
func (w *wal) rotate() (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
	w.heal(true) // a snapshot, perhaps the last before shutdown, is worth a try at once
	if w.err != nil || w.closed {
		return 0, w.errLocked()
	}
	w.flushLocked(true)
	if w.err != nil {
		return 0, w.err
	}
	next, err := w.createSegment(w.segment+1, w.file.recordBytes())
	if err != nil {
		return 0, err
	}
	if err := w.file.close(); err != nil {
		_ = next.close()
		return 0, err
	}
	w.file, w.segment = next, w.segment+1
	return w.segment, nil
}

// removeBefore deletes the segments older than seq, which a durable snapshot covers.
func (w *wal) removeBefore(seq uint64) error {
	seqs, err := listSegments(w.dir)
	if err != nil {
		return err
	}
	for _, s := range seqs {
		if s < seq {
			if err := os.Remove(filepath.Join(w.dir, segmentName(s))); err != nil {
				return err
			}
		}
	}
	return syncDir(w.dir)
}

// close makes what is buffered durable and closes the segment. A broken log gets one more try.
func (w *wal) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
	if w.closed {
		return nil
	}
	w.heal(true)
	if w.err == nil {
		w.flushLocked(true)
	}
	err := w.err
	w.closed = true
	if w.file != nil {
		err = errors.Join(err, w.file.close())
	}
	return errors.Join(err, w.closeAIO())
}

// syncDir makes renames, creations and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
