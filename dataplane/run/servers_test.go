package run_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// A flood of connections that takes the client port's whole budget, some idle after a request
// and some silent, neither starves a new client, which closes the oldest idle one to be served,
// nor the ops port.
func TestFullClientPortServesANewClient(t *testing.T) {
	const budget = 4
	ts := dataplane.Start(t, func(c *config.Config) { c.MaxHTTPConnections = budget })
	addr := strings.TrimPrefix(ts.URL, "http://")
	var idle []net.Conn
	for i := range budget {
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if i%2 == 0 {
			requestOn(t, conn, "GET "+wire.HealthzPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
			idle = append(idle, conn)
		}
	}
	closedIdle := func() float64 {
		v, _ := dataplane.Scrape(t, http.DefaultClient, ts.Ops, "").Value("bloomery_http_connections_closed_total", "port", "client", "reason", "idle")
		return v // none yet is 0
	}
	before := closedIdle()
	if status, err := getWithin(t, 5*time.Second, ts.URL+wire.ReadyzPath); err != nil || status != http.StatusOK {
		t.Errorf("a new client with the client port's %d connections taken: %d, %v", budget, status, err)
	}
	// The oldest idle connection made room: its next read finds it closed.
	_ = idle[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the oldest idle connection read %d bytes, %v; want it closed", n, err)
	}
	for _, path := range []string{wire.HealthzPath, wire.ReadyzPath, wire.MetricsPath} {
		status, err := getWithin(t, 5*time.Second, ts.Ops+path)
		if err != nil || status != http.StatusOK {
			t.Errorf("GET %s on the ops port with the client port full: %d, %v", path, status, err)
		}
	}
	if after := closedIdle(); after != before+1 {
		t.Errorf("bloomery_http_connections_closed_total{port=client,reason=idle} went from %v to %v, want one more", before, after)
	}
}

// A request to the internal port without the token is answered 401, and its connection closed:
// open, it would hold a share of the budget the operator and the peers need.
func TestInternalPortClosesTheConnectionAfterA401(t *testing.T) {
	ts := dataplane.Start(t, nil)
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(ts.Internal.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	answer := requestOn(t, conn, "GET "+wire.MembershipPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.HasPrefix(answer, "HTTP/1.1 401") {
		t.Fatalf("a request without the token: %q, want 401", answer)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(conn); err != nil {
		t.Errorf("the connection was not closed after the 401: %q, %v", rest, err)
	}
	fs := dataplane.Scrape(t, http.DefaultClient, ts.Ops, "")
	dataplane.WantValue(t, fs, 1, "bloomery_http_connections_closed_total", "port", "internal", "reason", "unauthorized")
}

// requestOn writes a raw request on conn and answers its response's head.
func requestOn(t *testing.T, conn net.Conn, request string) string {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.Proto + " " + resp.Status
}

// getWithin sends GET url on a connection of its own and answers its status, or an error after
// timeout.
func getWithin(t *testing.T, timeout time.Duration, url string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
