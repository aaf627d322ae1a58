package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// authenticate lets through only requests that carry the internal token as a bearer token. The
// answer does not say whether the token was missing or wrong, nothing about it is logged, and
// the connection is closed after it.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		given, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
		// Digests of equal length, so that the comparison takes the same time whatever the length
		// of what was sent.
		if !ok || s.tokenDigest == nil || subtle.ConstantTimeCompare(digest(given), s.tokenDigest) != 1 {
			s.Metrics.HTTP.Unauthorized()
			// The connection is closed after the answer: a caller without the token has nothing
			// more to ask, and connections kept open would hold the port's budget.
			c.Response().Header().Set(echo.HeaderConnection, "close")
			s.Metrics.HTTP.ConnClosed("internal", "unauthorized")
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="bloomery-internal"`)
			return &apiError{http.StatusUnauthorized, wire.CodeUnauthorized,
				"this port serves the operator and the cluster's pods: the request needs the cluster's bearer token"}
		}
		return next(c)
	}
}

func digest(token string) []byte {
	d := sha256.Sum256([]byte(token))
	return d[:]
}
