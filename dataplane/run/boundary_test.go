package run_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The trust boundary, over the listeners Run serves: what only the operator and peers may call is
// on the internal port alone, behind the token; the ops port serves the probes and metrics alone.

// internalCall is a request the operator or a peer makes, and the status it gets with the token.
type internalCall struct {
	method, path, body string
	status             int
}

// internalCalls are every kind of internal endpoint, in an order in which each succeeds.
var internalCalls = []internalCall{
	{http.MethodPut, wire.InternalPath(wire.FilterPath("f")), `{"expectedInsertions":1000}`, http.StatusCreated},
	{http.MethodGet, wire.InternalPath(wire.FilterPath("f")), "", http.StatusOK},
	{http.MethodGet, wire.InternalPath(wire.ListPath), "", http.StatusOK},
	{http.MethodPost, wire.InternalPath(wire.FilterOpPath("f", wire.OpCheckAndSet)), `{"value":"v"}`, http.StatusOK},
	{http.MethodPost, wire.InternalPath(wire.FilterOpPath("f", wire.OpMultiCheck)), `{"values":["v"]}`, http.StatusOK},
	{http.MethodGet, wire.InternalPath(wire.FilterOpPath("f", wire.OpDump)), "", http.StatusOK},
	{http.MethodGet, wire.FilterStatusPath("f"), "", http.StatusOK},
	{http.MethodGet, wire.InventoryPath, "", http.StatusOK},
	{http.MethodPost, wire.ApplyPath, `{"ops":[]}`, http.StatusOK},
	{http.MethodGet, wire.ApplyStreamPath, "", http.StatusBadRequest}, // a stream needs an upgrade
	{http.MethodGet, wire.MembershipPath, "", http.StatusOK},
	{http.MethodPut, wire.MembershipPath, `{"epoch":1,"self":"a","members":[{"name":"a","url":"http://127.0.0.1:1"}]}`, http.StatusOK},
}

// Every internal endpoint refuses a request without the token, or with another, with 401 code 10,
// and changes nothing; with the token it answers.
func TestInternalPortRequiresTheToken(t *testing.T) {
	ts := runServer(t, nil)
	plain := &testServer{url: ts.internal.url, http: &http.Client{}}
	strangers := map[string]*testServer{
		"no token":        plain,
		"another token":   {url: ts.internal.url, http: &http.Client{Transport: bearer{"not-" + testToken, http.DefaultTransport}}},
		"a prefix of it":  {url: ts.internal.url, http: &http.Client{Transport: bearer{testToken[:len(testToken)-1], http.DefaultTransport}}},
		"an empty bearer": {url: ts.internal.url, http: &http.Client{Transport: bearer{"", http.DefaultTransport}}},
	}
	refused := 0
	for _, call := range internalCalls {
		for who, s := range strangers {
			r := s.send(t, call.method, call.path, call.body)
			if msg := r.wantError(t, http.StatusUnauthorized, wire.CodeUnauthorized); strings.Contains(msg, testToken) {
				t.Errorf("the refusal quotes the token: %q", msg)
			}
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %s: no WWW-Authenticate header", call.method, call.path, who)
			}
			refused++
		}
		// What the strangers sent changed nothing: the filter is created by the first call with
		// the token, and the membership by the last.
		if call.method == http.MethodPut {
			if names, err := ts.client.List(t.Context()); err != nil || (call.path != wire.MembershipPath && len(names) != 0) {
				t.Fatalf("after refused creates the pod holds %v, %v", names, err)
			}
			if m, err := ts.internal.client.Membership(t.Context()); err != nil || m.Epoch != 0 {
				t.Fatalf("after refused pushes the pod holds epoch %d, %v", m.Epoch, err)
			}
		}
		if r := ts.internal.send(t, call.method, call.path, call.body); r.status != call.status {
			t.Errorf("%s %s with the token: %d %s, want %d", call.method, call.path, r.status, r.body, call.status)
		}
	}
	wantValue(t, scrape(t, &http.Client{}, ts.ops, ""), float64(refused), "bloomery_http_unauthorized_requests_total")
}

// The client port serves none of the internal endpoints, with the token or without; the ops port
// serves neither them nor the filter API.
func TestInternalEndpointsAreOnTheInternalPortOnly(t *testing.T) {
	ts := runServer(t, nil)
	withToken := &testServer{url: ts.url, http: &http.Client{Transport: bearer{testToken, http.DefaultTransport}}}
	ops := &testServer{url: ts.ops, http: &http.Client{}}
	for _, call := range internalCalls {
		withToken.send(t, call.method, call.path, call.body).wantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
		ops.send(t, call.method, call.path, call.body).wantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	}
	ops.send(t, http.MethodGet, wire.ListPath, "").wantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	ops.send(t, http.MethodGet, wire.PingPath, "").wantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	for _, path := range []string{wire.HealthzPath, wire.ReadyzPath, wire.MetricsPath} {
		for _, s := range []*testServer{ts, ops} {
			if r := s.send(t, http.MethodGet, path, ""); r.status != http.StatusOK {
				t.Errorf("GET %s%s: %d %s", s.url, path, r.status, r.body)
			}
		}
	}
}

// A flood of idle connections that takes the client port's whole budget leaves the ops port
// answering the probes and Prometheus at once.
func TestOpsPortAnswersWhileTheClientPortIsFull(t *testing.T) {
	const budget = 4
	ts := runServer(t, func(c *config.Config) { c.MaxHTTPConnections = budget })
	addr := strings.TrimPrefix(ts.url, "http://")
	for range budget {
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
	}
	// The budget is spent: a request to the client port waits for a connection to free up.
	if status, err := getWithin(t, 300*time.Millisecond, ts.url+wire.ReadyzPath); err == nil {
		t.Fatalf("the client port answered %d with its %d connections taken; the test did not fill it", status, budget)
	}
	for _, path := range []string{wire.HealthzPath, wire.ReadyzPath, wire.MetricsPath} {
		status, err := getWithin(t, time.Second, ts.ops+path)
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

// The client port holds at most maxRequestBytesInFlight of request bodies: a request that would
// pass it answers 503 code 7 with Retry-After, and is served once the bodies held are done.
func TestRequestBodiesInFlightAreBounded(t *testing.T) {
	const limit = 1 << 20
	ts := runServer(t, func(c *config.Config) {
		c.MaxHTTPRequestLength, c.MaxRequestBytesInFlight = limit, limit
		c.RequestTimeout = time.Minute // the slow body must stay held while the test looks, however busy the machine
	})
	create(t, ts, "f", client.CreateOptions{})

	// A client that sends 900 KiB of a 1 MiB body and then waits: the server holds what it read.
	slow, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Close() }()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: bloomery\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		wire.FilterOpPath("f", wire.OpMultiSet), limit)
	if _, err := slow.Write(append([]byte(head+`{"values":["`), bytes.Repeat([]byte("x"), 900<<10)...)); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, 10*time.Millisecond, "the server to hold the slow body", func() bool {
		return value(t, scrape(t, &http.Client{}, ts.ops, ""), "bloomery_http_request_body_bytes") >= 900<<10
	})
	body := `{"values":["` + strings.Repeat("y", 200<<10) + `"]}`
	refused := ts.send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiSet), body)
	msg := refused.wantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	if !strings.Contains(msg, "1.0 MiB of request bodies, its limit (maxRequestBytesInFlight)") || refused.header.Get("Retry-After") != "1" {
		t.Errorf("refusal %q, Retry-After %q", msg, refused.header.Get("Retry-After"))
	}
	if v := value(t, scrape(t, &http.Client{}, ts.ops, ""), "bloomery_http_bodies_refused_total"); v != 1 {
		t.Errorf("bloomery_http_bodies_refused_total = %v, want 1", v)
	}

	_ = slow.Close() // the held body goes with its request
	eventually(t, 30*time.Second, 10*time.Millisecond, "the budget to be given back", func() bool {
		return ts.send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiSet), body).status == http.StatusOK
	})
}

// TestDecodedValuesAreCharged sends bodies of empty strings, which hold many times their size
// once decoded: the values are charged to the body budget, and a request whose values alone
// exceed it is refused with a message saying what to do.
func TestDecodedValuesAreCharged(t *testing.T) {
	const limit = 1 << 20
	ts := runServer(t, func(c *config.Config) {
		c.MaxHTTPRequestLength, c.MaxRequestBytesInFlight = limit, limit
	})
	create(t, ts, "f", client.CreateOptions{})
	emptyValues := func(n int) string { return `{"values":[""` + strings.Repeat(`,""`, n-1) + `]}` }

	// 100,000 values in a 300 KB body hold 2.4 MB once decoded.
	msg := ts.send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiCheckAndSet), emptyValues(100_000)).
		wantError(t, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge)
	if !strings.Contains(msg, "100000 values hold") || !strings.Contains(msg, "send fewer values per request") {
		t.Errorf("refusal %q", msg)
	}
	if got := ts.send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiCheckAndSet), emptyValues(10_000)); got.status != http.StatusOK {
		t.Errorf("10,000 values: %d %s", got.status, got.body)
	}
	if v := value(t, scrape(t, &http.Client{}, ts.ops, ""), "bloomery_http_request_body_bytes"); v != 0 {
		t.Errorf("bloomery_http_request_body_bytes = %v after the requests ended, want 0", v)
	}
}
