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
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/net/netutil"

	"github.com/bloomery/bloomery/dataplane/api"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
)

// Server is the data plane's HTTP server.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store *filter.Store
	echo  *echo.Echo
}

// persistence is the part of the configuration the persister takes.
func (c Config) persistence(log *slog.Logger) persist.Options {
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
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	e.Use(middleware.RequestIDWithConfig(middleware.RequestIDConfig{Generator: requestIDs()}))
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.log.Error("Recovered from panic", "path", c.Request().URL.Path, "error", err, "stack", string(stack))
			return &apiError{http.StatusInternalServerError, api.CodeInternal, "internal error: " + err.Error()}
		},
	}))

	v1 := e.Group(api.BasePath)
	v1.GET("/ping", s.ping)
	filters := v1.Group("/bloomfilter")
	filters.GET("/list", s.listFilters)
	filters.PUT("/:name", s.createFilter)
	filters.GET("/:name", s.getFilter)
	filters.DELETE("/:name", s.deleteFilter)
	filters.POST("/:name/check", s.check)
	filters.POST("/:name/multi-check", s.multiCheck)
	filters.POST("/:name/check-and-set", s.checkAndSet)
	filters.POST("/:name/multi-check-and-set", s.multiCheckAndSet)
	filters.POST("/:name/set", s.set)
	filters.POST("/:name/multi-set", s.multiSet)
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

// Run locks the data directory and recovers the filters from it, serves on ln until ctx is
// cancelled, then shuts down gracefully within cfg.GracefulShutdownTimeout and takes a final
// snapshot. It returns nil after a clean shutdown. With cfg.InMemory nothing touches the disk.
func (s *Server) Run(ctx context.Context, ln net.Listener) (err error) {
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	if s.cfg.InMemory {
		s.log.Warn("Persistence is off: filters live in memory only and are lost when the process ends")
		return s.serve(ctx, ln)
	}
	p, err := persist.Open(s.cfg.persistence(s.log))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	if _, err := p.Recover(s.store); err != nil {
		return fmt.Errorf("recovering from %s: %w", s.cfg.DataDir, err)
	}
	persistCtx, stopPersisting := context.WithCancel(context.WithoutCancel(ctx))
	persisting := make(chan struct{})
	go func() {
		defer close(persisting)
		p.Run(persistCtx)
	}()
	err = s.serve(ctx, ln)
	stopPersisting()
	<-persisting
	// The HTTP server is down: no request changes the filters while the last snapshot runs.
	if serr := p.Snapshot(); serr != nil {
		return errors.Join(err, fmt.Errorf("final snapshot: %w", serr))
	}
	return err
}

// serve answers requests on ln until ctx is cancelled, then shuts the HTTP server down.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.MaxHTTPConnections > 0 {
		ln = netutil.LimitListener(ln, s.cfg.MaxHTTPConnections)
	}
	srv := &http.Server{
		Handler: s.echo,
		// The API answers from memory; a request that takes longer than the timeout to arrive
		// or to be answered is a stuck client, and its connection is better closed.
		ReadHeaderTimeout: s.cfg.RequestTimeout,
		ReadTimeout:       s.cfg.RequestTimeout,
		WriteTimeout:      s.cfg.RequestTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}

	purgeCtx, stopPurge := context.WithCancel(ctx)
	defer stopPurge()
	purgeDone := make(chan struct{})
	go func() {
		defer close(purgeDone)
		s.purgeExpired(purgeCtx)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	s.log.Info("Listening", "address", ln.Addr().String())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("Shutting down", "timeout", s.cfg.GracefulShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.GracefulShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	stopPurge()
	<-purgeDone
	if err != nil {
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	s.log.Info("Stopped")
	return nil
}

// purgeExpired removes expired filters every PurgeInterval. Requests already answer 404 for
// them; purging gives their memory back.
func (s *Server) purgeExpired(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.PurgeInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			for _, name := range s.store.PurgeExpired() {
				s.log.Info("Purged expired filter", "filter", name)
			}
		}
	}
}
