package httpapi

import (
	"fmt"
	"hash/fnv"
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
		answer := s.statuses()
		// A pod shutting down answers at once: a poll held to its end would hold the graceful
		// shutdown, which waits for the requests under way.
		if answer.Version != held || wait == 0 || s.currentPhase() == Draining {
			return c.JSON(http.StatusOK, answer)
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			return c.JSON(http.StatusOK, answer)
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

// statuses lists the live filters' statuses, sorted by name, and their version: a hash of what
// the operator reports of each besides its counts, and of the tombstones.
func (s *Server) statuses() wire.FilterStatuses {
	now := s.Store.Now()
	type entry struct {
		status     wire.FilterStatus
		generation int64
	}
	var entries []entry
	s.Store.Range(func(f *filter.Filter) bool {
		if !f.Expired(now) {
			entries = append(entries, entry{s.statusOf(f), f.Generation()})
		}
		return true
	})
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.status.Name, b.status.Name) })
	out := wire.FilterStatuses{Filters: make([]wire.FilterStatus, len(entries))}
	h := fnv.New64a()
	for i, e := range entries {
		f := e.status
		out.Filters[i] = f
		// The generation tells a filter recreated under its name from the one before.
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00%d\x00%g\x00%t\x00%d\x00%d\x00%d\x00%d\x00", f.Name, e.generation, f.ExpectedInsertions, f.FPP,
			f.Scalable, f.Growth, f.Partitions, f.PartitionsHeld, f.PartitionsOwned)
	}
	// And the tombstones: a filter created and deleted between two looks leaves one, so the
	// version moves although the filters are as they were, and the operator, which may have
	// seen the filter in between, hears of it.
	tombstones := s.Store.Tombstones()
	slices.SortFunc(tombstones, func(a, b filter.Tombstone) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range tombstones {
		_, _ = fmt.Fprintf(h, "-%s\x00%d\x00", t.Name, t.Generation)
	}
	out.Version = strconv.FormatUint(h.Sum64(), 36)
	return out
}
