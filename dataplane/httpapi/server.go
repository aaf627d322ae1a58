// Package httpapi is the data plane's HTTP server: the REST API of filter-service, extended,
// over the filter engine. It knows nothing of Kubernetes.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/apidocs"
	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// Server is the data plane's HTTP API, on three routers: the client port's public API, the
// internal port's endpoints for the operator and peers, and the ops port's probes and metrics.
type Server struct {
	Options
	client, internal, ops *echo.Echo
	// tokenDigest is the SHA-256 of the internal port's token; nil refuses every request there.
	tokenDigest []byte
	// bodies bounds the request bodies the client port holds at once.
	bodies *bodyBudget
	// docsPage is the API documentation page, built once; nil without -d.
	docsPage []byte
	// routePaths are the registered route templates, for the route label of metrics: anything
	// else a request matched is a path of the client's choosing.
	routePaths map[string]bool
	// peers is the receiving end of the pod-to-pod protocol, which the internal port serves.
	peers *peer.Server
	// statusLog numbers the changes of the filters for the operator's polls.
	statusLog *statusLog
	// phase is where the process is: see Phase. A Server nothing is recovered into serves.
	phase atomic.Int32
}

// Options are what the API serves: the engine, the replication node and the metrics, assembled
// by the process around it.
type Options struct {
	Config  config.Config
	Log     *slog.Logger
	Store   *filter.Store
	Node    Cluster
	Metrics *metrics.Metrics
	// Writes runs every write: the handlers decode, it applies, journals and replicates.
	Writes *writes.Service
	// LastSnapshot is when the last snapshot completed, zero before the first and in memory.
	LastSnapshot func() time.Time
	// Durable makes the store's current state survive a crash (bits merged from a dump are not
	// in the log).
	Durable func() error
	// InternalToken is the bearer token the internal port requires; empty refuses every request
	// there.
	InternalToken string
	// LogBroken answers why the update log cannot be written, nil while it can (and in memory):
	// writes then fail, so the pod is not ready.
	LogBroken func() error
}

// Cluster is the pod's part of its cluster as the API calls it (replication.Node): what it
// serves the operator and its peers, and what the public API asks of the peers.
type Cluster interface {
	peer.Host
	// Ready reports whether the pod holds what its peers held when it learned of them; Known
	// whether it was told its membership.
	Ready() bool
	Known() (bool, <-chan struct{})
	WriteConsistency() wire.Consistency
	Replicating() bool
	// Forward sends a client's request to a peer, and answers the peer's answer.
	Forward(ctx context.Context, to wire.Member, method, requestURI, contentType string, body []byte) (client.Answer, error)
}

// Phase is a stage of the process's life, as /readyz and the filter API see it.
type Phase int32

const (
	// Serving is the zero value: a Server that nothing is recovered into serves at once.
	Serving Phase = iota
	// Recovering is while the filters are loaded: probes and /metrics answer, the filter API
	// answers 503 until the filters are back.
	Recovering
	// Draining is once a graceful shutdown began: /readyz answers 503 while the API still serves.
	Draining
)

// New builds the API over a validated configuration.
func New(o Options) (*Server, error) {
	if o.Config.MaxHTTPRequestLength <= 0 {
		return nil, fmt.Errorf("maxHttpRequestLength must be > 0, got %d", o.Config.MaxHTTPRequestLength)
	}
	s := &Server{
		Options:   o,
		bodies:    &bodyBudget{limit: int64(min(o.Config.MaxRequestBytesInFlight, math.MaxInt64))},
		statusLog: newStatusLog(),
	}
	s.peers = peer.NewServer(peer.ServerOptions{
		Host:            o.Node,
		Store:           o.Store,
		MaxRequestBytes: o.Config.MaxHTTPRequestLength,
		Timeout:         o.Config.RequestTimeout,
		IdleTimeout:     o.Config.IdleTimeout,
		Durable:         o.Durable,
		MaxDumpBytes:    int64(min(o.Config.MaxDumpBytes, math.MaxInt64)),
	})
	if o.InternalToken != "" {
		s.tokenDigest = digest(o.InternalToken)
	}
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
	newID := requestIDs()
	s.client, s.internal, s.ops = s.newRouter(newID), s.newRouter(newID), s.newRouter(newID)

	for _, e := range []*echo.Echo{s.client, s.ops} {
		e.GET(wire.HealthzPath, s.healthz)
		e.GET(wire.ReadyzPath, s.readyz)
		e.GET(wire.MetricsPath, s.scrapeMetrics)
	}
	s.client.Use(plainBodies)
	if s.bodies.limit > 0 {
		s.client.Use(s.limitBodies)
		s.Metrics.HTTP.ObserveBodyBytes(s.bodies.used.Load)
	}
	// As in filter-service, which listens only once its filters are loaded, pong says "ready to
	// serve"; /healthz stays the liveness probe.
	s.client.GET(wire.PingPath, s.afterRecovery(s.ping))
	s.filterRoutes(s.client, func(path string) string { return path }, s.clientMerge)
	if s.docsPage != nil {
		s.client.GET(wire.DocsPath, s.docsRedirect)
		s.client.GET(wire.DocsPath+"/", s.docs)
		s.client.GET(wire.OpenAPIPath, s.openAPI)
	}

	// What the operator and peer pods call, with the token: the filter API under
	// wire.InternalPath, for forwarded requests, quorum reads, dumps and the operator's creates,
	// and the endpoints of replication. Membership is served during recovery too, so that a pod
	// learns its peers while it loads its files.
	s.internal.Use(s.authenticate)
	s.filterRoutes(s.internal, wire.InternalPath, s.merge)
	ready := s.afterRecovery
	s.internal.GET(wire.MembershipPath, s.getMembership)
	s.internal.PUT(wire.MembershipPath, s.putMembership)
	s.internal.POST(wire.ApplyPath, ready(s.applyOps))
	s.internal.GET(wire.ApplyStreamPath, ready(s.applyStream))
	s.internal.GET(wire.InventoryPath, ready(s.inventory))
	s.internal.GET(wire.PlacementStatusPath, s.placementStatus)
	s.internal.POST(wire.RoomPath, ready(s.checkRoom))
	s.internal.GET(wire.FilterStatusPath(":"+wire.NameParam), ready(s.filterStatus))
	s.internal.GET(wire.FilterStatusesPath, ready(s.filterStatuses))

	s.routePaths = make(map[string]bool)
	for _, e := range []*echo.Echo{s.client, s.internal, s.ops} {
		for _, r := range e.Routes() {
			s.routePaths[r.Path] = true
		}
	}
}

// newRouter is a router with the API's error answers, JSON and instrumentation.
func (s *Server) newRouter(newID func() string) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	e.Use(s.instrument(newID), s.answerInTime)
	return e
}

// answerInTime bounds a request's work by the time left to answer it. The server closes a
// connection whose answer is not written within requestTimeoutSeconds, and a client is owed an
// answer, not a closed connection: waits for peers, forwards to a home and quorum reads end by
// the deadline, and the request is answered 503 with what became of it (code 9: a write that may
// have been applied). A tenth of the timeout is left to write the answer, counted again from the
// end of a request that a pause of the process made outlive its budget. A pod without peers
// waits for none, and its requests skip the context and timer this costs on the hot path.
func (s *Server) answerInTime(next echo.HandlerFunc) echo.HandlerFunc {
	budget := s.Config.RequestTimeout - s.Config.RequestTimeout/10
	return func(c echo.Context) error {
		if !s.Node.Replicating() || c.Path() == wire.FilterStatusesPath {
			// The long poll of the statuses waits for a change, not for peers, and sets its own
			// deadlines.
			return next(c)
		}
		req := c.Request()
		ctx, cancel := context.WithTimeout(req.Context(), budget)
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
		err := next(c)
		if deadline, _ := ctx.Deadline(); !time.Now().Before(deadline) {
			// The request ran past its budget, which nothing it waits for outlasts: its process
			// was paused while it worked (SIGSTOP, a stalled machine). The server's write deadline,
			// requestTimeoutSeconds from its arrival, may have passed too, and would close the
			// connection unanswered: the answer, written once this returns, gets the tenth of the
			// timeout kept for it, from now.
			_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(s.Config.RequestTimeout / 10))
		}
		return err
	}
}

// filterRoutes mounts the filter API on e, each public path at at(path), merges served by merge.
func (s *Server) filterRoutes(e *echo.Echo, at func(string) string, merge echo.HandlerFunc) {
	// Handlers wrapped once, here, rather than given as route or group middleware: echo answers
	// every path under a group that has middleware itself, which would turn 405s into 404s, and
	// applies route middleware anew for every request.
	ready := func(h echo.HandlerFunc) echo.HandlerFunc { return s.afterRecovery(s.afterCatchUp(h)) }
	e.GET(at(wire.ListPath), ready(s.listFilters))
	e.PUT(at(wire.FilterRoute), ready(s.createFilter))
	e.GET(at(wire.FilterRoute), ready(s.getFilter))
	e.DELETE(at(wire.FilterRoute), ready(s.deleteFilter))
	e.POST(at(wire.FilterOpRoute(wire.OpCheck)), ready(s.check))
	e.POST(at(wire.FilterOpRoute(wire.OpMultiCheck)), ready(s.multiCheck))
	e.POST(at(wire.FilterOpRoute(wire.OpCheckAndSet)), ready(s.checkAndSet))
	e.POST(at(wire.FilterOpRoute(wire.OpMultiCheckAndSet)), ready(s.multiCheckAndSet))
	e.POST(at(wire.FilterOpRoute(wire.OpSet)), ready(s.set))
	e.POST(at(wire.FilterOpRoute(wire.OpMultiSet)), ready(s.multiSet))
	e.GET(at(wire.FilterOpRoute(wire.OpDump)), ready(s.dump))
	e.POST(at(wire.FilterOpRoute(wire.OpMerge)), ready(merge))
	e.PUT(at(wire.FilterOpRoute(wire.OpExpiration)), ready(s.setExpiration))
	e.DELETE(at(wire.FilterOpRoute(wire.OpExpiration)), ready(s.removeExpiration))
}

// requestIDs numbers requests within the process: unique enough to find a request's log lines,
// and far cheaper than random IDs on the hot path.
func requestIDs() func() string {
	prefix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"
	var n atomic.Uint64
	return func() string { return prefix + strconv.FormatUint(n.Add(1), 36) }
}

// ClientHandler serves the client port: the public API, the probes and /metrics.
func (s *Server) ClientHandler() http.Handler { return s.client }

// InternalHandler serves the internal port: what the operator and peers call, with the token.
func (s *Server) InternalHandler() http.Handler { return s.internal }

// OpsHandler serves the ops port: the probes and /metrics alone.
func (s *Server) OpsHandler() http.Handler { return s.ops }

// SetPhase moves the API to another stage of the process's life.
func (s *Server) SetPhase(p Phase) { s.phase.Store(int32(p)) }

func (s *Server) currentPhase() Phase { return Phase(s.phase.Load()) }

// Phase is the stage of the process's life the API is in; the RESP port reads it too.
func (s *Server) Phase() Phase { return s.currentPhase() }

// Ready reports whether the pod should take traffic: serving, and caught up with its peers.
func (s *Server) Ready() bool {
	return s.currentPhase() == Serving && s.Node.Ready() && s.logBroken() == nil
}

func (s *Server) logBroken() error {
	if s.LogBroken == nil {
		return nil
	}
	return s.LogBroken()
}
