// Package server is the data plane's HTTP server: the REST API of filter-service, extended,
// over the filter engine. It knows nothing of Kubernetes.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/netutil"

	"github.com/bloomery/bloomery/dataplane/api"
	"github.com/bloomery/bloomery/dataplane/apidocs"
	"github.com/bloomery/bloomery/dataplane/cluster"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/persist"
)

// Server is the data plane's HTTP server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   *filter.Store
	node    *cluster.Node
	echo    *echo.Echo
	metrics *metrics.Metrics
	// docsPage is the API documentation page, built once; nil without -d.
	docsPage []byte
	// routePaths are the registered route templates, for the route label of metrics: anything
	// else a request matched is a path of the client's choosing.
	routePaths map[string]bool

	// snapshots are the persister's counters, set before HTTP starts; nil when in memory.
	snapshots *persist.Stats
	// persister is set once the data directory is open; nil when in memory.
	persister atomic.Pointer[persist.Persister]
	// warned holds, per kind of warning, when it was last logged (warnSpaced).
	warned sync.Map

	// phase is where Run is: see phase. A Server used only through Handler stays serving.
	phase atomic.Int32
	// beforeRecovery, if set, runs when recovery starts; tests hold recovery open with it.
	beforeRecovery func()
}

// phase is a stage of the server's life, as /readyz and the filter API see it.
type phase int32

const (
	// serving is the zero value: a Server that nothing is recovered into serves at once.
	serving phase = iota
	// recovering: the HTTP server answers, so probes and /metrics work, but the filter API
	// answers 503 until the filters are back.
	recovering
	// draining: a graceful shutdown began; /readyz answers 503 while the API still serves.
	draining
)

// persistence is the part of the configuration the persister takes.
func (c Config) persistence(log *slog.Logger, syncObserver func(time.Duration)) persist.Options {
	criteria := make([]persist.Criterion, len(c.TriggerPersistenceCriteria))
	for i, tc := range c.TriggerPersistenceCriteria {
		criteria[i] = persist.Criterion{Period: tc.Period, UpdatesMoreThan: tc.UpdatesMoreThan}
	}
	return persist.Options{
		Dir:                  c.DataDir,
		Sync:                 persist.SyncPolicy(c.LogSync),
		AllowCorruptSnapshot: c.AllowRecoverFromCorruptedPersistentFile,
		Criteria:             criteria,
		Log:                  log,
		SyncObserver:         syncObserver,
	}
}

// New builds a server from a validated configuration.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.MaxHTTPRequestLength <= 0 {
		return nil, fmt.Errorf("maxHttpRequestLength must be > 0, got %d", cfg.MaxHTTPRequestLength)
	}
	s := &Server{
		cfg:   cfg,
		log:   log,
		store: filter.NewStore(filter.Limits{FilterBytes: cfg.MaxFilterBytes, TotalBytes: cfg.MaxTotalBytes}, nil),
		echo:  echo.New(),
	}
	s.node = cluster.NewNode(cluster.Options{
		Store:               s.store,
		Log:                 log,
		WriteConsistency:    api.Consistency(cfg.WriteConsistency),
		Timeout:             cfg.ReplicationTimeout,
		AwaitMembership:     cfg.AwaitMembership,
		AntiEntropyInterval: cfg.AntiEntropyInterval,
		MaxDumpBytes:        maxDumpBytes(cfg),
		MaxBatchBytes:       cfg.MaxHTTPRequestLength,
		PodName:             cfg.PodName,
		Durable:             s.durable,
	})
	s.metrics = metrics.New(metrics.Options{
		Store:              s.store,
		Cluster:            s.node,
		MaxLabelledFilters: cfg.MetricsMaxLabelledFilters,
		Ready:              s.ready,
	})
	if cfg.DocsEnabled {
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
	v1 := e.Group(api.BasePath)
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
	internal := e.Group(api.InternalBasePath)
	internal.GET("/membership", s.getMembership)
	internal.PUT("/membership", s.putMembership)
	internal.POST("/apply", ready(s.applyOps))
	internal.GET("/inventory", ready(s.inventory))
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

func (s *Server) currentPhase() phase { return phase(s.phase.Load()) }

// ready reports whether the pod should take traffic: serving, and caught up with its peers.
func (s *Server) ready() bool { return s.currentPhase() == serving && s.node.Ready() }

// durable makes the store's current state survive a crash with a snapshot; bits merged from a
// dump are not in the log.
func (s *Server) durable() error {
	if p := s.persister.Load(); p != nil {
		return p.Snapshot()
	}
	return nil
}

// maxDumpBytes bounds a dump read from a peer: the per-filter memory limit, else the total one,
// plus room for the record's head.
func maxDumpBytes(cfg Config) int64 {
	limit := cfg.MaxFilterBytes
	if limit == 0 || (cfg.MaxTotalBytes > 0 && cfg.MaxTotalBytes < limit) {
		limit = cfg.MaxTotalBytes
	}
	if limit == 0 || limit > 1<<40 {
		return 1 << 40
	}
	return int64(limit) + 64<<10
}

// Run serves on ln until ctx is cancelled, then shuts down gracefully and takes a final snapshot.
// It returns nil after a clean shutdown. With cfg.InMemory nothing touches the disk.
//
// The order matters to whoever watches the pod:
//  1. lock the data directory (a second process on it fails here, before it listens);
//  2. serve HTTP at once: /healthz, /v1/ping and /metrics answer, /readyz and the filter API
//     answer 503 (code 7) while the filters are recovered;
//  3. recover, then /readyz turns 200 and the filter API serves;
//  4. on cancellation /readyz turns 503 first, the API serves on for cfg.ShutdownDrainDelay so
//     that load balancers notice, then the server stops accepting connections and waits up to
//     cfg.GracefulShutdownTimeout for the requests in flight;
//  5. with HTTP down, a final snapshot.
func (s *Server) Run(ctx context.Context, ln net.Listener) (err error) {
	var p *persist.Persister
	if s.cfg.InMemory {
		s.log.Warn("Persistence is off: filters live in memory only and are lost when the process ends")
	} else {
		if p, err = persist.Open(s.cfg.persistence(s.log, s.metrics.Persistence.ObserveSync)); err != nil {
			_ = ln.Close()
			return err
		}
		defer func() { err = errors.Join(err, p.Close()) }()
		s.metrics.Persistence.Attach(p.Stats())
		s.snapshots = p.Stats()
		s.persister.Store(p)
		s.phase.Store(int32(recovering))
	}

	hs := s.startHTTP(ln)
	if p != nil {
		if err := s.recoverFilters(p); err != nil {
			hs.close()
			return err
		}
	}
	if ctx.Err() == nil {
		s.phase.Store(int32(serving))
		s.log.Info("Ready")
	}

	// Background work runs until HTTP is down, and no longer: the final snapshot must not race
	// with a periodic one, nor with a purge.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { s.purgeExpired(bgCtx) })
	background.Go(func() { tuneGC(bgCtx) })
	background.Go(func() { s.node.Run(bgCtx) })
	defer s.node.Close()
	if p != nil {
		background.Go(func() { p.Run(bgCtx) })
	}

	var serveErr error
	select {
	case err := <-hs.done: // the listener failed: nothing left to drain
		serveErr = fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
		s.drain()
		serveErr = hs.shutdown(ctx, s.cfg.GracefulShutdownTimeout)
	}
	stopBackground()
	background.Wait()
	if p == nil {
		return serveErr
	}
	// The HTTP server is down: no request changes the filters while the last snapshot runs.
	if err := p.Snapshot(); err != nil {
		return errors.Join(serveErr, fmt.Errorf("final snapshot: %w", err))
	}
	return serveErr
}

// recoverFilters loads the data directory into the store.
func (s *Server) recoverFilters(p *persist.Persister) error {
	if s.beforeRecovery != nil {
		s.beforeRecovery()
	}
	rep, err := p.Recover(s.store)
	if err != nil {
		return fmt.Errorf("recovering from %s: %w", s.cfg.DataDir, err)
	}
	s.metrics.Persistence.Recovered(rep)
	return nil
}

// drain turns /readyz to 503 and waits for cfg.ShutdownDrainDelay while the API still serves.
func (s *Server) drain() {
	s.phase.Store(int32(draining))
	if s.cfg.ShutdownDrainDelay <= 0 {
		return
	}
	s.log.Info("Draining: /readyz answers 503 before the server stops accepting connections",
		"delay", s.cfg.ShutdownDrainDelay.String())
	// Not interruptible on purpose: a second SIGTERM or SIGINT kills the process (see runDataPlane).
	time.Sleep(s.cfg.ShutdownDrainDelay)
}

// httpServer is the HTTP server running on a listener.
type httpServer struct {
	srv  *http.Server
	done chan error // receives why Serve returned, once
	log  *slog.Logger
}

// startHTTP serves the API on ln in a goroutine; shutdown stops it.
func (s *Server) startHTTP(ln net.Listener) *httpServer {
	if s.cfg.MaxHTTPConnections > 0 {
		ln = netutil.LimitListener(ln, s.cfg.MaxHTTPConnections)
	}
	hs := &httpServer{
		srv: &http.Server{
			Handler: s.echo,
			// The API answers from memory; a request that takes longer than the timeout to arrive
			// or to be answered is a stuck client, and its connection is better closed.
			ReadHeaderTimeout: s.cfg.RequestTimeout,
			ReadTimeout:       s.cfg.RequestTimeout,
			WriteTimeout:      s.cfg.RequestTimeout,
			IdleTimeout:       s.cfg.IdleTimeout,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			ConnState:         s.metrics.HTTP.ConnState,
		},
		done: make(chan error, 1),
		log:  s.log,
	}
	go func() { hs.done <- hs.srv.Serve(ln) }()
	s.log.Info("Listening", "address", ln.Addr().String())
	return hs
}

// close stops serving at once, cutting off the requests in flight.
func (hs *httpServer) close() {
	_ = hs.srv.Close() // it can only fail to close the listener, which Serve then reports
	if err := <-hs.done; !errors.Is(err, http.ErrServerClosed) {
		hs.log.Warn("HTTP server failed", "error", err.Error())
	}
}

// shutdown stops accepting connections and waits up to timeout for the requests in flight.
func (hs *httpServer) shutdown(ctx context.Context, timeout time.Duration) error {
	hs.log.Info("Shutting down", "timeout", timeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := hs.srv.Shutdown(shutdownCtx); err != nil {
		hs.close() // whatever did not finish in time is cut off
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-hs.done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	hs.log.Info("Stopped")
	return nil
}

// purgeExpired removes expired filters every PurgeInterval. Requests already answer 404 for
// them; purging gives their memory back. Tombstones, kept for days, are swept once a minute:
// the sweep holds the lock that creates and deletes take.
func (s *Server) purgeExpired(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.PurgeInterval)
	defer ticker.Stop()
	tombstones := time.NewTicker(time.Minute)
	defer tombstones.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			for _, name := range s.store.PurgeExpired() {
				s.log.Info("Purged expired filter", "filter", name)
			}
		case <-tombstones.C:
			if n := s.store.PurgeTombstones(); n > 0 {
				s.log.Info("Forgot tombstones of deleted filters past their retention", "tombstones", n, "retention", filter.TombstoneRetention.String())
			}
		}
	}
}
