package run_test

import (
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// The background purge gives an expired filter's memory back: with room for one filter, a second
// fits once the first has expired and been purged.
func TestPurgeReleasesMemory(t *testing.T) {
	t.Parallel()
	const purgeInterval = 10 * time.Second
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.01)}
	tm := dataplane.NewTime()
	s := dataplane.StartAt(t, tm, func(cfg *config.Config) {
		cfg.PurgeInterval = purgeInterval
		cfg.MaxTotalBytes = 2000 + filter.FilterOverhead // one filter of 1000 at 1% takes about 1.4 KB, and its overhead
	})
	ctx := t.Context()
	expiring := opts
	expiring.ValidPeriodAfterCreate = new(int64(1))
	f := dataplane.Create(t, s, "expiring", expiring)
	if f.SizeBytes > 2000 || 2*f.SizeBytes <= 2000 {
		t.Fatalf("the filter takes %d bytes; the test needs room for one and not two", f.SizeBytes)
	}
	_, _, err := s.Client.Create(ctx, "next", opts)
	dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)

	// A purge before the expiration leaves the filter alone.
	tm.Clock.Advance(time.Second - time.Millisecond)
	tm.Ticker.Tick(t, purgeInterval)
	_, _, err = s.Client.Create(ctx, "next", opts)
	dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)

	tm.Clock.Advance(time.Millisecond)
	tm.Ticker.Tick(t, purgeInterval)
	if _, created, err := s.Client.Create(ctx, "next", opts); err != nil || !created {
		t.Fatalf("create in the purged filter's memory = created %v, %v; want a new filter", created, err)
	}
	if names, err := s.Client.List(ctx); err != nil || !slices.Equal(names, []string{"next"}) {
		t.Errorf("list = %q, %v; want [next]", names, err)
	}
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
	tm := dataplane.NewTime()
	ts, stop := dataplane.Run(t, dataplane.NewAt(t, tm, configure))
	t.Cleanup(func() { _ = stop() })
	dataplane.WaitUntilReady(t, ts)
	fs := dataplane.Scrape(t, ts.HTTP, ts.URL, "gzip")
	dataplane.WantValue(t, fs, 0, "bloomery_snapshots_total")
	dataplane.WantValue(t, fs, 0, "bloomery_recovery_filters")
	dataplane.WantValue(t, fs, 0, "bloomery_log_appended_records_total")

	dataplane.Create(t, ts, "kept", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), ValidPeriodAfterCreate: new(int64(0))})
	if err := ts.Client.MultiSet(t.Context(), "kept", []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	tm.Ticker.Tick(t, period)
	fs = dataplane.Scrape(t, ts.HTTP, ts.URL, "gzip")
	dataplane.WantValue(t, fs, 1, "bloomery_snapshots_total")
	dataplane.WantValue(t, fs, 2, "bloomery_log_appended_records_total") // the create and the multi-set
	if fsyncs := dataplane.Value(t, fs, "bloomery_log_fsync_duration_seconds"); fsyncs < 2 {
		t.Errorf("%v fsyncs observed under logSync: always, want one per write at least", fsyncs)
	}
	if size := dataplane.Value(t, fs, "bloomery_snapshot_last_size_bytes"); size <= 0 {
		t.Errorf("last snapshot size %v", size)
	}
	if at := dataplane.Value(t, fs, "bloomery_snapshot_last_success_timestamp_seconds"); time.Since(time.Unix(int64(at), 0)) > time.Minute {
		t.Errorf("last snapshot at %v, not just now", at)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A restart recovers the filter; the recovery shows.
	ts, stop = dataplane.Run(t, dataplane.NewAt(t, tm, configure))
	t.Cleanup(func() { _ = stop() })
	dataplane.WaitUntilReady(t, ts)
	fs = dataplane.Scrape(t, ts.HTTP, ts.URL, "gzip")
	dataplane.WantValue(t, fs, 1, "bloomery_recovery_filters")
	dataplane.WantValue(t, fs, 1, "bloomery_recovery_recovered_records") // the final snapshot holds it all
	dataplane.WantValue(t, fs, 0, "bloomery_recovery_skipped_records")
	if d := dataplane.Value(t, fs, "bloomery_recovery_duration_seconds"); d <= 0 {
		t.Errorf("recovery took %v s", d)
	}
	dataplane.WantValue(t, fs, 3, "bloomery_filter_items", "filter", "kept")
}

// fillAndStop runs a server on dir, creates a filter holding one value, and stops it.
func fillAndStop(t *testing.T, dir string) {
	t.Helper()
	ts, stop := dataplane.Run(t, dataplane.New(t, func(cfg *config.Config) { cfg.DataDir = dir }))
	dataplane.WaitUntilReady(t, ts)
	dataplane.Create(t, ts, "kept", client.CreateOptions{ValidPeriodAfterCreate: new(int64(0))})
	if err := ts.Client.Set(t.Context(), "kept", "value"); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// startHeldInRecovery runs a data plane on dir whose recovery waits until release is called (at
// the latest when the test ends), and returns once recovery has begun.
func startHeldInRecovery(t *testing.T, dir string) (ts *dataplane.Server, release func()) {
	t.Helper()
	srv := dataplane.New(t, func(cfg *config.Config) { cfg.DataDir = dir })
	entered, held := make(chan struct{}), make(chan struct{})
	run.SetBeforeRecovery(srv, func() { close(entered); <-held })
	ts, stop := dataplane.Run(t, srv)
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

	if r := ts.Send(t, http.MethodGet, "/healthz", ""); r.Status != http.StatusOK {
		t.Errorf("/healthz while recovering: %d %s, want 200", r.Status, r.Body)
	}
	// filter-service's ping says "ready to serve": not while the filters load.
	if msg := ts.Send(t, http.MethodGet, "/v1/ping", "").WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "recovering") {
		t.Errorf("/v1/ping while recovering says %q", msg)
	}
	if msg := ts.Send(t, http.MethodGet, "/readyz", "").WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "recovering") {
		t.Errorf("/readyz while recovering says %q", msg)
	}
	for _, call := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/bloomfilter/kept", ""},
		{http.MethodGet, "/v1/bloomfilter/list", ""},
		{http.MethodPost, "/v1/bloomfilter/kept/check", `{"value":"value"}`},
		{http.MethodPut, "/v1/bloomfilter/new", `{}`},
	} {
		r := ts.Send(t, call.method, call.path, call.body)
		if msg := r.WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.HasPrefix(msg, "recovering: ") {
			t.Errorf("%s %s while recovering says %q", call.method, call.path, msg)
		}
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s while recovering: no Retry-After", call.method, call.path)
		}
	}
	fs := dataplane.Scrape(t, ts.HTTP, ts.URL, "gzip")
	dataplane.WantValue(t, fs, 0, "bloomery_ready")
	if fs["bloomery_recovery_filters"] != nil {
		t.Error("recovery metrics before recovery finished")
	}

	release()
	dataplane.WaitUntilReady(t, ts)
	if present, err := ts.Client.Check(t.Context(), "kept", "value"); err != nil || !present {
		t.Errorf("after recovery: check = %v, %v; want the recovered value present", present, err)
	}
	fs = dataplane.Scrape(t, ts.HTTP, ts.URL, "gzip")
	dataplane.WantValue(t, fs, 1, "bloomery_ready")
	dataplane.WantValue(t, fs, 1, "bloomery_recovery_filters")
}

// A graceful shutdown turns /readyz to 503 first; the API goes on serving, new connections
// included, for the drain delay, closing each connection after its answer; only then does the
// server stop accepting.
func TestReadyzFailsBeforeTheServerStopsAccepting(t *testing.T) {
	t.Parallel()
	const drain = 3 * time.Second
	srv := dataplane.New(t, func(cfg *config.Config) {
		cfg.DataDir = t.TempDir()
		cfg.ShutdownDrainDelay = drain
	})
	ts, stop := dataplane.Run(t, srv)
	t.Cleanup(func() { _ = stop() })
	dataplane.WaitUntilReady(t, ts)
	dataplane.Create(t, ts, "f", client.CreateOptions{})

	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	await.True(t, 10*time.Second, "/readyz turning 503", func() bool {
		return ts.Send(t, http.MethodGet, "/readyz", "").Status == http.StatusServiceUnavailable
	})
	if msg := ts.Send(t, http.MethodGet, "/readyz", "").WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable); !strings.Contains(msg, "shutting down") {
		t.Errorf("/readyz while draining says %q", msg)
	}
	// Each answer closes its connection, so that a client's pool reconnects through the Service.
	pooled, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/v1/ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := ts.HTTP.Do(pooled); err != nil {
		t.Errorf("a request on the pool while draining: %v", err)
	} else {
		_ = resp.Body.Close()
		if !resp.Close {
			t.Errorf("an answer while draining keeps its connection open (status %d, Connection %q)", resp.StatusCode, resp.Header.Get("Connection"))
		}
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	freshServer := &dataplane.Server{URL: ts.URL, HTTP: fresh, Client: client.New(ts.URL, client.WithHTTPClient(fresh))}
	if _, err := freshServer.Client.Check(t.Context(), "f", "x"); err != nil {
		t.Errorf("a check on a new connection while draining: %v", err)
	}
	if r := freshServer.Send(t, http.MethodGet, "/healthz", ""); r.Status != http.StatusOK {
		t.Errorf("/healthz while draining: %d", r.Status)
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
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/healthz", nil)
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
	s := dataplane.Start(t, nil)
	open := func() float64 {
		return dataplane.Value(t, dataplane.Scrape(t, s.HTTP, s.URL, ""), "bloomery_http_open_connections")
	}
	base := open() // the scrapes' own keep-alive connection
	var conns []net.Conn
	for range 3 {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	await.True(t, 10*time.Second, "three more open connections", func() bool { return open() == base+3 })
	for _, c := range conns {
		_ = c.Close()
	}
	await.True(t, 10*time.Second, "the connections counted as closed", func() bool { return open() == base })
}
