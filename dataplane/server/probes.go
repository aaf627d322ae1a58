package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/api"
)

// healthz answers while the process serves HTTP: a liveness probe that restarts the pod when it
// fails should not fire during a long recovery.
func (s *Server) healthz(c echo.Context) error {
	return c.String(http.StatusOK, "ok")
}

// readyz answers 200 only while the filter API serves and no shutdown has begun.
func (s *Server) readyz(c echo.Context) error {
	switch s.currentPhase() {
	case recovering:
		return s.recoveringError(c)
	case draining:
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "not ready: shutting down"}
	}
	if !s.node.Ready() {
		if known, _ := s.node.Known(); !known {
			return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "not ready: waiting for the operator to tell this pod its peers"}
		}
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "not ready: catching up from the peers"}
	}
	return c.String(http.StatusOK, "ok")
}

// afterRecovery answers 503 for the filter API while the filters are being recovered: an empty
// store would answer 404s and accept creates that recovery would then overwrite.
func (s *Server) afterRecovery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.currentPhase() == recovering {
			return s.recoveringError(c)
		}
		return next(c)
	}
}

func (s *Server) recoveringError(c echo.Context) error {
	c.Response().Header().Set("Retry-After", "1")
	return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable,
		"recovering: the filters are being loaded from " + s.cfg.DataDir + "; retry shortly"}
}
