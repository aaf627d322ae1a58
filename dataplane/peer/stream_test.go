package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// receiver is a Server behind an HTTP server, as a pod's internal port serves it.
func receiver(t *testing.T, apply BatchFunc, opts StreamOptions) (*StreamServer, string) {
	t.Helper()
	s := NewStreamServer(apply, opts)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Upgrade(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}))
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return s, hs.Listener.Addr().String()
}

// dial opens a stream with a bare upgrade request, as any HTTP/1.1 client would send it.
func dial(t *testing.T, addr string) *Stream {
	t.Helper()
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	req := "GET " + wire.ApplyStreamPath + " HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade\r\nUpgrade: " + wire.ApplyStreamProtocol + "\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	c := NewStream(conn)
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // empty: what follows the answer is the stream's
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != wire.ApplyStreamProtocol {
		t.Fatalf("upgrade answered %+v", resp)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// framed is batch behind room for its header.
func framed(batch string) []byte { return append(make([]byte, FrameHeaderSize), batch...) }

// echoLengths answers one op per byte of the batch, held when the byte is 'y', fenced when it is
// 'f', else lacking; a batch that starts with "bad" is refused.
func echoLengths(batch []byte) ([]Outcome, error) {
	if bytes.HasPrefix(batch, []byte("bad")) {
		return nil, errors.New("malformed batch of writes: " + string(batch))
	}
	applied := make([]Outcome, len(batch))
	for i, b := range batch {
		switch b {
		case 'y':
			applied[i] = Holds
		case 'f':
			applied[i] = Fenced
		}
	}
	return applied, nil
}

// counting is echoLengths, counting the batches it applies in n.
func counting(n *atomic.Int32) BatchFunc {
	return func(b []byte) ([]Outcome, error) {
		n.Add(1)
		return echoLengths(b)
	}
}

// Batches go in order on one stream and get their answers; a refused batch gets its reason and
// leaves the stream to the next.
func TestBatchesAreAnsweredInOrderAndARefusalKeepsTheStream(t *testing.T) {
	var mu sync.Mutex
	var got []string
	s, addr := receiver(t, func(b []byte) ([]Outcome, error) {
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		return echoLengths(b)
	}, StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second})
	c := dial(t, addr)
	for _, tc := range []struct{ batch, want string }{{"yny", "true false true"}, {"", ""}, {"bad one", "refused"}, {"yfy", "true fenced true"}} {
		applied, err := c.Apply(t.Context(), framed(tc.batch))
		switch {
		case tc.want == "refused":
			if !IsRefused(err) || !strings.Contains(err.Error(), "malformed batch of writes: bad one") {
				t.Errorf("batch %q: %v, want it refused with the receiver's reason", tc.batch, err)
			}
		case err != nil:
			t.Fatalf("batch %q: %v", tc.batch, err)
		default:
			if s := words(applied); s != tc.want {
				t.Errorf("batch %q answered %q, want %q", tc.batch, s, tc.want)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "|") != "yny||bad one|yfy" {
		t.Errorf("the receiver applied %q, want every batch in order", got)
	}
	if n := s.Streams(); n != 1 {
		t.Errorf("%d streams open, want the one", n)
	}
}

// words spells answers out.
func words(applied []Outcome) string {
	w := make([]string, len(applied))
	for i, a := range applied {
		w[i] = map[Outcome]string{Lacks: "false", Holds: "true", Fenced: "fenced"}[a]
	}
	return strings.Join(w, " ")
}

// A batch over the limit is refused unread, and its stream closed: what follows its header is not
// a frame.
func TestABatchOverTheLimitIsRefusedAndClosesTheStream(t *testing.T) {
	var applied atomic.Int32
	s, addr := receiver(t, counting(&applied), StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second})
	c := dial(t, addr)
	_, err := c.Apply(t.Context(), framed(strings.Repeat("y", 1<<10+1)))
	if !IsRefused(err) || !strings.Contains(err.Error(), "a frame of 1025 bytes, over the limit of 1024") {
		t.Fatalf("a batch of 1025 bytes: %v, want it refused for the limit", err)
	}
	if _, err := c.Apply(t.Context(), framed("y")); err == nil {
		t.Error("a batch after the refusal was answered, want the stream closed")
	}
	if n := applied.Load(); n != 0 {
		t.Errorf("%d batches applied, want none", n)
	}
	await.True(t, 10*time.Second, "the stream to be forgotten", func() bool { return s.Streams() == 0 })
}

// A frame cut short by the sender's end is not applied.
func TestAFrameCutShortIsNotApplied(t *testing.T) {
	var applied atomic.Int32
	s, addr := receiver(t, counting(&applied), StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second})
	c := dial(t, addr)
	frame := framed("yyyyyyyyyy")
	binary.BigEndian.PutUint32(frame, 10)
	if _, err := c.rwc.Write(frame[:FrameHeaderSize+3]); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	await.True(t, 10*time.Second, "the stream to end", func() bool { return s.Streams() == 0 })
	if n := applied.Load(); n != 0 {
		t.Errorf("%d batches applied, want none", n)
	}
}

// Close ends a stream waiting for its next batch at once, answers the batch being applied before
// it ends that stream, and refuses new streams.
func TestCloseAnswersTheBatchBeingAppliedAndEndsTheStreams(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := receiver(t, func(b []byte) ([]Outcome, error) {
		if string(b) == "slow" {
			close(started)
			<-release
		}
		return echoLengths(b)
	}, StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second})
	idle, busy := dial(t, addr), dial(t, addr)
	if _, err := idle.Apply(t.Context(), framed("y")); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := busy.Apply(t.Context(), framed("slow"))
		answered <- err
	}()
	<-started
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	await.True(t, 10*time.Second, "the idle stream to end", func() bool { return s.Streams() == 1 })
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was being applied")
	default:
	}
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("the batch being applied at Close: %v, want its answer", err)
	}
	<-closed
	if n := s.Streams(); n != 0 {
		t.Errorf("%d streams after Close, want none", n)
	}
	if _, err := idle.Apply(t.Context(), framed("y")); err == nil {
		t.Error("a batch on a stream after Close was answered")
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, wire.ApplyStreamPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.ApplyStreamProtocol)
	if err := s.Upgrade(rec, req); !errors.Is(err, ErrStreamsClosed) {
		t.Errorf("an upgrade after Close: %v, want ErrStreamsClosed", err)
	}
}

// An exchange that outlives its context ends with the context's error and closes the stream.
func TestAnExchangeThatOutlivesItsContextClosesTheStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, addr := receiver(t, func(b []byte) ([]Outcome, error) {
		<-release
		return echoLengths(b)
	}, StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second})
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Apply(ctx, framed("y")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a batch not answered in time: %v, want the deadline", err)
	}
	if _, err := c.Apply(t.Context(), framed("y")); err == nil {
		t.Error("a batch on the stream after the deadline was answered, want it closed")
	}
}

// A stream that waits longer than IdleTimeout for its next batch is closed.
func TestAnIdleStreamIsClosed(t *testing.T) {
	s, addr := receiver(t, echoLengths, StreamOptions{MaxBatchBytes: 1 << 10, Timeout: 5 * time.Second, IdleTimeout: 50 * time.Millisecond})
	c := dial(t, addr)
	if _, err := c.Apply(t.Context(), framed("y")); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the idle stream to be closed", func() bool { return s.Streams() == 0 })
	if _, err := c.Apply(t.Context(), framed("y")); err == nil {
		t.Error("a batch on a stream closed idle was answered")
	}
}

// A request that does not ask for the stream's protocol is refused with what to send, and nothing
// is taken over.
func TestARequestThatIsNotAnUpgradeIsRefused(t *testing.T) {
	s := NewStreamServer(echoLengths, StreamOptions{})
	for _, upgrade := range []string{"", "websocket", "bloomery-batches/2"} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, wire.ApplyStreamPath, nil)
		if upgrade != "" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", upgrade)
		}
		err := s.Upgrade(httptest.NewRecorder(), req)
		if bad, ok := errors.AsType[*BadUpgradeError](err); !ok || !strings.Contains(bad.Reason, "Upgrade: bloomery-batches/1") {
			t.Errorf("Upgrade %q: %v, want a BadUpgradeError saying what to send", upgrade, err)
		}
	}
}

// Answers that are not the protocol's fail the exchange rather than being believed.
func TestAnswersOutsideTheProtocolFail(t *testing.T) {
	for name, answer := range map[string][]byte{
		"empty":          {0, 0, 0, 0},
		"unknown status": {0, 0, 0, 1, 7},
		"cut short":      {0, 0, 0, 9, 0, 1},
		"too long":       {0xff, 0xff, 0xff, 0xff},
	} {
		c := NewStream(&scripted{answer: bytes.NewReader(answer)})
		if applied, err := c.Apply(t.Context(), framed("y")); err == nil || IsRefused(err) {
			t.Errorf("%s: answered %v, %v; want the exchange to fail", name, applied, err)
		}
	}
}

// scripted is a connection that takes whatever is written and answers what it was given.
type scripted struct {
	answer io.Reader
	closed bool
}

func (s *scripted) Read(p []byte) (int, error)  { return s.answer.Read(p) }
func (s *scripted) Write(p []byte) (int, error) { return len(p), nil }
func (s *scripted) Close() error                { s.closed = true; return nil }
