package server

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/api"
)

// observe records every request in the metrics and, at debug level, in one access-log line.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		s.metrics.HTTP.Started()
		// Deferred so that the in-flight gauge comes down even for a panic that the recovery
		// middleware passes on (http.ErrAbortHandler).
		defer func() {
			req, res := c.Request(), c.Response()
			elapsed := time.Since(start)
			route := c.Path()
			if !s.routePaths[route] {
				route = ""
			}
			s.metrics.HTTP.Finished(route, req.Method, res.Status, elapsed)
			if s.log.Enabled(req.Context(), slog.LevelDebug) {
				s.log.LogAttrs(req.Context(), slog.LevelDebug, "Request",
					slog.String("method", req.Method),
					slog.String("route", route),
					slog.String("path", req.URL.Path),
					slog.Int("status", res.Status),
					slog.Duration("duration", elapsed),
					slog.String("requestId", res.Header().Get(echo.HeaderXRequestID)))
			}
		}()
		if err := next(c); err != nil {
			c.Error(err) // answers now, so that the status recorded is the one sent
		}
		return nil
	}
}

// scrapeMetrics serves /metrics; see metrics.Handler.
func (s *Server) scrapeMetrics(c echo.Context) error {
	resp, err := s.metrics.Handler().Scrape(c.Request())
	if err != nil {
		if c.Request().Context().Err() != nil { // the scraper went away while it waited
			return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "metrics: " + err.Error()}
		}
		return &apiError{http.StatusInternalServerError, api.CodeInternal, "metrics: " + err.Error()}
	}
	resp.Write(c.Response())
	return nil
}
