package server

import "github.com/labstack/echo/v4"

// SetBeforeRecovery makes Run call f when recovery starts, so that a test can hold recovery open
// and look at the server meanwhile.
func SetBeforeRecovery(s *Server, f func()) { s.beforeRecovery = f }

// AddRoute mounts h at GET path behind the server's middleware, for handlers that only tests
// have, such as one that panics.
func AddRoute(s *Server, path string, h echo.HandlerFunc) { s.echo.GET(path, h) }
