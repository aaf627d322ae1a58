package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// instrument is the middleware every request goes through. It gives the request an ID (the
// client's X-Request-Id, else one from newID) and answers with it; it answers a panic with a 500
// and logs its stack, passing http.ErrAbortHandler on as net/http expects; and it records the
// request in the metrics and, at debug level, in one access-log line, with the status sent, a
// panic's 500 included. One middleware rather than echo's RequestID and Recover and ours: echo
// applies global middleware anew for every request, and each layer costs a closure.
func (s *Server) instrument(newID func() string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req, res := c.Request(), c.Response()
			id := req.Header.Get(echo.HeaderXRequestID)
			if id == "" {
				id = newID()
			}
			res.Header().Set(echo.HeaderXRequestID, id)
			start := time.Now()
			s.Metrics.HTTP.Started()
			// Deferred so that the in-flight gauge comes down even for http.ErrAbortHandler.
			defer s.observe(c, id, start)
			if err := s.recoverPanic(next, c); err != nil {
				c.Error(err) // answers now, so that the status recorded is the one sent
			}
			return nil
		}
	}
}

// recoverPanic calls next and turns a panic into a 500.
func (s *Server) recoverPanic(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		perr, ok := r.(error)
		if !ok {
			perr = fmt.Errorf("%v", r)
		}
		if errors.Is(perr, http.ErrAbortHandler) {
			panic(r)
		}
		stack := make([]byte, 4<<10)
		stack = stack[:runtime.Stack(stack, false)]
		s.Log.Error("Recovered from panic", "path", c.Request().URL.Path, "error", perr.Error(), "stack", string(stack))
		err = &apiError{http.StatusInternalServerError, wire.CodeInternal, "internal error: " + perr.Error()}
	}()
	return next(c)
}

// observe records a finished request.
func (s *Server) observe(c echo.Context, id string, start time.Time) {
	req, res := c.Request(), c.Response()
	elapsed := time.Since(start)
	route := c.Path()
	if !s.routePaths[route] {
		route = ""
	}
	s.Metrics.HTTP.Finished(route, req.Method, res.Status, elapsed)
	if s.Log.Enabled(req.Context(), slog.LevelDebug) {
		s.Log.LogAttrs(req.Context(), slog.LevelDebug, "Request",
			slog.String("method", req.Method),
			slog.String("route", route),
			slog.String("path", req.URL.Path),
			slog.Int("status", res.Status),
			slog.Duration("duration", elapsed),
			slog.String("requestId", id))
	}
}

// scrapeMetrics serves /metrics; see metrics.Handler.
func (s *Server) scrapeMetrics(c echo.Context) error {
	resp, err := s.Metrics.Handler().Scrape(c.Request())
	if err != nil {
		if c.Request().Context().Err() != nil { // the scraper went away while it waited
			return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "metrics: " + err.Error()}
		}
		return &apiError{http.StatusInternalServerError, wire.CodeInternal, "metrics: " + err.Error()}
	}
	resp.Write(c.Response())
	return nil
}
