// Package server is the data plane's HTTP server: the REST API of filter-service, extended,
// over the filter engine. It knows nothing of Kubernetes.
package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/writes"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/apidocs"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Server is the data plane's HTTP API.
type Server struct {
	Options
	echo *echo.Echo
	// docsPage is the API documentation page, built once; nil without -d.
	docsPage []byte
	// routePaths are the registered route templates, for the route label of metrics: anything
	// else a request matched is a path of the client's choosing.
	routePaths map[string]bool
	// phase is where the process is: see Phase. A Server nothing is recovered into serves.
	phase atomic.Int32
}

// Options are what the API serves: the engine, the replication node and the metrics, assembled
// by the process around it.
type Options struct {
	Config  config.Config
	Log     *slog.Logger
	Store   *filter.Store
	Node    *replication.Node
	Metrics *metrics.Metrics
	// Writes runs every write: the handlers decode, it applies, journals and replicates.
	Writes *writes.Service
	// LastSnapshot is when the last snapshot completed, zero before the first and in memory.
	LastSnapshot func() time.Time
	// Durable makes the store's current state survive a crash (bits merged from a dump are not
	// in the log).
	Durable func() error
}

// Phase is a stage of the process's life, as /readyz and the filter API see it.
type Phase int32

const (
	// Serving is the zero value: a Server that nothing is recovered into serves at once.
	Serving Phase = iota
	// Recovering: the HTTP server answers, so probes and /metrics work, but the filter API
	// answers 503 until the filters are back.
	Recovering
	// Draining: a graceful shutdown began; /readyz answers 503 while the API still serves.
	Draining
)

// New builds the API over a validated configuration.
func New(o Options) (*Server, error) {
	if o.Config.MaxHTTPRequestLength <= 0 {
		return nil, fmt.Errorf("maxHttpRequestLength must be > 0, got %d", o.Config.MaxHTTPRequestLength)
	}
	s := &Server{Options: o, echo: echo.New()}
	if o.Config.DocsEnabled {
		page, err := apidocs.Page()
		if err != nil {
			return nil, fmt.Errorf("API documentation: %w", err)
		}
		s.docsPage = page
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	e.Use(s.instrument(requestIDs()))

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.scrapeMetrics)
	v1 := e.Group(wire.BasePath)
	v1.GET("/ping", s.ping)
	// Handlers wrapped once, here, rather than given as route middleware: echo answers every
	// path under a group that has middleware itself, which would turn 405s into 404s, and
	// applies route middleware anew for every request.
	ready := s.afterRecovery
	filters := v1.Group("/bloomfilter")
	filters.GET("/list", ready(s.listFilters))
	filters.PUT("/:name", ready(s.createFilter))
	filters.GET("/:name", ready(s.getFilter))
	filters.DELETE("/:name", ready(s.deleteFilter))
	filters.POST("/:name/check", ready(s.check))
	filters.POST("/:name/multi-check", ready(s.multiCheck))
	filters.POST("/:name/check-and-set", ready(s.checkAndSet))
	filters.POST("/:name/multi-check-and-set", ready(s.multiCheckAndSet))
	filters.POST("/:name/set", ready(s.set))
	filters.POST("/:name/multi-set", ready(s.multiSet))
	filters.GET("/:name/dump", ready(s.dump))
	filters.POST("/:name/merge", ready(s.merge))

	// What the operator and peer pods call. Membership is served during recovery too, so that
	// a pod learns its peers while it loads its files.
	internal := e.Group(wire.InternalBasePath)
	internal.GET("/membership", s.getMembership)
	internal.PUT("/membership", s.putMembership)
	internal.POST("/apply", ready(s.applyOps))
	internal.GET("/inventory", ready(s.inventory))
	e.GET(wire.FilterStatusPath(":name"), ready(s.filterStatus))
	if s.docsPage != nil {
		v1.GET("/docs", s.docsRedirect)
		v1.GET("/docs/", s.docs)
		v1.GET("/docs/openapi.json", s.openAPI)
	}

	s.routePaths = make(map[string]bool)
	for _, r := range e.Routes() {
		s.routePaths[r.Path] = true
	}
}

// requestIDs numbers requests within the process: unique enough to find a request's log lines,
// and far cheaper than random IDs on the hot path.
func requestIDs() func() string {
	prefix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"
	var n atomic.Uint64
	return func() string { return prefix + strconv.FormatUint(n.Add(1), 36) }
}

// Handler serves the whole API; tests mount it on httptest servers.
func (s *Server) Handler() http.Handler { return s.echo }

// SetPhase moves the API to another stage of the process's life.
func (s *Server) SetPhase(p Phase) { s.phase.Store(int32(p)) }

func (s *Server) currentPhase() Phase { return Phase(s.phase.Load()) }

// Ready reports whether the pod should take traffic: serving, and caught up with its peers.
func (s *Server) Ready() bool { return s.currentPhase() == Serving && s.Node.Ready() }
