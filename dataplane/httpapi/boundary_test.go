package httpapi_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
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
	{http.MethodGet, wire.FilterStatusesPath, "", http.StatusOK},
	{http.MethodGet, wire.InventoryPath, "", http.StatusOK},
	{http.MethodPost, wire.ApplyPath, `{"ops":[]}`, http.StatusOK},
	{http.MethodGet, wire.ApplyStreamPath, "", http.StatusBadRequest}, // a stream needs an upgrade
	{http.MethodGet, wire.MembershipPath, "", http.StatusOK},
	{http.MethodPut, wire.MembershipPath, `{"epoch":1,"self":"a","members":[{"name":"a","url":"http://127.0.0.1:1"}]}`, http.StatusOK},
}

// Every internal endpoint refuses a request without the token, or with another, with 401 code 10,
// and changes nothing; with the token it answers.
func TestInternalPortRequiresTheToken(t *testing.T) {
	ts := dataplane.Start(t, nil)
	plain := &dataplane.Server{URL: ts.Internal.URL, HTTP: &http.Client{}}
	strangers := map[string]*dataplane.Server{
		"no token":        plain,
		"another token":   {URL: ts.Internal.URL, HTTP: &http.Client{Transport: dataplane.Bearer{Token: "not-" + dataplane.Token, Next: http.DefaultTransport}}},
		"a prefix of it":  {URL: ts.Internal.URL, HTTP: &http.Client{Transport: dataplane.Bearer{Token: dataplane.Token[:len(dataplane.Token)-1], Next: http.DefaultTransport}}},
		"an empty bearer": {URL: ts.Internal.URL, HTTP: &http.Client{Transport: dataplane.Bearer{Token: "", Next: http.DefaultTransport}}},
	}
	refused := 0
	for _, call := range internalCalls {
		for who, s := range strangers {
			r := s.Send(t, call.method, call.path, call.body)
			if msg := r.WantError(t, http.StatusUnauthorized, wire.CodeUnauthorized); strings.Contains(msg, dataplane.Token) {
				t.Errorf("the refusal quotes the token: %q", msg)
			}
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %s: no WWW-Authenticate header", call.method, call.path, who)
			}
			refused++
		}
		// What the strangers sent changed nothing: the filter is created by the first call with
		// the token, and the membership by the last.
		if call.method == http.MethodPut {
			if names, err := ts.Client.List(t.Context()); err != nil || (call.path != wire.MembershipPath && len(names) != 0) {
				t.Fatalf("after refused creates the pod holds %v, %v", names, err)
			}
			if m, err := ts.Internal.Client.Membership(t.Context()); err != nil || m.Epoch != 0 {
				t.Fatalf("after refused pushes the pod holds epoch %d, %v", m.Epoch, err)
			}
		}
		if r := ts.Internal.Send(t, call.method, call.path, call.body); r.Status != call.status {
			t.Errorf("%s %s with the token: %d %s, want %d", call.method, call.path, r.Status, r.Body, call.status)
		}
	}
	dataplane.WantValue(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), float64(refused), "bloomery_http_unauthorized_requests_total")
}

// The client port serves none of the internal endpoints, with the token or without; the ops port
// serves neither them nor the filter API.
func TestInternalEndpointsAreOnTheInternalPortOnly(t *testing.T) {
	ts := dataplane.Start(t, nil)
	withToken := &dataplane.Server{URL: ts.URL, HTTP: &http.Client{Transport: dataplane.Bearer{Token: dataplane.Token, Next: http.DefaultTransport}}}
	ops := &dataplane.Server{URL: ts.Ops, HTTP: &http.Client{}}
	for _, call := range internalCalls {
		withToken.Send(t, call.method, call.path, call.body).WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
		ops.Send(t, call.method, call.path, call.body).WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	}
	ops.Send(t, http.MethodGet, wire.ListPath, "").WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	ops.Send(t, http.MethodGet, wire.PingPath, "").WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	for _, path := range []string{wire.HealthzPath, wire.ReadyzPath, wire.MetricsPath} {
		for _, s := range []*dataplane.Server{ts, ops} {
			if r := s.Send(t, http.MethodGet, path, ""); r.Status != http.StatusOK {
				t.Errorf("GET %s%s: %d %s", s.URL, path, r.Status, r.Body)
			}
		}
	}
}

// The client port holds at most maxRequestBytesInFlight of request bodies: a request that would
// pass it answers 503 code 7 with Retry-After, and is served once the bodies held are done.
func TestRequestBodiesInFlightAreBounded(t *testing.T) {
	const limit = 1 << 20
	ts := dataplane.Start(t, func(c *config.Config) {
		c.MaxHTTPRequestLength, c.MaxRequestBytesInFlight = limit, limit
		c.RequestTimeout = time.Minute // the slow body must stay held while the test looks, however busy the machine
	})
	dataplane.Create(t, ts, "f", client.CreateOptions{})

	// A client that sends 900 KiB of a 1 MiB body and then waits: the server holds what it read.
	slow, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Close() }()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: bloomery\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		wire.FilterOpPath("f", wire.OpMultiSet), limit)
	if _, err := slow.Write(append([]byte(head+`{"values":["`), bytes.Repeat([]byte("x"), 900<<10)...)); err != nil {
		t.Fatal(err)
	}

	await.True(t, 30*time.Second, "the server to hold the slow body", func() bool {
		return dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_http_request_body_bytes") >= 900<<10
	})
	body := `{"values":["` + strings.Repeat("y", 200<<10) + `"]}`
	refused := ts.Send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiSet), body)
	msg := refused.WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	if !strings.Contains(msg, "1.0 MiB of request bodies, its limit (maxRequestBytesInFlight)") || refused.Header.Get("Retry-After") != "1" {
		t.Errorf("refusal %q, Retry-After %q", msg, refused.Header.Get("Retry-After"))
	}
	if v := dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_http_bodies_refused_total"); v != 1 {
		t.Errorf("bloomery_http_bodies_refused_total = %v, want 1", v)
	}

	_ = slow.Close() // the held body goes with its request
	await.True(t, 30*time.Second, "the budget to be given back", func() bool {
		return ts.Send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiSet), body).Status == http.StatusOK
	})
}

// TestDecodedValuesAreCharged sends bodies of empty strings, which hold many times their size
// once decoded: the values are charged to the body budget, and a request whose values alone
// exceed it is refused with a message saying what to do.
func TestDecodedValuesAreCharged(t *testing.T) {
	const limit = 1 << 20
	ts := dataplane.Start(t, func(c *config.Config) {
		c.MaxHTTPRequestLength, c.MaxRequestBytesInFlight = limit, limit
	})
	dataplane.Create(t, ts, "f", client.CreateOptions{})
	emptyValues := func(n int) string { return `{"values":[""` + strings.Repeat(`,""`, n-1) + `]}` }

	// 100,000 values in a 300 KB body hold 2.4 MB once decoded.
	msg := ts.Send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiCheckAndSet), emptyValues(100_000)).
		WantError(t, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge)
	if !strings.Contains(msg, "100000 values hold") || !strings.Contains(msg, "send fewer values per request") {
		t.Errorf("refusal %q", msg)
	}
	if got := ts.Send(t, http.MethodPost, wire.FilterOpPath("f", wire.OpMultiCheckAndSet), emptyValues(10_000)); got.Status != http.StatusOK {
		t.Errorf("10,000 values: %d %s", got.Status, got.Body)
	}
	if v := dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_http_request_body_bytes"); v != 0 {
		t.Errorf("bloomery_http_request_body_bytes = %v after the requests ended, want 0", v)
	}
}
