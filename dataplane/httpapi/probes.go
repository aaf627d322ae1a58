package httpapi

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// healthz answers while the process serves HTTP: a liveness probe that restarts the pod when it
// fails should not fire during a long recovery.
func (s *Server) healthz(c echo.Context) error {
	return c.String(http.StatusOK, "ok")
}

// readyz answers 200 only while the filter API serves and no shutdown has begun.
func (s *Server) readyz(c echo.Context) error {
	switch s.currentPhase() {
	case Recovering:
		return s.recoveringError(c)
	case Draining:
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "not ready: shutting down"}
	}
	if err := s.logBroken(); err != nil {
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "not ready: " + err.Error()}
	}
	if !s.Node.Ready() {
		if known, _ := s.Node.Known(); !known {
			return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "not ready: waiting for the operator to tell this pod its peers"}
		}
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "not ready: catching up from the peers"}
	}
	return c.String(http.StatusOK, "ok")
}

// afterRecovery answers 503 for the filter API while the filters are being recovered: an empty
// store would answer 404s and accept creates that recovery would then overwrite.
func (s *Server) afterRecovery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.currentPhase() == Recovering {
			return s.recoveringError(c)
		}
		return next(c)
	}
}

// afterCatchUp refuses a filter request while the pod may lack what its peers hold: until it was
// told its membership and caught up from its peers (awaitMembership), it would answer a check
// false for a value they hold, or a check-and-set false for a value one of them answered false
// already. A peer's dump is served all the same: its bits only add to what the peer holds.
func (s *Server) afterCatchUp(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.Node.Ready() && !(forwarded(c) && strings.HasSuffix(c.Path(), "/"+string(wire.OpDump))) {
			c.Response().Header().Set("Retry-After", "1")
			return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable,
				"catching up from the peers; not serving yet: told no membership since the pod started, or not caught up since; retry shortly"}
		}
		return next(c)
	}
}

func (s *Server) recoveringError(c echo.Context) error {
	c.Response().Header().Set("Retry-After", "1")
	return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable,
		"recovering: the filters are being loaded from " + s.Config.DataDir + "; retry shortly"}
}
