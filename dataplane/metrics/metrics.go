// Package metrics is the data plane's Prometheus instrumentation: collectors for HTTP, the filters
// and persistence on a registry of its own, and the /metrics handler, which encodes one response
// per wave of concurrent scrapes. It reads the engine and the persister; neither knows of it.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/replication"
)

// namespace prefixes every metric of ours.
const namespace = "bloomery"

// Options configure New.
type Options struct {
	// Store is read at every scrape for the filter metrics.
	Store *filter.Store
	// Cluster, if set, is read at every scrape for the replication metrics.
	Cluster *replication.Node
	// MaxLabelledFilters caps the filters that get series of their own, labelled with the filter's
	// name; the others count only in the totals, so that a million filters cannot make a million
	// series. 0 gives no per-filter series.
	MaxLabelledFilters int
	// Ready reports whether the data plane is ready for traffic (bloomery_ready); nil means
	// always.
	Ready func() bool
	// HomeLease, if set, is read at every scrape for the home lease's metrics.
	HomeLease HomeLease
}

// HomeLease is the pod's home lease (dataplane/lease's Renewer).
type HomeLease interface {
	Held() bool
	Failures() uint64
}

// Metrics are the data plane's collectors, registered on a registry of their own: the global one
// would also carry whatever any imported library registers there.
type Metrics struct {
	// HTTP is fed by the server's middleware and its http.Server's ConnState.
	HTTP *HTTP
	// Persistence is fed by the server once the persister exists.
	Persistence *Persistence
	// RESP is fed by the Redis protocol's server.
	RESP *RESP

	registry *prometheus.Registry
	handler  *Handler
}

// New registers every collector on a new registry.
func New(opts Options) *Metrics {
	ready := opts.Ready
	if ready == nil {
		ready = func() bool { return true }
	}
	reg := prometheus.NewRegistry()
	m := &Metrics{
		HTTP:        newHTTP(),
		Persistence: newPersistence(),
		RESP:        newRESP(),
		registry:    reg,
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.HTTP,
		m.Persistence,
		m.RESP,
		newFilterCollector(opts.Store, opts.MaxLabelledFilters),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "ready",
			Help:      "1 when the data plane is ready for traffic (recovery and catch-up from peers done, not shutting down), else 0.",
		}, func() float64 {
			if ready() {
				return 1
			}
			return 0
		}),
	)
	if opts.Cluster != nil {
		reg.MustRegister(newReplicationCollector(opts.Cluster))
	}
	if l := opts.HomeLease; l != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: namespace, Subsystem: "home_lease", Name: "held",
				Help: "1 while the pod holds its home lease and may serve as a partition's home, else 0.",
			}, func() float64 {
				if l.Held() {
					return 1
				}
				return 0
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: namespace, Subsystem: "home_lease", Name: "renew_failures_total",
				Help: "Renewals of the home lease that failed: the API server did not answer, or refused.",
			}, func() float64 { return float64(l.Failures()) }),
		)
	}
	m.handler = newHandler(reg, reg, true)
	return m
}

// Handler serves the exposition; see Handler.
func (m *Metrics) Handler() *Handler { return m.handler }

// Gatherer gathers every metric, for tests and for other exporters.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry }
