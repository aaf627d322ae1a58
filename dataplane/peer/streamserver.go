package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// BatchFunc applies a batch (binary, as wire.OpsContentType) and answers per op whether the pod
// holds it; an error refuses the whole batch.
type BatchFunc func(batch []byte) ([]Outcome, error)

// StreamServer is the receiving end of streams: it serves each on a goroutine of its own until the
// sender closes it, and closes them all at shutdown.
type StreamServer struct {
	apply BatchFunc
	opts  StreamOptions

	closing atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	serving sync.WaitGroup
}

// StreamOptions bound what a stream may take.
type StreamOptions struct {
	// MaxBatchBytes is the largest batch taken; a larger one is refused and closes its stream.
	MaxBatchBytes int
	// Timeout bounds reading a batch once its first bytes came, and writing its answer.
	Timeout time.Duration
	// IdleTimeout closes a stream that waits longer for its next batch; 0 waits as long as the
	// connection lives.
	IdleTimeout time.Duration
}

// ErrStreamsClosed refuses a stream once the server is closing.
var ErrStreamsClosed = errors.New("the pod is shutting down")

// NewStreamServer serves streams whose batches apply applies.
func NewStreamServer(apply BatchFunc, opts StreamOptions) *StreamServer {
	return &StreamServer{apply: apply, opts: opts, conns: make(map[net.Conn]struct{})}
}

// Upgrade takes the stream that r asks for (an upgrade to wire.ApplyStreamProtocol) over from
// the HTTP server: it answers 101 Switching Protocols and serves the connection on a goroutine of
// its own until it ends. An error, returned before anything was written, is a request that does
// not ask for a stream (a *BadUpgradeError: a 400 to answer), a connection that cannot be taken
// over, or ErrStreamsClosed.
func (s *StreamServer) Upgrade(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), wire.ApplyStreamProtocol) || r.ProtoMajor != 1 {
		return &BadUpgradeError{fmt.Sprintf("%s takes an HTTP/1.1 upgrade to %s (Connection: Upgrade, Upgrade: %s); got %s with Upgrade %q",
			wire.ApplyStreamPath, wire.ApplyStreamProtocol, wire.ApplyStreamProtocol, r.Proto, r.Header.Get("Upgrade"))}
	}
	if s.closing.Load() {
		return ErrStreamsClosed
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("taking over the connection for a stream: %w", err)
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = conn.Close()
		return nil // the connection is gone, and so is any answer
	}
	s.conns[conn] = struct{}{}
	s.serving.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.serving.Done()
		defer s.forget(conn)
		// The HTTP server's deadlines were the upgrade request's; the stream sets its own.
		_ = conn.SetDeadline(time.Time{})
		if s.opts.Timeout > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(s.opts.Timeout))
		}
		_, err := fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", wire.ApplyStreamProtocol)
		if err == nil {
			err = rw.Flush()
		}
		if err == nil {
			s.serve(conn, rw.Reader)
		}
	}()
	return nil
}

// BadUpgradeError is a request to wire.ApplyStreamPath that does not ask for a stream.
type BadUpgradeError struct{ Reason string }

func (e *BadUpgradeError) Error() string { return e.Reason }

// Streams answers how many streams are open.
func (s *StreamServer) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *StreamServer) forget(conn net.Conn) {
	_ = conn.Close()
	s.mu.Lock()
	delete(s.conns, conn)
	s.mu.Unlock()
}

// Close stops taking streams, ends those open, and returns once none is served. A stream waiting
// for its next batch ends at once; one whose batch is being applied ends after answering it; one
// whose batch is arriving is cut off, and its sender sees the batch fail.
func (s *StreamServer) Close() {
	s.mu.Lock()
	s.closing.Store(true)
	for conn := range s.conns {
		_ = conn.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.serving.Wait()
}

func (s *StreamServer) serve(conn net.Conn, r *bufio.Reader) {
	w := bufio.NewWriterSize(conn, 512)
	var answer []byte
	for {
		if !s.readDeadline(conn, s.opts.IdleTimeout) {
			return
		}
		if _, err := r.Peek(FrameHeaderSize); err != nil {
			return // closed by the sender, idle, or shutting down
		}
		if !s.readDeadline(conn, s.opts.Timeout) {
			return
		}
		batch, err := readFrame(r, nil, s.opts.MaxBatchBytes)
		if tooLarge, ok := errors.AsType[*tooLargeError](err); ok {
			answer = appendAnswer(answer[:0], nil, tooLarge)
			_ = s.write(conn, w, answer)
			return
		}
		if err != nil {
			return
		}
		applied, err := s.apply(batch)
		answer = appendAnswer(answer[:0], applied, err)
		if err := s.write(conn, w, answer); err != nil {
			return
		}
	}
}

// readDeadline sets the deadline of the next read, none for 0, and reports whether to read: not
// once the server is closing. Checked after the deadline is set, so that Close's deadline is
// either seen here or overrides this one.
func (s *StreamServer) readDeadline(conn net.Conn, d time.Duration) bool {
	var at time.Time
	if d > 0 {
		at = time.Now().Add(d)
	}
	if conn.SetReadDeadline(at) != nil {
		return false
	}
	return !s.closing.Load()
}

func (s *StreamServer) write(conn net.Conn, w *bufio.Writer, answer []byte) error {
	if s.opts.Timeout > 0 {
		if err := conn.SetWriteDeadline(time.Now().Add(s.opts.Timeout)); err != nil {
			return err
		}
	}
	if _, err := w.Write(answer); err != nil {
		return err
	}
	return w.Flush()
}

// maxReason bounds the reason a refusal gives.
const maxReason = 4 << 10

// appendAnswer appends the frame answering a batch: applied, or refused for err.
func appendAnswer(dst []byte, applied []Outcome, err error) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if err != nil {
		reason := err.Error()
		dst = append(dst, statusRefused)
		dst = append(dst, reason[:min(len(reason), maxReason)]...)
	} else {
		dst = append(dst, statusApplied)
		for _, a := range applied {
			dst = append(dst, byte(a))
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-FrameHeaderSize))
	return dst
}
