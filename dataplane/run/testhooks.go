package run

import (
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/internal/tick"
)

// The hooks below are for tests only: the harness in test/dataplane, which assembles data planes
// for the tests of httpapi, resp and metrics as well as run's own, is outside this package.

// SetBeforeRecovery makes Run call f when recovery starts, so that a test can hold recovery open
// and look at the data plane meanwhile.
func SetBeforeRecovery(d *DataPlane, f func()) { d.beforeRecovery = f }

// AddRoute mounts h at GET path behind the API's middleware, for handlers that only tests have,
// such as one that panics.
func AddRoute(d *DataPlane, path string, h echo.HandlerFunc) {
	d.ClientHandler().(*echo.Echo).GET(path, h)
}

// NewWithTime is New with clock deciding expiry and every, in place of tick.Every, running the
// periodic work (purges, snapshot triggers), so that a test moves time instead of waiting for it.
func NewWithTime(cfg config.Config, log *slog.Logger, clock func() time.Time, every tick.Func) (*DataPlane, error) {
	return newDataPlane(cfg, log, clock, every)
}
