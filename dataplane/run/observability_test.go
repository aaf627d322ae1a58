package run_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// scrape fetches /metrics with acceptEncoding ("" for none) through hc, checks the answer, and
// parses it.
func scrape(t *testing.T, hc *http.Client, url, acceptEncoding string) metricstest.Families {
	t.Helper()
	fs, _ := scrapeBody(t, hc, url, acceptEncoding)
	return fs
}

// scrapeBody is scrape that also returns the body as it came, compressed or not.
func scrapeBody(t *testing.T, hc *http.Client, url, acceptEncoding string) (metricstest.Families, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		// Set by hand, the transport leaves the body compressed, as a scraper receives it.
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	fs, err := metricstest.Parse(body, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return fs, body
}

func value(t *testing.T, fs metricstest.Families, name string, labels ...string) float64 {
	t.Helper()
	v, ok := fs.Value(name, labels...)
	if !ok {
		t.Fatalf("%s%v: no single sample", name, labels)
	}
	return v
}

func wantValue(t *testing.T, fs metricstest.Families, want float64, name string, labels ...string) {
	t.Helper()
	if got := value(t, fs, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// Requests show in the metrics by route template, method and status, and the filters by name.
func TestMetricsFollowRequests(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, func(cfg *config.Config) { cfg.MetricsMaxLabelledFilters = 2 })
	for _, name := range []string{"c", "b", "a"} {
		create(t, s, name, client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	}
	ctx := t.Context()
	for range 3 {
		if _, err := s.client.Check(ctx, "a", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.MultiCheckAndSet(ctx, "b", []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.client.Check(ctx, "missing", "x")
	wantAPIError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
	s.send(t, http.MethodGet, "/no/such/thing", "").wantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)

	fs := scrape(t, s.http, s.url, "gzip")
	const check = "/v1/bloomfilter/:name/check"
	wantValue(t, fs, 3, "bloomery_http_requests_total", "route", "/v1/bloomfilter/:name", "method", "PUT", "code", "201")
	wantValue(t, fs, 3, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "200")
	wantValue(t, fs, 1, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "404")
	wantValue(t, fs, 1, "bloomery_http_requests_total", "route", "unmatched", "method", "GET", "code", "404")
	wantValue(t, fs, 4, "bloomery_http_request_duration_seconds", "route", check, "method", "POST")
	// The scrape itself is the one request in flight.
	wantValue(t, fs, 1, "bloomery_http_requests_in_flight")
	wantValue(t, fs, 3, "bloomery_filters")
	wantValue(t, fs, 1, "bloomery_filters_unlabelled")
	wantValue(t, fs, 2, "bloomery_filters_items")
	wantValue(t, fs, 3, "bloomery_filters_checked_keys_total")
	wantValue(t, fs, 2, "bloomery_filters_set_keys_total")
	wantValue(t, fs, 3, "bloomery_filter_checked_keys_total", "filter", "a")
	wantValue(t, fs, 2, "bloomery_filter_set_keys_total", "filter", "b")
	wantValue(t, fs, 1, "bloomery_filter_layers", "filter", "b")
	wantValue(t, fs, float64(get(t, s, "b").SizeBytes), "bloomery_filter_bytes", "filter", "b")
	if got := fs.LabelValues("bloomery_filter_items", "filter"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("labelled filters %v, want a and b (metricsMaxLabelledFilters: 2)", got)
	}
	if fill := value(t, fs, "bloomery_filter_fill_ratio", "filter", "b"); fill <= 0 || fill >= 0.01 {
		t.Errorf("fill ratio of b, 2 keys of 1000: %v", fill)
	}
	wantValue(t, fs, 1, "bloomery_ready")
	if fs["go_goroutines"] == nil || fs["process_cpu_seconds_total"] == nil {
		t.Error("the Go runtime and process metrics are missing")
	}

	// More traffic, a later scrape, higher numbers.
	if _, err := s.client.Check(ctx, "a", "y"); err != nil {
		t.Fatal(err)
	}
	if err := s.client.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	fs = scrape(t, s.http, s.url, "")
	wantValue(t, fs, 4, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "200")
	wantValue(t, fs, 2, "bloomery_filters")
	wantValue(t, fs, 4, "bloomery_filters_checked_keys_total") // a is gone; its checks are not
	if got := fs.LabelValues("bloomery_filter_items", "filter"); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("labelled filters after deleting a: %v, want b and c", got)
	}
}

// 100 scrapers asking for gzip at the same moment, as Prometheus replicas and federations do,
// each get a whole exposition, and the encodings counter accounts for every one: each encoding
// served at least one of them, and those that report the same encoding got the very same bytes.
// How many scrapes a wave gathers depends on how they overlap, that is on the machine: the
// handler's own tests hold a wave open to check that those arriving meanwhile share it, and
// BenchmarkConcurrentGzipScrapes (dataplane/metrics) measures what sharing saves.
func TestConcurrentGzipScrapesAreWholeAndCounted(t *testing.T) {
	t.Parallel()
	// A hundred scrapes at once under the race detector, on a busy machine, can take longer than
	// the default write timeout; the test is not about that timeout.
	s := runServer(t, func(cfg *config.Config) { cfg.RequestTimeout = time.Minute })
	for i := range 100 {
		create(t, s, "filter-"+string(rune('a'+i/26))+string(rune('a'+i%26)), client.CreateOptions{ExpectedInsertions: new(uint64(100))})
	}
	const scrapers = 100
	// One connection per scraper, opened beforehand, so that the scrapes start together rather
	// than as fast as connections can be set up.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: scrapers, MaxConnsPerHost: scrapers}}
	t.Cleanup(hc.CloseIdleConnections)
	var warm sync.WaitGroup
	for range scrapers {
		warm.Go(func() { scrape(t, hc, s.url, "gzip") })
	}
	warm.Wait()
	encoding := func(fs metricstest.Families) float64 {
		return value(t, fs, "bloomery_metrics_encodings_total", "format", "text", "encoding", "gzip")
	}
	before := encoding(scrape(t, hc, s.url, "gzip"))

	release := make(chan struct{})
	results := make([]metricstest.Families, scrapers)
	bodies := make([][]byte, scrapers)
	var wg sync.WaitGroup
	for i := range scrapers {
		wg.Go(func() {
			<-release
			results[i], bodies[i] = scrapeBody(t, hc, s.url, "gzip")
		})
	}
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	after := encoding(scrape(t, hc, s.url, "gzip"))
	// The scrape that read "after" encoded once more.
	encodings := int(after - before - 1)

	// An exposition counts the encoding that produced it, before gathering. Two waves of one
	// format and encoding never produce at the same time, so the count names the wave.
	waves := map[float64][]byte{}
	for i, fs := range results {
		if v, ok := fs.Value("bloomery_filters"); !ok || v != 100 {
			t.Fatalf("scrape %d: bloomery_filters = %v, %v; want 100", i, v, ok)
		}
		n := encoding(fs)
		if n <= before || n >= after {
			t.Fatalf("scrape %d reports encoding %v, not one of those between %v and %v", i, n, before, after)
		}
		if body, ok := waves[n]; !ok {
			waves[n] = bodies[i]
		} else if !bytes.Equal(body, bodies[i]) {
			t.Errorf("scrape %d: other bytes than another scrape of encoding %v", i, n)
		}
	}
	if len(waves) != encodings {
		t.Errorf("%d encodings for %d concurrent scrapes, but their answers come from %d", encodings, scrapers, len(waves))
	}
	t.Logf("%d concurrent gzip scrapes, %d encodings", scrapers, encodings)
}

// Scrapes one after another never share: each one sees the requests made before it.
func TestSpacedScrapesSeeFreshValues(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, nil)
	var last float64
	for i := range 5 {
		if err := s.client.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		fs := scrape(t, s.http, s.url, "gzip")
		wantValue(t, fs, float64(i+1), "bloomery_http_requests_total", "route", "/v1/ping", "method", "GET", "code", "200")
		encodings := value(t, fs, "bloomery_metrics_encodings_total", "format", "text", "encoding", "gzip")
		if encodings != last+1 {
			t.Errorf("scrape %d: %v encodings after %v: this scrape was not encoded afresh", i, encodings, last)
		}
		last = encodings
	}
}

// OpenMetrics is served to those who ask for it, such as Prometheus.
func TestMetricsInOpenMetrics(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, nil)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3")
	req.Header.Set("Accept-Encoding", "identity") // else the transport asks for gzip itself
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ct := resp.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/openmetrics-text; version=1.0.0") {
		t.Fatalf("Content-Type %q, want OpenMetrics 1.0.0", ct)
	}
	fs, err := metricstest.Parse(body, ct, resp.Header.Get("Content-Encoding"))
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, fs, 1, "bloomery_metrics_encodings_total", "format", "openmetrics", "encoding", "identity")
}

// Snapshots, the log and recovery show in the metrics of a server with persistence.
func TestPersistenceMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const period = 20 * time.Second
	configure := func(cfg *config.Config) {
		cfg.DataDir = dir
		cfg.LogSync = config.LogSyncAlways
		cfg.TriggerPersistenceCriteria = []config.TriggerPersistenceCriterion{{Period: period, UpdatesMoreThan: 2}}
	}
	tm := newFakeTime()
	ts, stop := startRun(t, newServerAt(t, tm, configure))
	t.Cleanup(func() { _ = stop() })
	waitUntilReady(t, ts)
	fs := scrape(t, ts.http, ts.url, "gzip")
	wantValue(t, fs, 0, "bloomery_snapshots_total")
	wantValue(t, fs, 0, "bloomery_recovery_filters")
	wantValue(t, fs, 0, "bloomery_log_appended_records_total")

	create(t, ts, "kept", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), ValidPeriodAfterCreate: new(int64(0))})
	if err := ts.client.MultiSet(t.Context(), "kept", []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	tm.ticker.Tick(t, period)
	fs = scrape(t, ts.http, ts.url, "gzip")
	wantValue(t, fs, 1, "bloomery_snapshots_total")
	wantValue(t, fs, 2, "bloomery_log_appended_records_total") // the create and the multi-set
	if fsyncs := value(t, fs, "bloomery_log_fsync_duration_seconds"); fsyncs < 2 {
		t.Errorf("%v fsyncs observed under logSync: always, want one per write at least", fsyncs)
	}
	if size := value(t, fs, "bloomery_snapshot_last_size_bytes"); size <= 0 {
		t.Errorf("last snapshot size %v", size)
	}
	if at := value(t, fs, "bloomery_snapshot_last_success_timestamp_seconds"); time.Since(time.Unix(int64(at), 0)) > time.Minute {
		t.Errorf("last snapshot at %v, not just now", at)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A restart recovers the filter; the recovery shows.
	ts, stop = startRun(t, newServerAt(t, tm, configure))
	t.Cleanup(func() { _ = stop() })
	waitUntilReady(t, ts)
	fs = scrape(t, ts.http, ts.url, "gzip")
	wantValue(t, fs, 1, "bloomery_recovery_filters")
	wantValue(t, fs, 1, "bloomery_recovery_recovered_records") // the final snapshot holds it all
	wantValue(t, fs, 0, "bloomery_recovery_skipped_records")
	if d := value(t, fs, "bloomery_recovery_duration_seconds"); d <= 0 {
		t.Errorf("recovery took %v s", d)
	}
	wantValue(t, fs, 3, "bloomery_filter_items", "filter", "kept")
}

// fillAndStop runs a server on dir, creates a filter holding one value, and stops it.
func fillAndStop(t *testing.T, dir string) {
	t.Helper()
	ts, stop := startRun(t, newServer(t, func(cfg *config.Config) { cfg.DataDir = dir }))
	waitUntilReady(t, ts)
	create(t, ts, "kept", client.CreateOptions{ValidPeriodAfterCreate: new(int64(0))})
	if err := ts.client.Set(t.Context(), "kept", "value"); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// startHeldInRecovery runs a data plane on dir whose recovery waits until release is called (at
// the latest when the test ends), and returns once recovery has begun.
func startHeldInRecovery(t *testing.T, dir string) (ts *testServer, release func()) {
	t.Helper()
	srv := newServer(t, func(cfg *config.Config) { cfg.DataDir = dir })
	entered, held := make(chan struct{}), make(chan struct{})
	run.SetBeforeRecovery(srv, func() { close(entered); <-held })
	ts, stop := startRun(t, srv)
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(func() {
		release()
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("recovery did not start")
	}
	return ts, release
}

// The server accepts HTTP while it recovers: liveness and metrics answer, while readiness and the
// filter API answer 503 (code 7) until the filters are back.
func TestReadyzWhileRecovering(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillAndStop(t, dir)

	ts, release := startHeldInRecovery(t, dir)

	if r := ts.send(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("/healthz while recovering: %d %s, want 200", r.status, r.body)
	}
	// filter-service's ping says "ready to serve": not while the filters load.
	if msg := ts.send(t, http.MethodGet, "/v1/ping", "").wantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "recovering") {
		t.Errorf("/v1/ping while recovering says %q", msg)
	}
	if msg := ts.send(t, http.MethodGet, "/readyz", "").wantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "recovering") {
		t.Errorf("/readyz while recovering says %q", msg)
	}
	for _, call := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/bloomfilter/kept", ""},
		{http.MethodGet, "/v1/bloomfilter/list", ""},
		{http.MethodPost, "/v1/bloomfilter/kept/check", `{"value":"value"}`},
		{http.MethodPut, "/v1/bloomfilter/new", `{}`},
	} {
		r := ts.send(t, call.method, call.path, call.body)
		if msg := r.wantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.HasPrefix(msg, "recovering: ") {
			t.Errorf("%s %s while recovering says %q", call.method, call.path, msg)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s while recovering: no Retry-After", call.method, call.path)
		}
	}
	fs := scrape(t, ts.http, ts.url, "gzip")
	wantValue(t, fs, 0, "bloomery_ready")
	if fs["bloomery_recovery_filters"] != nil {
		t.Error("recovery metrics before recovery finished")
	}

	release()
	waitUntilReady(t, ts)
	if present, err := ts.client.Check(t.Context(), "kept", "value"); err != nil || !present {
		t.Errorf("after recovery: check = %v, %v; want the recovered value present", present, err)
	}
	fs = scrape(t, ts.http, ts.url, "gzip")
	wantValue(t, fs, 1, "bloomery_ready")
	wantValue(t, fs, 1, "bloomery_recovery_filters")
}

// A graceful shutdown turns /readyz to 503 first; the API goes on serving, new connections
// included, for the drain delay; only then does the server stop accepting.
func TestReadyzFailsBeforeTheServerStopsAccepting(t *testing.T) {
	t.Parallel()
	const drain = 3 * time.Second
	srv := newServer(t, func(cfg *config.Config) {
		cfg.DataDir = t.TempDir()
		cfg.ShutdownDrainDelay = drain
	})
	ts, stop := startRun(t, srv)
	t.Cleanup(func() { _ = stop() })
	waitUntilReady(t, ts)
	create(t, ts, "f", client.CreateOptions{})

	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	eventually(t, 10*time.Second, time.Millisecond, "/readyz turning 503", func() bool {
		return ts.send(t, http.MethodGet, "/readyz", "").status == http.StatusServiceUnavailable
	})
	if msg := ts.send(t, http.MethodGet, "/readyz", "").wantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "shutting down") {
		t.Errorf("/readyz while draining says %q", msg)
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	freshServer := &testServer{url: ts.url, http: fresh, client: client.New(ts.url, client.WithHTTPClient(fresh))}
	if _, err := freshServer.client.Check(t.Context(), "f", "x"); err != nil {
		t.Errorf("a check on a new connection while draining: %v", err)
	}
	if r := freshServer.send(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("/healthz while draining: %d", r.status)
	}

	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(drain + 30*time.Second):
		t.Fatal("Run did not return")
	}
	if took := time.Since(began); took < drain {
		t.Errorf("Run returned %v after the cancellation, within the drain delay of %v", took, drain)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := fresh.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Errorf("the server still answers after Run returned: %d", resp.StatusCode)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Run returned: %v, want connection refused", err)
	}
}

// Open connections are counted from the HTTP server's connection states.
func TestOpenConnectionsMetric(t *testing.T) {
	t.Parallel()
	s := runServer(t, nil)
	open := func() float64 { return value(t, scrape(t, s.http, s.url, ""), "bloomery_http_open_connections") }
	base := open() // the scrapes' own keep-alive connection
	var conns []net.Conn
	for range 3 {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	eventually(t, 10*time.Second, time.Millisecond, "three more open connections", func() bool { return open() == base+3 })
	for _, c := range conns {
		_ = c.Close()
	}
	eventually(t, 10*time.Second, time.Millisecond, "the connections counted as closed", func() bool { return open() == base })
}

// syncBuffer collects log output written from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the JSON log lines with message msg.
func (b *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			continue
		}
		if fields["msg"] == msg {
			out = append(out, fields)
		}
	}
	return out
}

// At debug level every request has one access-log line; at info level none.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			logs := &syncBuffer{}
			srv, err := run.New(config.Default(), slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level})))
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv.ClientHandler())
			t.Cleanup(hs.Close)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/v1/bloomfilter/nothing/check", strings.NewReader(`{"value":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request-ID", "req-42")
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// Read to the end, so that the connection serves the next request.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if level == slog.LevelInfo {
				// The next request's line would come after this one's, were there any.
				if r := (&testServer{url: hs.URL, http: hs.Client()}).send(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
					t.Fatal(r.status)
				}
				if got := logs.lines(t, "Request"); len(got) != 0 {
					t.Errorf("access-log lines at info level: %v", got)
				}
				return
			}
			eventually(t, 10*time.Second, time.Millisecond, "the access-log line", func() bool { return len(logs.lines(t, "Request")) == 1 })
			line := logs.lines(t, "Request")[0]
			for key, want := range map[string]any{
				"level": "DEBUG", "method": "POST", "route": "/v1/bloomfilter/:name/check",
				"path": "/v1/bloomfilter/nothing/check", "status": float64(404), "requestId": "req-42",
			} {
				if line[key] != want {
					t.Errorf("access log %s = %v, want %v (line %v)", key, line[key], want, line)
				}
			}
			if d, ok := line["duration"].(float64); !ok || d <= 0 {
				t.Errorf("access log duration %v", line["duration"])
			}
		})
	}
}

// Every answer carries a request ID, the client's or a new one; a panic is answered with a 500,
// logged with its stack and counted; http.ErrAbortHandler aborts the connection, as net/http
// means it to, and leaves no request counted in flight.
func TestRequestIDsAndPanics(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	srv, err := run.New(config.Default(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	run.AddRoute(srv, "/test/panic", func(echo.Context) error { panic("boom") })
	run.AddRoute(srv, "/test/abort", func(echo.Context) error { panic(http.ErrAbortHandler) })
	hs := httptest.NewServer(srv.ClientHandler())
	t.Cleanup(hs.Close)
	s := &testServer{url: hs.URL, http: hs.Client()}

	first, second := s.send(t, http.MethodGet, "/healthz", ""), s.send(t, http.MethodGet, "/healthz", "")
	a, b := first.header.Get(echo.HeaderXRequestID), second.header.Get(echo.HeaderXRequestID)
	if a == "" || b == "" || a == b {
		t.Errorf("request IDs %q and %q: want two different ones", a, b)
	}

	r := s.send(t, http.MethodGet, "/test/panic", "")
	if msg := r.wantError(t, http.StatusInternalServerError, wire.CodeInternal); msg != "internal error: boom" {
		t.Errorf("panic answered %q", msg)
	}
	if r.header.Get(echo.HeaderXRequestID) == "" {
		t.Error("the 500 has no request ID")
	}
	lines := logs.lines(t, "Recovered from panic")
	if len(lines) != 1 || lines[0]["error"] != "boom" || !strings.Contains(fmt.Sprint(lines[0]["stack"]), "TestRequestIDsAndPanics") {
		t.Errorf("log lines %v: want one naming the error, with the stack of the panicking handler", lines)
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/test/abort", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Errorf("http.ErrAbortHandler answered %d, want the connection aborted", resp.StatusCode)
	}

	fs := scrape(t, s.http, s.url, "")
	wantValue(t, fs, 1, "bloomery_http_requests_total", "route", "unmatched", "method", "GET", "code", "500")
	wantValue(t, fs, 1, "bloomery_http_requests_in_flight") // the scrape
}
