package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// A stream carries one peer's batches of writes on one connection: the requests of
// wire.ApplyPath without the cost of an HTTP request each. The connection is an HTTP request to
// wire.ApplyStreamPath on the internal port, upgraded (wire.ApplyStreamProtocol), so it is
// authenticated and encrypted as that port is. Then each batch is a frame, answered by a frame,
// one at a time and in order:
//
//	batch   length (uint32, big endian), then the batch in the binary form of wire.OpsContentType
//	answer  length (uint32, big endian) of what follows: status (1 byte), then for status 0 one
//	        byte per op of the batch (1 when the pod holds it, 0 when it lacks its filter), for
//	        status 1 why the batch was refused (as the 400 of wire.ApplyPath would say)
//
// A refused batch leaves the stream open; a batch over the receiver's limit closes it after the
// answer.

// FrameHeaderSize is the length prefix of a frame.
const FrameHeaderSize = 4

const (
	statusApplied = 0
	statusRefused = 1
)

// maxAnswer bounds an answer the sender reads: a byte per op of a batch, or a reason.
const maxAnswer = 1 << 20

// RefusedError is a batch the receiver refused (malformed, or an op it cannot apply): the same
// batch would be refused again, on any stream.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused the batch: " + e.Reason }

// IsRefused reports whether err is, or wraps, a RefusedError.
func IsRefused(err error) bool {
	_, ok := errors.AsType[*RefusedError](err)
	return ok
}

// readFrame reads a frame's length, at most limit, then the frame into buf when it is large
// enough, else into new memory, and answers it. A frame larger than firstRead is read in steps
// that double, so that a length that is declared but never sent takes little.
func readFrame(r io.Reader, buf []byte, limit int) ([]byte, error) {
	var head [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n > limit {
		return nil, &tooLargeError{n, limit}
	}
	if cap(buf) < n {
		buf = make([]byte, 0, min(n, firstRead))
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf)))
		}
		m, err := io.ReadFull(r, buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, fmt.Errorf("reading a frame of %d bytes: %w", n, noEOF(err))
		}
	}
	return buf, nil
}

// firstRead is what a frame may take before its bytes arrive; a larger one takes more only as they
// do.
const firstRead = 1 << 20

// tooLargeError is a frame longer than its reader takes.
type tooLargeError struct{ size, limit int }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("a frame of %d bytes, over the limit of %d", e.size, e.limit)
}

// noEOF makes an end of stream within a frame the error it is.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
