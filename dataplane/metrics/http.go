package metrics

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Unmatched is the route label of requests that matched no route: their paths are the client's to
// choose, and as labels they would make a series per typo.
const Unmatched = "unmatched"

// latencyBuckets span what the API sees: answers from memory take tens of microseconds, a big
// batch or a slow client milliseconds, and nothing may take longer than the request timeout.
var latencyBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// HTTP are the server's request and connection metrics.
type HTTP struct {
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	open      prometheus.Gauge
	// unauthorized counts the internal port's refusals, which a scan or a misconfigured peer
	// shows up as.
	unauthorized prometheus.Counter
	// connsRefused and connsClosed count what the ports' connection budgets do: a flood of idle
	// or silent connections shows up as closed ones, a flood of requests as refused ones.
	connsRefused *prometheus.CounterVec
	connsClosed  *prometheus.CounterVec
	// bodiesRefused counts requests refused because the client port held maxRequestBytesInFlight
	// of bodies already.
	bodiesRefused prometheus.Counter
	// bodyBytes reads the bytes of request bodies the client port holds, at scrape time.
	bodyBytes     atomic.Pointer[func() int64]
	bodyBytesDesc *prometheus.Desc

	// series caches the children of the vectors by label values: a vector's lookup hashes the
	// values and takes the vector's lock, on every request; a sync.Map read of a key that exists
	// takes no lock.
	series sync.Map // requestLabels → requestSeries
}

type requestLabels struct {
	route, method string
	status        int
}

type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

func newHTTP() *HTTP {
	return &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time from the request's arrival at the router to its answer, by route template and method.",
			Buckets: latencyBuckets,
		}, []string{"route", "method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_in_flight",
			Help: "HTTP requests being answered.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "http", Name: "open_connections",
			Help: "Connections open to the HTTP listeners (client, internal and ops ports), idle ones included.",
		}),
		unauthorized: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "unauthorized_requests_total",
			Help: "Requests to the internal port refused for a missing or wrong bearer token.",
		}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "connections_refused_total",
			Help: "Connections refused, by port, because every connection of the port's budget was answering a request.",
		}, []string{"port"}),
		connsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "connections_closed_total",
			Help: "Connections the pod closed, by port and reason: idle (the oldest idle keep-alive connection, to admit a new one), no_request (the oldest that had sent no complete request, to admit a new one), unauthorized (after a 401 on the internal port).",
		}, []string{"port", "reason"}),
		bodyBytesDesc: prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "request_body_bytes"),
			"Bytes of request bodies the client port holds now, against maxRequestBytesInFlight.", nil, nil),
		bodiesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "bodies_refused_total",
			Help: "Requests answered 503 because the client port held maxRequestBytesInFlight of request bodies already.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (h *HTTP) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.durations.Describe(ch)
	h.inFlight.Describe(ch)
	h.open.Describe(ch)
	h.unauthorized.Describe(ch)
	h.connsRefused.Describe(ch)
	h.connsClosed.Describe(ch)
	h.bodiesRefused.Describe(ch)
	ch <- h.bodyBytesDesc
}

// Collect implements prometheus.Collector.
func (h *HTTP) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.durations.Collect(ch)
	h.inFlight.Collect(ch)
	h.open.Collect(ch)
	h.unauthorized.Collect(ch)
	h.connsRefused.Collect(ch)
	h.connsClosed.Collect(ch)
	h.bodiesRefused.Collect(ch)
	if f := h.bodyBytes.Load(); f != nil {
		ch <- prometheus.MustNewConstMetric(h.bodyBytesDesc, prometheus.GaugeValue, float64((*f)()))
	}
}

// ObserveBodyBytes makes f the source of the request-body bytes held; the series appears then.
func (h *HTTP) ObserveBodyBytes(f func() int64) { h.bodyBytes.Store(&f) }

// BodyRefused counts a request refused for the bytes of bodies in flight.
func (h *HTTP) BodyRefused() { h.bodiesRefused.Inc() }

// Unauthorized counts a request the internal port refused for its token.
func (h *HTTP) Unauthorized() { h.unauthorized.Inc() }

// ConnRefused counts a connection refused by port's budget.
func (h *HTTP) ConnRefused(port string) { h.connsRefused.WithLabelValues(port).Inc() }

// ConnClosed counts a connection of port the pod closed, for reason.
func (h *HTTP) ConnClosed(port, reason string) { h.connsClosed.WithLabelValues(port, reason).Inc() }

// Started counts a request in flight; Finished must follow.
func (h *HTTP) Started() { h.inFlight.Inc() }

// Finished records a request answered with status after elapsed. route is the template the
// request matched ("/v1/bloomfilter/:name"), or "" for none.
func (h *HTTP) Finished(route, method string, status int, elapsed time.Duration) {
	h.inFlight.Dec()
	if route == "" {
		route = Unmatched
	}
	key := requestLabels{route, knownMethod(method), status}
	s, ok := h.series.Load(key)
	if !ok {
		s, _ = h.series.LoadOrStore(key, requestSeries{
			count:    h.requests.WithLabelValues(key.route, key.method, strconv.Itoa(status)),
			duration: h.durations.WithLabelValues(key.route, key.method),
		})
	}
	series := s.(requestSeries)
	series.count.Inc()
	series.duration.Observe(elapsed.Seconds())
}

// knownMethod keeps the method label to the methods of HTTP: any other string a client sends
// would be a series of its own.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
}

// ConnState is an http.Server's ConnState hook: it counts open connections.
func (h *HTTP) ConnState(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		h.open.Inc()
	case http.StateClosed, http.StateHijacked:
		h.open.Dec()
	default: // active and idle connections are open either way
	}
}
