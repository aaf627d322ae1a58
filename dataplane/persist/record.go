// Package persist keeps a data plane's filters on disk: a snapshot of every filter, an
// append-only log of the changes since, a lock on the directory, and the recovery that puts them
// back together at start. The file format is described in docs/persistence.md.
package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// Every record, in snapshots and in the log, is framed the same way:
//
//	body length  uint64, little endian
//	magic        one byte: recordMagic, which also carries the format version
//	checksum     uint32, little endian: CRC-32C (Castagnoli) of the body
//	body         body length bytes
const (
	recordMagic      = 0xB1
	recordHeaderSize = 8 + 1 + 4
	// maxRecordBody bounds a body before anything is allocated for it; the file size bounds it
	// further when it is known.
	maxRecordBody = 1 << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt marks a record that is torn, of a foreign format, or fails its checksum.
var ErrCorrupt = errors.New("corrupt record")

// appendRecord frames body onto dst.
func appendRecord(dst, body []byte) []byte {
	var frame [recordHeaderSize]byte
	putFrame(frame[:], uint64(len(body)), crc32.Checksum(body, castagnoli))
	return append(append(dst, frame[:]...), body...)
}

// putFrame writes a record header for a body of length bytes with checksum crc.
func putFrame(frame []byte, length uint64, crc uint32) {
	binary.LittleEndian.PutUint64(frame[0:8], length)
	frame[8] = recordMagic
	binary.LittleEndian.PutUint32(frame[9:13], crc)
}

// recordReader reads framed records from a file, checking lengths before allocating anything.
type recordReader struct {
	r      io.Reader
	offset int64 // of the next record
	// remaining is the number of bytes left in the file, or -1 when unknown.
	remaining int64
	// zerosEnd makes zeros in place of a header a clean end: the space a log segment's file
	// holds ahead of its records (see preallocChunk).
	zerosEnd bool
}

// body is one record's body, read through its checksum. The caller decodes it and then calls
// verify, which reads what the decoder left and compares checksums.
type body struct {
	r      io.Reader
	crc    hash.Hash32
	want   uint32
	offset int64
	length uint64
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.crc.Write(p[:n])
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// verify consumes the rest of the body and checks the checksum.
func (b *body) verify() error {
	if _, err := io.Copy(io.Discard, b); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if got := b.crc.Sum32(); got != b.want {
		return fmt.Errorf("%w at offset %d: checksum %08x, want %08x", ErrCorrupt, b.offset, got, b.want)
	}
	return nil
}

// next returns the next record's body, io.EOF at a clean end, or ErrCorrupt. After an error the
// reader is not used again: a torn record ends the file.
func (rr *recordReader) next() (*body, error) {
	var header [recordHeaderSize]byte
	n, err := io.ReadFull(rr.r, header[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return nil, io.EOF
	case rr.zerosEnd && isZero(header[:n]):
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("%w at offset %d: header torn after %d of %d bytes", ErrCorrupt, rr.offset, n, recordHeaderSize)
	}
	length := binary.LittleEndian.Uint64(header[0:8])
	if header[8] != recordMagic {
		return nil, fmt.Errorf("%w at offset %d: magic byte %#x, want %#x", ErrCorrupt, rr.offset, header[8], recordMagic)
	}
	if length > maxRecordBody || (rr.remaining >= 0 && length > uint64(rr.remaining-recordHeaderSize)) {
		return nil, fmt.Errorf("%w at offset %d: body length %d exceeds the %d bytes left", ErrCorrupt, rr.offset, length, max(rr.remaining-recordHeaderSize, 0))
	}
	b := &body{
		r:      io.LimitReader(rr.r, int64(length)),
		crc:    crc32.New(castagnoli),
		want:   binary.LittleEndian.Uint32(header[9:13]),
		offset: rr.offset,
		length: length,
	}
	rr.offset += recordHeaderSize + int64(length)
	if rr.remaining >= 0 {
		rr.remaining -= recordHeaderSize + int64(length)
	}
	return b, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
