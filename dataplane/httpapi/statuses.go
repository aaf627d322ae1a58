package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// statusesPoll is how often a waiting FilterStatusesPath request looks at the filters again.
// Looking costs a map walk without counting a bit, and the operator, the only caller, is content
// with learning of a change within a second.
const statusesPoll = time.Second

// filterStatuses answers wire.FilterStatusesPath: at once, or once the filters' version differs
// from the one the caller holds, or when its wait is over.
func (s *Server) filterStatuses(c echo.Context) error {
	held := c.QueryParam("version")
	changes := c.QueryParam("changes") == "true"
	wait, err := statusesWait(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	if wait > 0 {
		// The server's read and write deadlines are the request timeout's, far shorter than a
		// long poll: an expired read deadline would cancel the request, a write one lose the
		// answer.
		rc := http.NewResponseController(c.Response().Writer)
		deadline := time.Now().Add(wait + s.Config.RequestTimeout)
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
	}
	ctx := c.Request().Context()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	tick := time.NewTicker(statusesPoll)
	defer tick.Stop()
	for {
		live := s.liveStatuses()
		version := s.statusLog.look(live, s.Store.Tombstones())
		// A pod shutting down answers at once: a poll held to its end would hold the graceful
		// shutdown, which waits for the requests under way.
		if version != held || wait == 0 || s.currentPhase() == Draining {
			return c.JSON(http.StatusOK, s.statusLog.answer(version, live, held, changes))
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			// The counts move without moving the version: they come with every filter.
			return c.JSON(http.StatusOK, s.statusLog.answer(version, live, "", false))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// statusesWait reads the wait parameter: whole seconds, 0 to MaxStatusesWait; absent is 0.
func statusesWait(raw string) (time.Duration, error) {
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > wire.MaxStatusesWait {
		return 0, badRequest(fmt.Sprintf("wait: must be whole seconds from 0 to %d, got %q", wire.MaxStatusesWait, raw))
	}
	return time.Duration(n) * time.Second, nil
}

// liveStatuses lists the live filters' statuses, sorted by name.
func (s *Server) liveStatuses() []liveStatus {
	now := s.Store.Now()
	var out []liveStatus
	s.Store.Range(func(f *filter.Filter) bool {
		if !f.Expired(now) {
			out = append(out, liveStatus{s.statusOf(f), f.Generation()})
		}
		return true
	})
	slices.SortFunc(out, func(a, b liveStatus) int { return strings.Compare(a.status.Name, b.status.Name) })
	return out
}
