package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// The public API's side of replication (docs/replication.md): the consistency parameter,
// forwarding to a filter's home (decided by the write service) and quorum reads.

// forwarded reports whether a peer sent this request on a client's behalf: it is served here,
// not forwarded again. Only the internal port, whose callers hold the token, is believed.
func forwarded(c echo.Context) bool {
	return strings.HasPrefix(c.Path(), wire.InternalBasePath) && c.Request().Header.Get(wire.ForwardedHeader) != ""
}

// consistency reads ?consistency=, or def when the request has none.
func consistency(c echo.Context, def wire.Consistency) (wire.Consistency, error) {
	if c.Request().URL.RawQuery == "" {
		return def, nil
	}
	level, err := wire.ParseConsistency(c.QueryParam(wire.ConsistencyParam), def)
	if err != nil {
		return "", invalidParameter(wire.ConsistencyParam, err.Error())
	}
	return level, nil
}

// writeLevel is the consistency of a write request.
func (s *Server) writeLevel(c echo.Context) (wire.Consistency, error) {
	return consistency(c, s.Node.WriteConsistency())
}

// forwardToHome sends a request that must be served by the filter's home pod (check-and-set,
// create) there, and answers the home's answer, or 503 code 13 when the home did not serve it.
// It reports false when this pod is the home: the request is then served here, with its body put
// back.
func (s *Server) forwardToHome(c echo.Context) (bool, error) {
	name, err := url.PathUnescape(c.Param(wire.NameParam))
	if forwarded(c) {
		if err != nil {
			return false, nil //nolint:nilerr // served here, where filterName answers the error
		}
		return false, writeError(s.Writes.AcceptForwarded(name), false)
	}
	if err != nil || !s.Writes.HomeElsewhere(name) {
		return false, nil //nolint:nilerr // served here, where filterName answers the error
	}
	req := c.Request()
	raw, err := s.readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return false, err
	}
	a := s.Writes.ForwardToHome(req.Context(), name, writes.Request{
		Method: req.Method, URI: req.URL.RequestURI(), ContentType: req.Header.Get(echo.HeaderContentType), Body: raw,
	})
	if a != nil {
		return true, c.Blob(a.Status, a.ContentType, a.Body)
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	return false, nil
}

// checkPeers widens a read as its level asks (writes.Service.AsksPeers): the values absent here
// are asked of enough peers, and present ORs in their answers. A request a peer forwarded here
// is answered from this pod's copy: the peer counts it.
func (s *Server) checkPeers(c echo.Context, level wire.Consistency, name string, values []string, present []bool) error {
	if forwarded(c) {
		return nil
	}
	if err := s.Writes.CheckPeers(c.Request().Context(), level, name, values, present); err != nil {
		return &apiError{http.StatusServiceUnavailable, wire.CodeReplication, err.Error()}
	}
	return nil
}
