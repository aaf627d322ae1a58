package run

import "github.com/labstack/echo/v4"

// SetBeforeRecovery makes Run call f when recovery starts, so that a test can hold recovery open
// and look at the data plane meanwhile.
func SetBeforeRecovery(d *DataPlane, f func()) { d.beforeRecovery = f }

// AddRoute mounts h at GET path behind the API's middleware, for handlers that only tests have,
// such as one that panics.
func AddRoute(d *DataPlane, path string, h echo.HandlerFunc) {
	d.ClientHandler().(*echo.Echo).GET(path, h)
}
