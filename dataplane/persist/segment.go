package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// preallocChunk is how far a segment's file is filled with zeros ahead of its records. Syncing a
// write that grows a file must also commit the file system's journal, for the new size; over
// space written before, only the data goes to the disk, which took 25–40% less time on our
// disks (docs/performance.md). A header of zeros ends a segment's records.
const preallocChunk = 1 << 20

// segmentFile takes one log segment's records, in order, each batch after the last.
type segmentFile interface {
	// write adds records after those written before; when sync is set they are durable when it
	// returns. After an error the records count as not written, whatever part of them reached
	// the file.
	write(records []byte, sync bool) error
	// close cuts the zeros ahead of the records off the file and closes it. The cut need not be
	// durable: zeros end a segment anyway.
	close() error
	// abandon closes the file without cutting it, after a failed write, and answers how many bytes
	// of records it holds: what follows them may be part of the failed write, not zeros.
	abandon() int64
	// recordBytes answers how many bytes of records the segment holds.
	recordBytes() int64
}

// createSegmentFile creates segment seq in dir, durably.
func createSegmentFile(dir string, seq uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentName(seq)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		// Gone rather than left behind, so that a later attempt can create it again.
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// bufferedSegment writes through the page cache and makes writes durable with fdatasync. Every
// system and file system has it.
type bufferedSegment struct {
	file     *os.File
	size     int64 // bytes of records: where the next write goes
	fileSize int64 // bytes of the file; those from size on are zeros
}

// zeros is written past a segment's records to preallocate its file.
var zeros [preallocChunk]byte

func (s *bufferedSegment) write(records []byte, sync bool) error {
	if _, err := s.file.WriteAt(records, s.size); err != nil {
		return err
	}
	end := s.size + int64(len(records))
	if end > s.fileSize {
		grown := roundUp(end, preallocChunk)
		if _, err := s.file.WriteAt(zeros[:grown-end], end); err != nil {
			return err
		}
		s.fileSize = grown
	}
	if sync {
		if err := syncData(s.file); err != nil {
			return err
		}
	}
	s.size = end
	return nil
}

func (s *bufferedSegment) recordBytes() int64 { return s.size }

func (s *bufferedSegment) close() error {
	return closeTrimmed(s.file, s.size)
}

func (s *bufferedSegment) abandon() int64 {
	_ = s.file.Close() // the file is cut by path, durably, before the log goes on
	return s.size
}

// trimSegment cuts segment seq of dir to size bytes, durably: the part of a failed write after
// its last records must not outlive the segment, which is no longer the newest once the log goes
// on, and whose damage recovery would then refuse.
func trimSegment(dir string, seq uint64, size int64) error {
	f, err := os.OpenFile(filepath.Join(dir, segmentName(seq)), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// closeTrimmed truncates f to size and closes it.
func closeTrimmed(f *os.File, size int64) error {
	err := f.Truncate(size)
	if cerr := f.Close(); cerr != nil {
		return fmt.Errorf("closing log segment: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("trimming log segment: %w", err)
	}
	return nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
