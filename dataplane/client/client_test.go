package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// dataPlane runs the real data-plane handlers of the client port and, as internal, of the
// internal port, on loopback listeners. requests records the bodies the server received, so
// tests can see what the client put on the wire.
type dataPlane struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
	conns    atomic.Int64 // connections the server accepted
	internal *dataPlane
}

type recorded struct {
	method, path, body string
}

func (d *dataPlane) lastRequest(t *testing.T) recorded {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.requests) == 0 {
		t.Fatal("the server received no request")
	}
	return d.requests[len(d.requests)-1]
}

// testToken is the internal port's token in these tests.
const testToken = "the-cluster-token-of-the-tests-0123456789"

func startDataPlane(t *testing.T, configure func(*config.Config)) (*dataPlane, *client.Client) {
	t.Helper()
	cfg := config.Default()
	cfg.InternalTokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.InternalTokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	d := recording(t, srv.ClientHandler())
	d.internal = recording(t, srv.InternalHandler())
	return d, client.New(d.URL + "/") // a trailing slash must not double up in paths
}

// recording serves handler on loopback and records its requests.
func recording(t *testing.T, handler http.Handler) *dataPlane {
	t.Helper()
	d := &dataPlane{}
	d.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		d.mu.Lock()
		d.requests = append(d.requests, recorded{r.Method, r.URL.EscapedPath(), string(body)})
		d.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		handler.ServeHTTP(w, r)
	}))
	d.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			d.conns.Add(1)
		}
	}
	d.Start()
	t.Cleanup(d.Close)
	return d
}

// apiError asserts that err is a *client.Error with that status and code, and returns a copy.
func apiError(t *testing.T, err error, status, code int) client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want a *client.Error", err, err)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("error = %+v, want status %d and code %d", e, status, code)
	}
	return *e
}

func TestPing(t *testing.T) {
	_, c := startDataPlane(t, nil)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func TestPingRefusesAnotherAnswer(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(other.Close)
	err := client.New(other.URL).Ping(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"hello"`) {
		t.Fatalf("Ping of a server answering hello: error = %v, want one quoting the answer", err)
	}
}

func TestCreate(t *testing.T) {
	d, c := startDataPlane(t, func(cfg *config.Config) {
		cfg.DefaultExpectedInsertions = 5000
		cfg.DefaultFPP = 0.01
	})
	ctx := t.Context()

	// Unset options stay off the wire, so the server's defaults apply.
	f, created, err := c.Create(ctx, "defaults", client.CreateOptions{})
	if err != nil || !created {
		t.Fatalf("Create(defaults) = created %v, %v; want created", created, err)
	}
	if got := d.lastRequest(t); got.method != http.MethodPut || got.path != "/v1/bloomfilter/defaults" || got.body != "{}" {
		t.Errorf("request = %+v, want PUT /v1/bloomfilter/defaults with body {}", got)
	}
	if f.Name != "defaults" || f.ExpectedInsertions != 5000 || f.FPP != 0.01 || !f.Scalable {
		t.Errorf("filter = %+v, want the configured defaults (5000, 0.01, scalable)", f)
	}

	// Zero values that were set are sent: 0 seconds means "never expires", not "default".
	opts := client.CreateOptions{
		ExpectedInsertions:     new(uint64(1000)),
		FPP:                    new(0.001),
		ValidPeriodAfterCreate: new(int64(0)),
		Scalable:               new(false),
	}
	f, created, err = c.Create(ctx, "fixed", opts)
	if err != nil || !created {
		t.Fatalf("Create(fixed) = created %v, %v; want created", created, err)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(d.lastRequest(t).body), &sent); err != nil {
		t.Fatalf("request body: %v", err)
	}
	wantSent := map[string]any{"expectedInsertions": 1000.0, "fpp": 0.001, "validPeriodAfterCreate": 0.0, "scalable": false}
	if !mapsEqual(sent, wantSent) {
		t.Errorf("request body = %v, want %v", sent, wantSent)
	}
	if f.ExpectedInsertions != 1000 || f.FPP != 0.001 || f.Scalable || f.Expiration != "" {
		t.Errorf("filter = %+v, want 1000, 0.001, fixed, no expiration", f)
	}

	// A second create answers the existing filter; Overwrite replaces it.
	f, created, err = c.Create(ctx, "fixed", client.CreateOptions{ExpectedInsertions: new(uint64(2000))})
	if err != nil || created || f.ExpectedInsertions != 1000 {
		t.Fatalf("Create(fixed) again = %+v, created %v, %v; want the existing filter, not created", f, created, err)
	}
	f, created, err = c.Create(ctx, "fixed", client.CreateOptions{ExpectedInsertions: new(uint64(2000)), Overwrite: true})
	if err != nil || !created || f.ExpectedInsertions != 2000 {
		t.Fatalf("Create(fixed, overwrite) = %+v, created %v, %v; want a new filter of 2000", f, created, err)
	}

	all := client.CreateOptions{
		ExpectedInsertions: new(uint64(10)), FPP: new(0.1), ValidPeriodAfterCreate: new(int64(60)),
		ValidPeriodAfterAccess: new(int64(30)), Overwrite: true, Scalable: new(true), Growth: new(uint(4)),
		Tightening: new(0.8),
	}
	f, _, err = c.Create(ctx, "all", all)
	if err != nil {
		t.Fatalf("Create(all): %v", err)
	}
	sent = nil
	if err := json.Unmarshal([]byte(d.lastRequest(t).body), &sent); err != nil {
		t.Fatalf("request body: %v", err)
	}
	wantSent = map[string]any{"expectedInsertions": 10.0, "fpp": 0.1, "validPeriodAfterCreate": 60.0,
		"validPeriodAfterAccess": 30.0, "overwrite": true, "scalable": true, "growth": 4.0, "tightening": 0.8}
	if !mapsEqual(sent, wantSent) {
		t.Errorf("request body = %v, want %v", sent, wantSent)
	}
	if f.ValidPeriodAfterAccess != 30 || f.Growth != 4 || f.Tightening != 0.8 {
		t.Errorf("filter = %+v, want validPeriodAfterAccess 30, growth 4, tightening 0.8", f)
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestGetListDelete(t *testing.T) {
	d, c := startDataPlane(t, nil)
	ctx := t.Context()

	names, err := c.List(ctx)
	if err != nil || len(names) != 0 {
		t.Fatalf("List of an empty server = %q, %v; want none", names, err)
	}
	for _, name := range []string{"b", "c", "a"} {
		if _, _, err := c.Create(ctx, name, client.CreateOptions{ExpectedInsertions: new(uint64(100))}); err != nil {
			t.Fatalf("Create(%s): %v", name, err)
		}
	}
	if names, err = c.List(ctx); err != nil || !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("List = %q, %v; want [a b c]", names, err)
	}
	if _, _, err := c.Create(ctx, "p", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), Partitions: new(4)}); err != nil {
		t.Fatalf("Create(p): %v", err)
	}
	// Details travel with a consistency level's query too.
	listed, err := c.At(wire.ConsistencyOne).ListDetails(ctx)
	if err != nil || len(listed) != 4 || listed[0].Name != "a" || listed[3].Name != "p" {
		t.Fatalf("ListDetails = %+v, %v; want a, b, c and p", listed, err)
	}
	if a := listed[0]; a.ExpectedInsertions != 100 || a.Partitions != 1 || a.PartitionsHeld != 1 || a.Created == "" {
		t.Errorf("a listed as %+v, want 100 insertions, one partition held, a creation time", a)
	}
	if p := listed[3]; p.ExpectedInsertions != 1000 || p.Partitions != 4 || p.PartitionsHeld != 4 {
		t.Errorf("p listed as %+v, want 1000 insertions in 4 partitions, all held by a pod alone", p)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+wire.ListPath+"?details=maybe", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `must be true or false, got \"maybe\"`) {
		t.Errorf("details=maybe: %d %s, want 400 saying what details takes", resp.StatusCode, body)
	}
	if err := c.Delete(ctx, "p"); err != nil {
		t.Fatal(err)
	}

	f, err := c.Get(ctx, "b")
	if err != nil || f.Name != "b" || f.ExpectedInsertions != 100 || f.Layers != 1 {
		t.Fatalf("Get(b) = %+v, %v; want filter b of 100 with one layer", f, err)
	}

	if err := c.Delete(ctx, "b"); err != nil {
		t.Fatalf("Delete(b): %v", err)
	}
	if err := c.Delete(ctx, "b"); err != nil {
		t.Fatalf("Delete(b) when absent: %v, want success", err)
	}
	_, err = c.Get(ctx, "b")
	e := apiError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
	if !client.IsNotFound(err) || client.IsBadParameter(err) {
		t.Errorf("IsNotFound(%v) = false or IsBadParameter = true", err)
	}
	if !strings.Contains(e.Message, `"b"`) || !strings.Contains(err.Error(), "404") {
		t.Errorf("error %q (message %q) should name the filter and the status", err, e.Message)
	}
	if names, err = c.List(ctx); err != nil || !slices.Equal(names, []string{"a", "c"}) {
		t.Fatalf("List after delete = %q, %v; want [a c]", names, err)
	}

	// "list" is the listing, never a filter: the client refuses rather than decode the listing.
	if _, err := c.Get(ctx, "list"); err == nil {
		t.Error(`Get("list") succeeded, want an error`)
	}
}

func TestValues(t *testing.T) {
	_, c := startDataPlane(t, nil)
	ctx := t.Context()
	if _, _, err := c.Create(ctx, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-6)}); err != nil {
		t.Fatalf("Create: %v", err)
	}

	check := func(value string, want bool) {
		t.Helper()
		if got, err := c.Check(ctx, "f", value); err != nil || got != want {
			t.Fatalf("Check(%q) = %v, %v; want %v", value, got, err, want)
		}
	}
	check("a", false)
	if got, err := c.CheckAndSet(ctx, "f", "a"); err != nil || got {
		t.Fatalf("CheckAndSet(a) = %v, %v; want false (new)", got, err)
	}
	if got, err := c.CheckAndSet(ctx, "f", "a"); err != nil || !got {
		t.Fatalf("CheckAndSet(a) again = %v, %v; want true", got, err)
	}
	check("a", true)

	if err := c.Set(ctx, "f", "b"); err != nil {
		t.Fatalf("Set(b): %v", err)
	}
	check("b", true)
	if err := c.MultiSet(ctx, "f", []string{"c", "d"}); err != nil {
		t.Fatalf("MultiSet: %v", err)
	}

	got, err := c.MultiCheck(ctx, "f", []string{"a", "b", "c", "d", "e"})
	if want := []bool{true, true, true, true, false}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("MultiCheck = %v, %v; want %v", got, err, want)
	}
	got, err = c.MultiCheckAndSet(ctx, "f", []string{"a", "e", "x", "e"})
	if want := []bool{true, false, false, true}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("MultiCheckAndSet = %v, %v; want %v", got, err, want)
	}

	// An empty batch is a valid request (not a missing field) and answers nothing.
	if got, err = c.MultiCheck(ctx, "f", nil); err != nil || len(got) != 0 {
		t.Fatalf("MultiCheck(nil) = %v, %v; want no answers", got, err)
	}
	if err := c.MultiSet(ctx, "f", nil); err != nil {
		t.Fatalf("MultiSet(nil): %v", err)
	}

	f, err := c.Get(ctx, "f")
	if err != nil || f.Items != 6 {
		t.Fatalf("Get = %+v, %v; want 6 items (a b c d e x)", f, err)
	}
}

// Every value method answers 404 for a missing filter, decoded as *client.Error.
func TestValueMethodsOnMissingFilter(t *testing.T) {
	_, c := startDataPlane(t, nil)
	ctx := t.Context()
	calls := map[string]func() error{
		"Check":            func() error { _, err := c.Check(ctx, "missing", "v"); return err },
		"MultiCheck":       func() error { _, err := c.MultiCheck(ctx, "missing", []string{"v"}); return err },
		"CheckAndSet":      func() error { _, err := c.CheckAndSet(ctx, "missing", "v"); return err },
		"MultiCheckAndSet": func() error { _, err := c.MultiCheckAndSet(ctx, "missing", []string{"v"}); return err },
		"Set":              func() error { return c.Set(ctx, "missing", "v") },
		"MultiSet":         func() error { return c.MultiSet(ctx, "missing", []string{"v"}) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			apiError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
			if !client.IsNotFound(err) {
				t.Errorf("IsNotFound(%v) = false", err)
			}
		})
	}
}

func TestErrorDecoding(t *testing.T) {
	_, c := startDataPlane(t, func(cfg *config.Config) {
		cfg.MaxHTTPRequestLength = 1024
		cfg.MaxTotalBytes = 64 << 10
	})
	ctx := t.Context()

	_, _, err := c.Create(ctx, "f", client.CreateOptions{FPP: new(1.5)})
	e := apiError(t, err, http.StatusBadRequest, wire.CodeBadParameter)
	if want := `invalid parameter: "fpp". expected: > 0 && < 1, actual: 1.5`; e.Message != want {
		t.Errorf("message = %q, want %q", e.Message, want)
	}
	if !client.IsBadParameter(err) || client.IsNotFound(err) {
		t.Errorf("IsBadParameter(%v) = false or IsNotFound = true", err)
	}
	// The helpers see through wrapping.
	if !client.IsBadParameter(errors.Join(errors.New("creating"), err)) {
		t.Error("IsBadParameter of a wrapped error = false")
	}

	// Names are escaped: a slash stays in the name instead of reaching another route.
	_, err = c.Check(ctx, "a/check", "v")
	e = apiError(t, err, http.StatusBadRequest, wire.CodeBadParameter)
	if !strings.Contains(e.Message, "a/check") && !strings.Contains(e.Message, "a%2Fcheck") {
		t.Errorf("message %q should name the invalid filter", e.Message)
	}
	_, err = c.Get(ctx, "a b")
	apiError(t, err, http.StatusBadRequest, wire.CodeBadParameter)

	if _, _, err := c.Create(ctx, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000))}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	err = c.MultiSet(ctx, "f", slices.Repeat([]string{"0123456789"}, 200))
	apiError(t, err, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge)
	if !client.IsBodyTooLarge(err) {
		t.Errorf("IsBodyTooLarge(%v) = false", err)
	}

	_, _, err = c.Create(ctx, "big", client.CreateOptions{ExpectedInsertions: new(uint64(100_000))})
	apiError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)
	if !client.IsInsufficientSpace(err) {
		t.Errorf("IsInsufficientSpace(%v) = false", err)
	}

	if client.IsNotFound(nil) || client.IsNotFound(errors.New("plain")) {
		t.Error("IsNotFound of nil or a plain error = true")
	}
}

// An answer that is not the API's error body (a proxy, a load balancer) still becomes an *Error,
// with code 0 and the start of the body as the message.
func TestErrorFromSomethingElse(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/bloomfilter/empty" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>\n")
	}))
	t.Cleanup(proxy.Close)
	c := client.New(proxy.URL)

	_, err := c.Get(t.Context(), "f")
	e := apiError(t, err, http.StatusBadGateway, 0)
	if e.Message != "<html>bad gateway</html>" {
		t.Errorf("message = %q, want the body", e.Message)
	}
	_, err = c.Get(t.Context(), "empty")
	e = apiError(t, err, http.StatusServiceUnavailable, 0)
	if e.Message != "Service Unavailable" {
		t.Errorf("message = %q, want the status text", e.Message)
	}
}

// Answers and error answers are read to the end, so one connection serves many calls.
func TestConnectionsAreReused(t *testing.T) {
	d, c := startDataPlane(t, nil)
	ctx := t.Context()
	if _, _, err := c.Create(ctx, "f", client.CreateOptions{ExpectedInsertions: new(uint64(100))}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for i := range 20 {
		if _, err := c.Get(ctx, "f"); err != nil {
			t.Fatalf("Get: %v", err)
		}
		if _, err := c.Get(ctx, "missing"); !client.IsNotFound(err) {
			t.Fatalf("Get(missing) = %v, want not found", err)
		}
		if _, err := c.Check(ctx, "f", strings.Repeat("v", i)); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	}
	if n := d.conns.Load(); n != 1 {
		t.Errorf("81 sequential calls opened %d connections, want 1", n)
	}
}

func TestWithHTTPClient(t *testing.T) {
	d, _ := startDataPlane(t, nil)
	var requests atomic.Int64
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		requests.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	c := client.New(d.URL, client.WithHTTPClient(hc))
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if requests.Load() != 1 {
		t.Errorf("the given *http.Client carried %d requests, want 1", requests.Load())
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestContextIsHonoured(t *testing.T) {
	_, c := startDataPlane(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ping with a cancelled context = %v, want context.Canceled", err)
	}
}

// An answer with bytes after the JSON value (here whitespace, which JSON allows) is still read
// to the end, so its connection serves the next call.
func TestConnectionsAreReusedAfterTrailingBytes(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "true"+strings.Repeat(" ", 32<<10))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := client.New(srv.URL)
	for range 10 {
		if present, err := c.Check(t.Context(), "f", "v"); err != nil || !present {
			t.Fatalf("Check = %v, %v; want true", present, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("10 sequential calls opened %d connections, want 1", n)
	}
}
