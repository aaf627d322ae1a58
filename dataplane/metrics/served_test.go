package metrics_test

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// Requests show in the metrics by route template, method and status, and the filters by name.
func TestMetricsFollowRequests(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MetricsMaxLabelledFilters = 2 })
	for _, name := range []string{"c", "b", "a"} {
		dataplane.Create(t, s, name, client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	}
	ctx := t.Context()
	for range 3 {
		if _, err := s.Client.Check(ctx, "a", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.MultiCheckAndSet(ctx, "b", []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Client.Check(ctx, "missing", "x")
	dataplane.WantAPIError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
	s.Send(t, http.MethodGet, "/no/such/thing", "").WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)

	fs := dataplane.Scrape(t, s.HTTP, s.URL, "gzip")
	const check = "/v1/bloomfilter/:name/check"
	dataplane.WantValue(t, fs, 3, "bloomery_http_requests_total", "route", "/v1/bloomfilter/:name", "method", "PUT", "code", "201")
	dataplane.WantValue(t, fs, 3, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "200")
	dataplane.WantValue(t, fs, 1, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "404")
	dataplane.WantValue(t, fs, 1, "bloomery_http_requests_total", "route", "unmatched", "method", "GET", "code", "404")
	dataplane.WantValue(t, fs, 4, "bloomery_http_request_duration_seconds", "route", check, "method", "POST")
	// The scrape itself is the one request in flight.
	dataplane.WantValue(t, fs, 1, "bloomery_http_requests_in_flight")
	dataplane.WantValue(t, fs, 3, "bloomery_filters")
	dataplane.WantValue(t, fs, 1, "bloomery_filters_unlabelled")
	dataplane.WantValue(t, fs, 2, "bloomery_filters_items")
	dataplane.WantValue(t, fs, 3, "bloomery_filters_checked_keys_total")
	dataplane.WantValue(t, fs, 2, "bloomery_filters_set_keys_total")
	dataplane.WantValue(t, fs, 3, "bloomery_filter_checked_keys_total", "filter", "a")
	dataplane.WantValue(t, fs, 2, "bloomery_filter_set_keys_total", "filter", "b")
	dataplane.WantValue(t, fs, 1, "bloomery_filter_layers", "filter", "b")
	dataplane.WantValue(t, fs, float64(dataplane.Get(t, s, "b").SizeBytes), "bloomery_filter_bytes", "filter", "b")
	if got := fs.LabelValues("bloomery_filter_items", "filter"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("labelled filters %v, want a and b (metricsMaxLabelledFilters: 2)", got)
	}
	if fill := dataplane.Value(t, fs, "bloomery_filter_fill_ratio", "filter", "b"); fill <= 0 || fill >= 0.01 {
		t.Errorf("fill ratio of b, 2 keys of 1000: %v", fill)
	}
	dataplane.WantValue(t, fs, 1, "bloomery_ready")
	if fs["go_goroutines"] == nil || fs["process_cpu_seconds_total"] == nil {
		t.Error("the Go runtime and process metrics are missing")
	}

	// More traffic, a later scrape, higher numbers.
	if _, err := s.Client.Check(ctx, "a", "y"); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	fs = dataplane.Scrape(t, s.HTTP, s.URL, "")
	dataplane.WantValue(t, fs, 4, "bloomery_http_requests_total", "route", check, "method", "POST", "code", "200")
	dataplane.WantValue(t, fs, 2, "bloomery_filters")
	dataplane.WantValue(t, fs, 4, "bloomery_filters_checked_keys_total") // a is gone; its checks are not
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
	s := dataplane.Start(t, func(cfg *config.Config) { cfg.RequestTimeout = time.Minute })
	for i := range 100 {
		dataplane.Create(t, s, "filter-"+string(rune('a'+i/26))+string(rune('a'+i%26)), client.CreateOptions{ExpectedInsertions: new(uint64(100))})
	}
	const scrapers = 100
	// One connection per scraper, opened beforehand, so that the scrapes start together rather
	// than as fast as connections can be set up.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: scrapers, MaxConnsPerHost: scrapers}}
	t.Cleanup(hc.CloseIdleConnections)
	var warm sync.WaitGroup
	for range scrapers {
		warm.Go(func() { dataplane.Scrape(t, hc, s.URL, "gzip") })
	}
	warm.Wait()
	encoding := func(fs metricstest.Families) float64 {
		return dataplane.Value(t, fs, "bloomery_metrics_encodings_total", "format", "text", "encoding", "gzip")
	}
	before := encoding(dataplane.Scrape(t, hc, s.URL, "gzip"))

	release := make(chan struct{})
	results := make([]metricstest.Families, scrapers)
	bodies := make([][]byte, scrapers)
	var wg sync.WaitGroup
	for i := range scrapers {
		wg.Go(func() {
			<-release
			results[i], bodies[i] = dataplane.ScrapeBody(t, hc, s.URL, "gzip")
		})
	}
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	after := encoding(dataplane.Scrape(t, hc, s.URL, "gzip"))
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
	s := dataplane.Handlers(t, nil)
	var last float64
	for i := range 5 {
		if err := s.Client.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		fs := dataplane.Scrape(t, s.HTTP, s.URL, "gzip")
		dataplane.WantValue(t, fs, float64(i+1), "bloomery_http_requests_total", "route", "/v1/ping", "method", "GET", "code", "200")
		encodings := dataplane.Value(t, fs, "bloomery_metrics_encodings_total", "format", "text", "encoding", "gzip")
		if encodings != last+1 {
			t.Errorf("scrape %d: %v encodings after %v: this scrape was not encoded afresh", i, encodings, last)
		}
		last = encodings
	}
}

// OpenMetrics is served to those who ask for it, such as Prometheus.
func TestMetricsInOpenMetrics(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3")
	req.Header.Set("Accept-Encoding", "identity") // else the transport asks for gzip itself
	resp, err := s.HTTP.Do(req)
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
	dataplane.WantValue(t, fs, 1, "bloomery_metrics_encodings_total", "format", "openmetrics", "encoding", "identity")
}
