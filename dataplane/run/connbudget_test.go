package run

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// budgetMetrics records what a budget counts.
type budgetMetrics struct {
	mu      sync.Mutex
	refused int
	closed  map[string]int
}

func (m *budgetMetrics) ConnState(net.Conn, http.ConnState) {}
func (m *budgetMetrics) ConnRefused(string)                 { m.mu.Lock(); m.refused++; m.mu.Unlock() }
func (m *budgetMetrics) ConnClosed(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed == nil {
		m.closed = map[string]int{}
	}
	m.closed[reason]++
}

// testBudget is a budget whose clock advances a second at each reading, so that every
// connection's state has a distinct age.
func testBudget(maxConns, reserve int) (*connBudget, *budgetMetrics) {
	m := &budgetMetrics{}
	b := newConnBudget("test", maxConns, reserve, m)
	at := time.Unix(0, 0)
	b.now = func() time.Time { at = at.Add(time.Second); return at }
	return b, m
}

// pipe is the server's end of a connection; the client's end is closed with the test.
func pipe(t *testing.T) net.Conn {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	go func() { _, _ = io.Copy(io.Discard, client) }() // reads what refuse writes
	return server
}

// open admits a connection through the hook and moves it to state; it answers the connection
// and its request context.
func open(t *testing.T, b *connBudget, state http.ConnState) (net.Conn, context.Context) {
	t.Helper()
	c := pipe(t)
	ctx := b.connContext(t.Context(), c)
	b.connState(c, http.StateNew)
	if state != http.StateNew {
		b.connState(c, state)
	}
	return c, ctx
}

// closed reports whether the budget closed c (net.Pipe's end answers io.ErrClosedPipe then).
func closed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.ErrClosedPipe)
}

// A full budget makes room for a new connection by closing the oldest idle one, whatever the age
// of the connections that have sent nothing yet or are answering.
func TestBudgetClosesTheOldestIdleConnectionFirst(t *testing.T) {
	b, m := testBudget(4, 0)
	silent, _ := open(t, b, http.StateNew)
	oldIdle, _ := open(t, b, http.StateIdle)
	busy, _ := open(t, b, http.StateActive)
	newIdle, _ := open(t, b, http.StateIdle)

	_, ctx := open(t, b, http.StateNew)
	if ctx.Value(budgetKey{}) == nil {
		t.Fatal("the new connection was not admitted")
	}
	await.True(t, 5*time.Second, "the oldest idle connection is closed", func() bool { return closed(oldIdle) })
	for name, c := range map[string]net.Conn{"silent": silent, "busy": busy, "newer idle": newIdle} {
		if closed(c) {
			t.Errorf("the %s connection was closed", name)
		}
	}
	if m.closed[closedIdle] != 1 || m.refused != 0 {
		t.Errorf("counted closed %v, refused %d; want one idle closed", m.closed, m.refused)
	}
}

// Without an idle connection, the oldest that has sent no complete request makes room.
func TestBudgetClosesTheOldestSilentConnectionWithoutIdleOnes(t *testing.T) {
	b, m := testBudget(3, 0)
	_, _ = open(t, b, http.StateActive)
	oldSilent, _ := open(t, b, http.StateNew)
	newSilent, _ := open(t, b, http.StateNew)

	if _, ctx := open(t, b, http.StateNew); ctx.Value(budgetKey{}) == nil {
		t.Fatal("the new connection was not admitted")
	}
	await.True(t, 5*time.Second, "the oldest silent connection is closed", func() bool { return closed(oldSilent) })
	if closed(newSilent) {
		t.Error("the newer silent connection was closed")
	}
	if m.closed[closedUnanswered] != 1 {
		t.Errorf("counted closed %v; want one no_request", m.closed)
	}
}

// A budget of connections all answering requests refuses the next one, which is answered 503,
// until one closes or is hijacked.
func TestBudgetRefusesWhenEveryConnectionIsAnswering(t *testing.T) {
	b, m := testBudget(2, 0)
	first, _ := open(t, b, http.StateActive)
	second, _ := open(t, b, http.StateActive)

	server, client := net.Pipe()
	t.Cleanup(func() { _ = client.Close() })
	if ctx := b.connContext(t.Context(), server); ctx.Value(budgetKey{}) != nil {
		t.Fatal("a connection beyond a budget of busy ones was admitted")
	}
	answer, err := io.ReadAll(client)
	if err != nil || string(answer[:len("HTTP/1.1 503")]) != "HTTP/1.1 503" {
		t.Errorf("the refused connection read %q, %v; want a 503 then the end", answer, err)
	}
	if m.refused != 1 {
		t.Errorf("counted %d refused, want 1", m.refused)
	}

	b.connState(first, http.StateClosed)
	b.connState(second, http.StateHijacked)
	for range 2 {
		if _, ctx := open(t, b, http.StateActive); ctx.Value(budgetKey{}) == nil {
			t.Fatal("a connection was refused after the busy ones left")
		}
	}
}

// The probe reserve admits connections beyond a budget of busy ones, which are served the probes
// alone and closed after each answer, and are never closed to make room.
func TestProbeReserveServesTheProbesAlone(t *testing.T) {
	b, _ := testBudget(1, 1)
	_, _ = open(t, b, http.StateActive)
	probe, ctx := open(t, b, http.StateIdle)
	bc, _ := ctx.Value(budgetKey{}).(*budgetConn)
	if bc == nil || !bc.probeOnly {
		t.Fatalf("the connection beyond the budget was admitted as %+v, want on the probe reserve", bc)
	}
	server, client := net.Pipe()
	t.Cleanup(func() { _ = client.Close() })
	go func() { _, _ = io.Copy(io.Discard, client) }()
	if b.connContext(t.Context(), server).Value(budgetKey{}) != nil {
		t.Error("a connection beyond the budget and the reserve was admitted")
	}
	if closed(probe) {
		t.Error("the probe's idle connection was closed to make room")
	}

	h := probesOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	for path, want := range map[string]int{wire.HealthzPath: http.StatusOK, wire.ReadyzPath: http.StatusOK, wire.MetricsPath: http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		if rec.Code != want || rec.Header().Get("Connection") != "close" {
			t.Errorf("GET %s on the reserve: %d, Connection %q; want %d, close", path, rec.Code, rec.Header().Get("Connection"), want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, wire.MetricsPath, nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Connection") != "" {
		t.Errorf("GET /metrics within the budget: %d, Connection %q; want 200, kept", rec.Code, rec.Header().Get("Connection"))
	}
}
