package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// offeredFormats are the expositions we encode, the first preferred when the client accepts any
// (curl's */*): Prometheus text, then OpenMetrics. Prometheus asks for OpenMetrics 1.0.0 first.
// Protobuf is not offered: it only pays with native histograms, which we do not have.
var offeredFormats = []expfmt.Format{expfmt.FmtText, expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtOpenMetrics_0_0_1}

// Content encodings. zstd is not offered: client_golang implements it only inside its own
// handler (through an internal hook), so it would take a direct dependency on a zstd library, and
// Prometheus asks for gzip anyway.
const (
	identity = "identity"
	gzipped  = "gzip"
)

// Handler serves the exposition. Concurrent scrapes that ask for the same format and encoding
// share the work: the first one gathers, encodes and compresses; those that arrive meanwhile wait
// for it and get the same bytes. Once that wave has produced its bytes it is over, and the next
// scrape starts a new one, so a response is never older than the scrape it answers, except by
// the time the wave it joined had already been running. There is no cache to go stale.
// Prometheus servers in HA pairs, and several of them (or a federation) on one pod, scrape at
// the same moments; each wave then costs one gather and one compression (the idea of apache/pulsar
// PR 22521).
type Handler struct {
	gatherer prometheus.Gatherer
	// encodings counts the responses produced, by format and encoding; next to the request count
	// of /metrics, it shows how much is shared.
	encodings *prometheus.CounterVec
	// shared is false only in benchmarks, to compare with every scrape producing its own.
	shared bool

	mu    sync.Mutex
	waves map[responseKey]*wave
	// sizeHint is the size of the last response, to allocate the next one at once.
	sizeHint atomic.Int64
}

// responseKey says which bytes a scrape needs. The format carries its version and name escaping
// scheme; all are chosen from short lists, so the keys are few.
type responseKey struct {
	format   expfmt.Format
	encoding string
}

// wave is one production of a response and the scrapes waiting for it.
type wave struct {
	done    chan struct{} // closed when body and err are final
	body    []byte
	err     error
	waiters int // scrapes that joined; read by tests under Handler.mu
}

// Response is an encoded exposition. Body is shared between the scrapes of a wave: read-only.
type Response struct {
	Body            []byte
	ContentType     string
	ContentEncoding string // "identity" or "gzip"
}

// errProducerFailed is what the scrapes of a wave get when the scrape producing it panicked.
var errProducerFailed = errors.New("the scrape producing this response failed")

func newHandler(g prometheus.Gatherer, reg prometheus.Registerer, shared bool) *Handler {
	h := &Handler{
		gatherer: g,
		encodings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "metrics", Name: "encodings_total",
			Help: "Expositions gathered, encoded and compressed for /metrics, by format and encoding. " +
				"Concurrent scrapes of one format and encoding share one.",
		}, []string{"format", "encoding"}),
		shared: shared,
		waves:  make(map[responseKey]*wave),
	}
	reg.MustRegister(h.encodings)
	return h
}

// ServeHTTP implements http.Handler, with errors as plain text.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := h.Scrape(r)
	if err != nil {
		if r.Context().Err() == nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		return
	}
	resp.Write(w)
}

// Write sends the response with its headers.
func (resp Response) Write(w http.ResponseWriter) {
	header := w.Header()
	header.Set("Content-Type", resp.ContentType)
	if resp.ContentEncoding != identity {
		header.Set("Content-Encoding", resp.ContentEncoding)
	}
	header.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	header.Add("Vary", "Accept, Accept-Encoding")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(resp.Body) // a scraper that went away needs no answer
}

// Scrape negotiates the format and encoding of r and returns the exposition, shared with the
// concurrent scrapes that asked for the same. It returns early, with the context's error, if r's
// context ends while it waits for another scrape's work.
func (h *Handler) Scrape(r *http.Request) (Response, error) {
	key := responseKey{
		format:   expfmt.NegotiateAccept(r.Header, offeredFormats...),
		encoding: negotiateEncoding(r.Header.Values("Accept-Encoding")),
	}
	body, err := h.body(r.Context(), key)
	if err != nil {
		return Response{}, err
	}
	return Response{Body: body, ContentType: string(key.format), ContentEncoding: key.encoding}, nil
}

// body joins the wave producing key, or starts one.
func (h *Handler) body(ctx context.Context, key responseKey) ([]byte, error) {
	if !h.shared {
		return h.produce(key)
	}
	h.mu.Lock()
	if w, ok := h.waves[key]; ok {
		w.waiters++
		h.mu.Unlock()
		select {
		case <-w.done:
			return w.body, w.err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the metrics of a concurrent scrape: %w", ctx.Err())
		}
	}
	w := &wave{done: make(chan struct{}), err: errProducerFailed}
	h.waves[key] = w
	h.mu.Unlock()
	defer func() {
		// Out of the map before the bytes are released: a scrape that arrives after this wave's
		// bytes exist must start a new wave rather than take them.
		h.mu.Lock()
		delete(h.waves, key)
		h.mu.Unlock()
		close(w.done)
	}()
	// The producer's own context is not consulted: the others are waiting for its bytes.
	w.body, w.err = h.produce(key)
	return w.body, w.err
}

// produce gathers, encodes and compresses one exposition.
func (h *Handler) produce(key responseKey) ([]byte, error) {
	format := "text"
	if key.format.FormatType() == expfmt.TypeOpenMetrics {
		format = "openmetrics"
	}
	// Counted before gathering, so that the exposition includes itself.
	h.encodings.WithLabelValues(format, key.encoding).Inc()
	families, err := h.gatherer.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	buf := bytes.NewBuffer(make([]byte, 0, h.sizeHint.Load()))
	var out io.Writer = buf
	var gz *gzip.Writer
	if key.encoding == gzipped {
		gz = gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(gz)
		gz.Reset(buf)
		out = gz
	}
	enc := expfmt.NewEncoder(out, key.format)
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", mf.GetName(), err)
		}
	}
	if closer, ok := enc.(expfmt.Closer); ok { // OpenMetrics ends with "# EOF"
		if err := closer.Close(); err != nil {
			return nil, fmt.Errorf("encoding metrics: %w", err)
		}
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return nil, fmt.Errorf("compressing metrics: %w", err)
		}
	}
	h.sizeHint.Store(int64(buf.Len()))
	return buf.Bytes(), nil
}

// gzipWriters saves the compressor's allocation (hundreds of kilobytes of tables) per response.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// negotiateEncoding picks gzip if the Accept-Encoding headers accept it (by name or as *) with a
// quality above 0, else identity.
func negotiateEncoding(headers []string) string {
	gzipQ, anyQ := -1.0, -1.0
	for _, header := range headers {
		for part := range strings.SplitSeq(header, ",") {
			name, params, _ := strings.Cut(part, ";")
			q := 1.0
			for param := range strings.SplitSeq(params, ";") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(param), "q="); ok {
					var err error
					if q, err = strconv.ParseFloat(v, 64); err != nil {
						q = 0
					}
				}
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case gzipped:
				gzipQ = q
			case "*":
				anyQ = q
			}
		}
	}
	if gzipQ > 0 || (gzipQ < 0 && anyQ > 0) {
		return gzipped
	}
	return identity
}
