package persist

import (
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
	// returns.
	write(records []byte, sync bool) error
	// close cuts the zeros ahead of the records off the file and closes it. The cut need not be
	// durable: zeros end a segment anyway.
	close() error
}

// createSegmentFile creates segment seq in dir, durably.
func createSegmentFile(dir string, seq uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentName(seq)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		_ = f.Close()
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
	s.size += int64(len(records))
	if s.size > s.fileSize {
		grown := roundUp(s.size, preallocChunk)
		if _, err := s.file.WriteAt(zeros[:grown-s.size], s.size); err != nil {
			return err
		}
		s.fileSize = grown
	}
	if sync {
		return syncData(s.file)
	}
	return nil
}

func (s *bufferedSegment) close() error {
	return closeTrimmed(s.file, s.size)
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
