package run_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// A flood of idle connections that takes the client port's whole budget leaves the ops port
// answering the probes and Prometheus at once.
func TestOpsPortAnswersWhileTheClientPortIsFull(t *testing.T) {
	const budget = 4
	ts := dataplane.Start(t, func(c *config.Config) { c.MaxHTTPConnections = budget })
	addr := strings.TrimPrefix(ts.URL, "http://")
	for range budget {
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
	}
	// The budget is spent: a request to the client port waits for a connection to free up.
	if status, err := getWithin(t, 300*time.Millisecond, ts.URL+wire.ReadyzPath); err == nil {
		t.Fatalf("the client port answered %d with its %d connections taken; the test did not fill it", status, budget)
	}
	for _, path := range []string{wire.HealthzPath, wire.ReadyzPath, wire.MetricsPath} {
		status, err := getWithin(t, time.Second, ts.Ops+path)
		if err != nil || status != http.StatusOK {
			t.Errorf("GET %s on the ops port with the client port full: %d, %v", path, status, err)
		}
	}
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
