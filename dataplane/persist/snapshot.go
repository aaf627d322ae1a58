package persist

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// snapshotWriter writes snapshot.tmp; commit makes it snapshot.db.
type snapshotWriter struct {
	dir  string
	file *os.File
	w    *bufio.Writer
	size int64
	// chunk carries a large filter's bits to the file a piece at a time (see writeFilter).
	chunk []uint64
}

// streamChunkWords is how much of a large filter a snapshot copies at a time, and so the filter
// size above which a snapshot streams a filter rather than copying it whole.
const streamChunkWords = 1 << 17

func createSnapshot(dir string) (*snapshotWriter, error) {
	f, err := os.OpenFile(filepath.Join(dir, snapshotTmp), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", snapshotTmp, err)
	}
	return &snapshotWriter{dir: dir, file: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (s *snapshotWriter) write(p []byte) error {
	n, err := s.w.Write(p)
	s.size += int64(n)
	return err
}

func (s *snapshotWriter) writeHeader(h snapshotHeader) error {
	return s.write(appendRecord(nil, encodeHeader(h)))
}

// writeFilter writes f's record. A small filter is copied whole, its checksum computed, and
// written. A large one streams a chunk at a time, so that the snapshot never holds a second copy
// of it: its frame is written last, in place, once the checksum of what was written is known.
func (s *snapshotWriter) writeFilter(f *filter.Filter) error {
	if e := f.ExpiryOverride(); e.Mode != filter.ExpiryByOptions {
		if err := s.write(appendRecord(nil, encodeExpiry(f.Name(), f.Generation(), e))); err != nil {
			return err
		}
	}
	if f.SizeBytes() <= streamChunkWords*8 {
		return writeFilterRecord(s.write, f.State())
	}
	if s.chunk == nil {
		s.chunk = make([]uint64, streamChunkWords)
	}
	frameAt := s.size
	var frame [recordHeaderSize]byte
	if err := s.write(frame[:]); err != nil {
		return err
	}
	var length uint64
	var crc uint32
	body := func(p []byte) error {
		length += uint64(len(p))
		crc = crc32.Update(crc, castagnoli, p)
		return s.write(p)
	}
	err := f.StreamState(s.chunk, filter.All,
		func(head filter.State) error { return body(encodeFilterHead(head)) },
		func(words []uint64) error { return body(wordBytes(words)) })
	if err == nil {
		err = s.w.Flush()
	}
	if err != nil {
		return err
	}
	putFrame(frame[:], length, crc)
	_, err = s.file.WriteAt(frame[:], frameAt)
	return err
}

func (s *snapshotWriter) writeTombstone(t filter.Tombstone) error {
	return s.write(appendRecord(nil, encodeTombstone(t)))
}

// writeFilterRecord frames a filter: the head, then every layer's words, straight from the
// state's copy of the bits without another copy.
func writeFilterRecord(write func([]byte) error, st filter.State) error {
	head := encodeFilterHead(st)
	length := uint64(len(head))
	crc := crc32.Update(0, castagnoli, head)
	for _, l := range st.AllLayers() {
		words := wordBytes(l.Words)
		length += uint64(len(words))
		crc = crc32.Update(crc, castagnoli, words)
	}
	var frame [recordHeaderSize]byte
	putFrame(frame[:], length, crc)
	if err := write(frame[:]); err != nil {
		return err
	}
	if err := write(head); err != nil {
		return err
	}
	for _, l := range st.AllLayers() {
		if err := write(wordBytes(l.Words)); err != nil {
			return err
		}
	}
	return nil
}

// commit makes the snapshot durable and atomically replaces snapshot.db with it.
func (s *snapshotWriter) commit() error {
	err := s.w.Flush()
	if err == nil {
		err = s.file.Sync()
	}
	if cerr := s.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Most likely a full disk: the unfinished file would only take the room the log needs.
		_ = os.Remove(filepath.Join(s.dir, snapshotTmp))
		return fmt.Errorf("writing snapshot: %w", err)
	}
	err = os.Rename(filepath.Join(s.dir, snapshotTmp), filepath.Join(s.dir, snapshotFile))
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return nil
}

// abort leaves snapshot.db as it was.
func (s *snapshotWriter) abort() {
	_ = s.file.Close()
	_ = os.Remove(filepath.Join(s.dir, snapshotTmp))
}

// snapshotContents is what a snapshot file held, as far as it could be read.
type snapshotContents struct {
	header     *snapshotHeader // nil when absent or unreadable
	tombstones []filter.Tombstone
	records    int   // records read, valid or not
	restored   int   // filters handed to restore
	skipped    int   // records with a valid checksum that could not be used
	expired    int   // filters that expired before they could be recovered
	corrupt    error // the torn or corrupt record that ended the read, if any
	bytesRead  int64
}

// restoreFunc installs a filter read from a snapshot. head is its state without the bits (every
// Words nil); fill reads the bits into the slices it is given, one per layer and of the layers'
// sizes, and checks the record's checksum: a filter is installed only once fill succeeds.
type restoreFunc func(head filter.State, fill func(layers [][]uint64) error) error

// readSnapshot reads a snapshot file up to its end or its first corrupt record, handing each
// filter that keep wants (expired filters are not worth memory) to restore as it is read, so
// that no more than one filter is in flight. A missing file is an empty snapshot; an error is
// restore's.
func readSnapshot(path string, keep func(filter.State) bool, restore restoreFunc) (snapshotContents, error) {
	var out snapshotContents
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return out, err
	}
	return decodeSnapshot(bufio.NewReaderSize(f, 1<<20), fi.Size(), keep, restore)
}

// decodeSnapshot reads size bytes of snapshot records from r.
func decodeSnapshot(r io.Reader, size int64, keep func(filter.State) bool, restore restoreFunc) (snapshotContents, error) {
	var out snapshotContents
	rr := &recordReader{r: r, remaining: size}
	// An expiry record goes with the filter record after it, if that is of its incarnation.
	type pendingExpiry struct {
		name       string
		generation int64
		expiry     filter.Expiry
	}
	var pending *pendingExpiry
	for {
		b, err := rr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.corrupt = err
			break
		}
		out.records++
		d := decoder{r: b, left: b.length}
		kind := d.u8()
		var h snapshotHeader
		var t filter.Tombstone
		var kept bool
		var restoreErr error
		switch kind {
		case kindSnapshotHeader:
			h = d.header()
		case kindFilter:
			head := d.filterHead()
			if pending != nil && pending.name == head.Name && pending.generation == head.Created.UnixNano() {
				head.Expiry = pending.expiry
			}
			pending = nil
			if kept = d.err == nil && keep(head); kept {
				restoreErr = restore(head, func(layers [][]uint64) error {
					d.words(layers)
					if d.err != nil {
						return d.err
					}
					return b.verify()
				})
			}
		case kindTombstone:
			t = d.tombstone()
		case kindExpiry:
			name := d.str()
			generation, expiry := d.expiry()
			pending = &pendingExpiry{name, generation, expiry}
		default:
			d.fail("unknown snapshot record kind %d", kind)
		}
		if err := b.verify(); err != nil {
			out.corrupt = err
			break
		}
		switch {
		case d.err != nil:
			out.skipped++
			pending = nil
		case restoreErr != nil:
			return out, restoreErr
		case kind == kindSnapshotHeader && out.header == nil && out.records == 1:
			out.header = &h
		case kind == kindFilter && kept:
			out.restored++
		case kind == kindFilter:
			out.expired++
		case kind == kindTombstone:
			out.tombstones = append(out.tombstones, t)
		}
	}
	out.bytesRead = rr.offset
	return out, nil
}
