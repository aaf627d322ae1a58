package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/internal/await"
)

// blockingCollector blocks its first Collect until released, so that a test can hold a wave open
// while other scrapes join it.
type blockingCollector struct {
	desc    *prometheus.Desc
	entered chan struct{} // closed when the first Collect starts
	release chan struct{}
	started atomic.Bool
}

func newBlockingCollector() *blockingCollector {
	return &blockingCollector{
		desc:    prometheus.NewDesc("test_blocking", "A gauge whose first collection waits.", nil, nil),
		entered: make(chan struct{}),
		release: make(chan struct{}),
	}
}

func (c *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	// Not a sync.Once: its other callers would wait for the first.
	if c.started.CompareAndSwap(false, true) {
		close(c.entered)
		<-c.release
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

func scrapeRequest(ctx context.Context, accept, acceptEncoding string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	if acceptEncoding != "" {
		r.Header.Set("Accept-Encoding", acceptEncoding)
	}
	return r
}

func encodings(t *testing.T, reg prometheus.Gatherer, format, encoding string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fs := metricstest.Families{}
	for _, mf := range families {
		fs[mf.GetName()] = mf
	}
	v, _ := fs.Value("bloomery_metrics_encodings_total", "format", format, "encoding", encoding)
	return v
}

// waiters answers whether n scrapes wait for the wave of key, for await.Until.
func waiters(h *Handler, key responseKey, n int) func() (bool, string) {
	return func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		waiting := 0
		if w := h.waves[key]; w != nil {
			waiting = w.waiters
		}
		return waiting == n, fmt.Sprintf("%d scrapes joined the wave, want %d", waiting, n)
	}
}

var gzipText = responseKey{format: "text/plain; version=0.0.4; charset=utf-8; escaping=underscores", encoding: gzipped}

// Scrapes that arrive while a wave runs get its bytes, the very same ones, and cause no encoding
// of their own; a scrape after the wave starts a new one.
func TestScrapesDuringAWaveShareItsBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	blocking := newBlockingCollector()
	reg.MustRegister(blocking)
	h := newHandler(reg, reg, true)

	const scrapes = 100
	bodies := make([][]byte, scrapes)
	var wg sync.WaitGroup
	scrape := func(i int) {
		resp, err := h.Scrape(scrapeRequest(t.Context(), "", "gzip"))
		if err != nil {
			t.Errorf("scrape %d: %v", i, err)
		}
		bodies[i] = resp.Body
	}
	wg.Go(func() { scrape(0) })
	<-blocking.entered // the first scrape is gathering
	for i := 1; i < scrapes; i++ {
		wg.Go(func() { scrape(i) })
	}
	await.Until(t, 10*time.Second, "the scrapes to join the wave", waiters(h, gzipText, scrapes-1))
	close(blocking.release)
	wg.Wait()

	if got := encodings(t, reg, "text", "gzip"); got != 1 {
		t.Errorf("%v encodings for %d concurrent scrapes, want 1", got, scrapes)
	}
	for i, body := range bodies {
		if len(body) == 0 || &body[0] != &bodies[0][0] {
			t.Fatalf("scrape %d got other bytes than the wave produced", i)
		}
	}
	fs, err := metricstest.Parse(bodies[0], string(gzipText.format), gzipped)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := fs.Value("test_blocking"); !ok || v != 1 {
		t.Errorf("test_blocking = %v, %v; want 1", v, ok)
	}

	// The wave is over: the next scrape encodes again, and its exposition counts both encodings.
	resp, err := h.Scrape(scrapeRequest(t.Context(), "", "gzip"))
	if err != nil {
		t.Fatal(err)
	}
	if fs, err = metricstest.Parse(resp.Body, resp.ContentType, resp.ContentEncoding); err != nil {
		t.Fatal(err)
	}
	if v, _ := fs.Value("bloomery_metrics_encodings_total", "format", "text", "encoding", "gzip"); v != 2 {
		t.Errorf("the scrape after the wave reports %v encodings, want 2", v)
	}
}

// Only identical requests share: another encoding is another wave, even at the same moment.
func TestWavesAreByFormatAndEncoding(t *testing.T) {
	reg := prometheus.NewRegistry()
	blocking := newBlockingCollector()
	reg.MustRegister(blocking)
	h := newHandler(reg, reg, true)

	var wg sync.WaitGroup
	var gzipResp, plainResp Response
	wg.Go(func() {
		var err error
		if gzipResp, err = h.Scrape(scrapeRequest(t.Context(), "", "gzip")); err != nil {
			t.Error(err)
		}
	})
	<-blocking.entered
	wg.Go(func() { // not blocked: blocking only holds its first collection
		var err error
		if plainResp, err = h.Scrape(scrapeRequest(t.Context(), "", "")); err != nil {
			t.Error(err)
		}
	})
	// The identity scrape finishes while the gzip wave still waits.
	deadline := time.Now().Add(10 * time.Second)
	waves := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.waves) }
	for encodings(t, reg, "text", "identity") != 1 || waves() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the identity scrape waited for the gzip wave")
		}
		time.Sleep(time.Millisecond)
	}
	close(blocking.release)
	wg.Wait()
	if gzipResp.ContentEncoding != gzipped || plainResp.ContentEncoding != identity {
		t.Errorf("encodings %q and %q, want gzip and identity", gzipResp.ContentEncoding, plainResp.ContentEncoding)
	}
	if bytes.Equal(gzipResp.Body, plainResp.Body) {
		t.Error("the gzip and identity scrapes got the same bytes")
	}
}

// A scrape whose client gives up stops waiting at once; the wave goes on for the others.
func TestWaitingScrapeHonoursItsContext(t *testing.T) {
	reg := prometheus.NewRegistry()
	blocking := newBlockingCollector()
	reg.MustRegister(blocking)
	h := newHandler(reg, reg, true)

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := h.Scrape(scrapeRequest(t.Context(), "", "gzip")); err != nil {
			t.Error(err)
		}
	})
	<-blocking.entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.Scrape(scrapeRequest(ctx, "", "gzip")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled scrape returned %v, want context.Canceled", err)
	}
	close(blocking.release)
	wg.Wait()
}

// If the scrape producing a wave panics, those waiting for it get an error, not an empty body,
// and the next scrape starts afresh.
func TestWaitersOfAFailedWaveGetAnError(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls int
	gatherer := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		calls++
		if calls == 1 {
			close(entered)
			<-release
			panic("collector bug")
		}
		return nil, nil
	})
	h := newHandler(gatherer, prometheus.NewRegistry(), true)

	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			if recover() == nil {
				t.Error("the producing scrape did not panic")
			}
		}()
		_, _ = h.Scrape(scrapeRequest(t.Context(), "", "gzip"))
	})
	<-entered
	var waiterErr error
	wg.Go(func() { _, waiterErr = h.Scrape(scrapeRequest(t.Context(), "", "gzip")) })
	await.Until(t, 10*time.Second, "the scrape to join the wave", waiters(h, gzipText, 1))
	close(release)
	wg.Wait()
	if !errors.Is(waiterErr, errProducerFailed) {
		t.Errorf("waiter got %v, want errProducerFailed", waiterErr)
	}
	if _, err := h.Scrape(scrapeRequest(t.Context(), "", "gzip")); err != nil {
		t.Errorf("the scrape after the failed wave: %v", err)
	}
}

func TestNegotiation(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_events_total", Help: "Events."})
	counter.Add(3)
	reg.MustRegister(counter)
	h := newHandler(reg, reg, true)

	const (
		text = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
		om1  = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
		om0  = "application/openmetrics-text; version=0.0.1; charset=utf-8; escaping=underscores"
	)
	prometheusAccept := "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5," +
		"application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=underscores;q=0.3," +
		"text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
	tests := []struct {
		name, accept, acceptEncoding string
		contentType, encoding        string
	}{
		{"nothing asked", "", "", text, identity},
		{"curl", "*/*", "", text, identity},
		{"Prometheus", prometheusAccept, "gzip", om1, gzipped},
		{"OpenMetrics without a version", "application/openmetrics-text", "", om0, identity},
		{"text explicitly", "text/plain;version=0.0.4", "gzip, deflate, br", text, gzipped},
		{"unknown type", "application/json", "", text, identity},
		{"protobuf is not offered", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "", text, identity},
		{"gzip refused", "", "gzip;q=0, identity", text, identity},
		{"any encoding", "", "*", text, gzipped},
		{"any but gzip", "", "gzip;q=0, *;q=1", text, identity},
		{"weighted gzip", "", "br;q=1.0, gzip;q=0.8", text, gzipped},
		{"zstd only", "", "zstd", text, identity},
		{"upper case", "", "GZIP", text, gzipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, scrapeRequest(t.Context(), tt.accept, tt.acceptEncoding))
			resp := rec.Result()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, rec.Body)
			}
			ct, ce := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding")
			if ct != tt.contentType {
				t.Errorf("Content-Type %q, want %q", ct, tt.contentType)
			}
			if want := map[string]string{identity: "", gzipped: gzipped}[tt.encoding]; ce != want {
				t.Errorf("Content-Encoding %q, want %q", ce, want)
			}
			fs, err := metricstest.Parse(rec.Body.Bytes(), ct, ce)
			if err != nil {
				t.Fatalf("the body does not parse as %s: %v", ct, err)
			}
			if v, ok := fs.Value("test_events_total"); !ok || v != 3 {
				t.Errorf("test_events_total = %v, %v; want 3", v, ok)
			}
		})
	}
}
