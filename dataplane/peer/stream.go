package peer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stream is the sending end of a stream. One sender owns it: it is not safe for concurrent use.
// After any error but a RefusedError it is closed, and the next batch needs a new one.
type Stream struct {
	rwc    io.ReadWriteCloser
	r      *bufio.Reader
	answer []byte // the last answer's bytes, reused
	used   bool
}

// NewStream is the sending end of the upgraded connection rwc.
func NewStream(rwc io.ReadWriteCloser) *Stream {
	return &Stream{rwc: rwc, r: bufio.NewReaderSize(rwc, 4096)}
}

// Used reports whether a batch went through the stream: one that waited since may have been
// closed by the receiver meanwhile (it restarted, or closed the stream idle), which its sender
// learns only from its next batch.
func (c *Stream) Used() bool { return c.used }

// Apply sends a batch and answers per op whether the receiver holds it. framed is the batch
// behind FrameHeaderSize bytes, which Apply fills in; it may be reused once Apply returned. ctx bounds
// the whole exchange: when it ends first, the stream is closed.
func (c *Stream) Apply(ctx context.Context, framed []byte) ([]Outcome, error) {
	if len(framed) < FrameHeaderSize {
		return nil, fmt.Errorf("a frame of %d bytes has no room for its header", len(framed))
	}
	binary.BigEndian.PutUint32(framed, uint32(len(framed)-FrameHeaderSize))
	stop := context.AfterFunc(ctx, func() { _ = c.rwc.Close() })
	defer stop()
	c.used = true
	applied, err := c.exchange(framed)
	if err != nil && !IsRefused(err) {
		_ = c.rwc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stream: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("stream: %w", err)
	}
	return applied, err
}

func (c *Stream) exchange(framed []byte) ([]Outcome, error) {
	if _, err := c.rwc.Write(framed); err != nil {
		return nil, err
	}
	answer, err := readFrame(c.r, c.answer, maxAnswer)
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", noEOF(err))
	}
	c.answer = answer
	if len(answer) == 0 {
		return nil, errors.New("an empty answer")
	}
	switch answer[0] {
	case statusApplied:
		applied := make([]Outcome, len(answer)-1)
		for i, b := range answer[1:] {
			applied[i] = Outcome(b)
		}
		return applied, nil
	case statusRefused:
		return nil, &RefusedError{string(answer[1:])}
	default:
		return nil, fmt.Errorf("an answer of unknown status %d", answer[0])
	}
}

// Close closes the stream.
func (c *Stream) Close() error { return c.rwc.Close() }
