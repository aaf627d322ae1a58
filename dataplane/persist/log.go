package persist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SyncPolicy says when the log reaches the disk.
type SyncPolicy string

const (
	// SyncAlways fsyncs before a write is answered; concurrent writers share one fsync.
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
	file     *os.File
	segment  uint64
	buf      []byte
	spare    []byte
	appended uint64 // ticket of the last record in buf or on disk
	written  uint64 // last ticket handed to the operating system
	synced   uint64 // last ticket fsynced
	flushing bool   // one flush (or rotation) at a time; the others wait on cond
	err      error  // sticky: after a failed write the log refuses further writes
	closed   bool

	// observe, if set, hears how long each fsync took.
	observe func(time.Duration)
}

func openWAL(dir string, segment uint64, policy SyncPolicy) (*wal, error) {
	f, err := createSegment(dir, segment)
	if err != nil {
		return nil, err
	}
	w := &wal{dir: dir, policy: policy, file: f, segment: segment}
	w.cond = sync.NewCond(&w.mu)
	return w, nil
}

func createSegment(dir string, seq uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentName(seq)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
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
	if full && w.policy != SyncAlways {
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

// commit returns once ticket is as durable as the policy promises before an answer: fsynced
// for SyncAlways, buffered for the others.
func (w *wal) commit(ticket uint64) error {
	if w.policy != SyncAlways {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	}
	w.mu.Lock()
	for w.synced < ticket && w.err == nil {
		if w.flushing {
			w.cond.Wait()
			continue
		}
		w.flushLocked(true)
	}
	err := w.err
	w.mu.Unlock()
	return err
}

// flush writes the buffer and, with sync, fsyncs the segment.
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

	var err error
	if len(buf) > 0 {
		_, err = f.Write(buf)
	}
	if err == nil && sync {
		start := time.Now()
		err = syncData(f)
		if w.observe != nil {
			w.observe(time.Since(start))
		}
	}

	w.mu.Lock()
	w.spare = buf[:0]
	w.flushing = false
	if err != nil {
		w.err = fmt.Errorf("writing log segment %s: %w", segmentName(w.segment), err)
	} else {
		w.written = target
		if sync {
			w.synced = target
		}
	}
	w.cond.Broadcast()
}

// run flushes on a timer for the policies that do not flush per write, until ctx ends.
func (w *wal) run(ctx context.Context) {
	if w.policy == SyncAlways {
		return
	}
	ticker := time.NewTicker(flushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_ = w.flush(w.policy == SyncEverySecond)
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
	if w.err != nil || w.closed {
		return 0, w.errLocked()
	}
	w.flushLocked(true)
	if w.err != nil {
		return 0, w.err
	}
	next, err := createSegment(w.dir, w.segment+1)
	if err != nil {
		return 0, err
	}
	if err := w.file.Close(); err != nil {
		_ = next.Close()
		return 0, fmt.Errorf("closing log segment: %w", err)
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

// close flushes and fsyncs what is buffered and closes the segment.
func (w *wal) close() error {
	err := w.flush(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return err
	}
	w.closed = true
	return errors.Join(err, w.file.Close())
}

// syncDir makes renames, creations and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
