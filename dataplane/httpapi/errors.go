package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// apiError is an answer with an error body: HTTP status, our code and a message for people.
type apiError struct {
	status  int
	code    int
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(message string) error {
	return &apiError{http.StatusBadRequest, wire.CodeBadParameter, message}
}

func errBodyTooLarge(limit int64) error {
	return &apiError{http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge,
		fmt.Sprintf("request body larger than maxHttpRequestLength (%d bytes)", limit)}
}

// engineError maps the engine's errors to answers. A create that is too large is a bad
// parameter (the request asked for it); a write that cannot grow the filter is out of space.
func engineError(err error, creating bool) error {
	switch {
	case errors.Is(err, filter.ErrNotFound):
		return &apiError{http.StatusNotFound, wire.CodeFilterNotFound, err.Error() + "; create it with PUT " + wire.FiltersPath + "/<name>"}
	case errors.Is(err, filter.ErrInvalidName):
		return invalidParameter("name", err.Error())
	case errors.Is(err, filter.ErrInvalidOptions):
		return badRequest(err.Error())
	case errors.Is(err, filter.ErrTooLarge) && creating:
		return invalidParameter("expectedInsertions", err.Error())
	case errors.Is(err, filter.ErrTooLarge), errors.Is(err, filter.ErrOutOfMemory):
		return &apiError{http.StatusInsufficientStorage, wire.CodeInsufficientSpace, err.Error()}
	case errors.Is(err, filter.ErrNotJournaled):
		return &apiError{http.StatusInsufficientStorage, wire.CodeNotJournaled, err.Error()}
	}
	return err
}

// writeError maps the write service's errors, then the engine's, to answers.
func writeError(err error, creating bool) error {
	if err == nil {
		return nil
	}
	if hu, ok := errors.AsType[*writes.HomeUnavailableError](err); ok {
		return &apiError{http.StatusServiceUnavailable, hu.Code, hu.Reason}
	}
	if nh, ok := errors.AsType[*writes.NotHomeError](err); ok {
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, nh.Reason}
	}
	if peer, ok := errors.AsType[*client.Error](err); ok && peer.Code != 0 { // the answer of the pod a request was routed to
		return &apiError{peer.Status, peer.Code, err.Error()}
	}
	switch {
	case errors.Is(err, writes.ErrCatchingUp), errors.Is(err, filter.ErrNotHeld):
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error()}
	case errors.Is(err, writes.ErrReplication):
		return &apiError{http.StatusServiceUnavailable, wire.CodeReplication, err.Error()}
	}
	return engineError(err, creating)
}

// handleError writes every error as {"error","code"}, including echo's own (unknown route,
// wrong method) and panics caught by the recover middleware.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ae, ok := errors.AsType[*apiError](err)
	if !ok {
		ae = s.unexpectedError(err, c)
	}
	// 503s are expected while the filters are recovered and mean nothing went wrong; the access
	// log at debug level has them.
	if ae.status >= 500 && ae.status != http.StatusServiceUnavailable {
		s.Log.Error("Request failed", "method", c.Request().Method, "path", c.Request().URL.Path,
			"status", ae.status, "error", ae.message, "requestId", c.Response().Header().Get(echo.HeaderXRequestID))
	}
	if err := c.JSON(ae.status, wire.ErrorBody{Error: ae.message, Code: ae.code}); err != nil {
		s.Log.Debug("Could not write error response", "error", err)
	}
}

func (s *Server) unexpectedError(err error, c echo.Context) *apiError {
	if he, ok := errors.AsType[*echo.HTTPError](err); ok {
		req := c.Request()
		switch he.Code {
		case http.StatusNotFound:
			return &apiError{he.Code, wire.CodeNoSuchRoute, "no such endpoint: " + req.Method + " " + req.URL.Path + s.routeHint(req)}
		case http.StatusMethodNotAllowed:
			return &apiError{he.Code, wire.CodeNoSuchRoute, "method " + req.Method + " not allowed on " + req.URL.Path + s.routeHint(req)}
		}
		return &apiError{he.Code, wire.CodeInternal, fmt.Sprint(he.Message)}
	}
	return &apiError{http.StatusInternalServerError, wire.CodeInternal, "internal error: " + err.Error()}
}

// routeHint says what a request that matched no route likely meant, or "".
func (s *Server) routeHint(req *http.Request) string {
	path := req.URL.Path
	switch {
	case len(path) > 1 && strings.HasSuffix(path, "/") && path != wire.DocsPath+"/":
		return "; paths take no trailing slash: " + strings.TrimRight(path, "/")
	case strings.HasPrefix(path, wire.DocsPath) && s.docsPage == nil:
		return "; this data plane serves no documentation: start it with -d (--docs)"
	case req.Method == http.MethodPost && strings.HasPrefix(path, wire.FiltersPath+"/") && strings.Count(path, "/") == 3:
		return "; create a filter with PUT " + path
	}
	return ""
}
