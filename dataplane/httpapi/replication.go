package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The server's side of replication (docs/replication.md): the request paths consult the
// cluster node, which does the talking to peers.

// forwarded reports whether a peer sent this request on a client's behalf: it is served here,
// not forwarded again.
func forwarded(c echo.Context) bool { return c.Request().Header.Get(wire.ForwardedHeader) != "" }

// consistency reads ?consistency=, or def when the request has none.
func consistency(c echo.Context, def wire.Consistency) (wire.Consistency, error) {
	if c.Request().URL.RawQuery == "" {
		return def, nil
	}
	level, err := replication.Consistency(c.QueryParam(wire.ConsistencyParam), def)
	if err != nil {
		return "", invalidParameter(wire.ConsistencyParam, err.Error())
	}
	return level, nil
}

// writeLevel is the consistency of a write request.
func (s *Server) writeLevel(c echo.Context) (wire.Consistency, error) {
	return consistency(c, s.Node.WriteConsistency())
}

// replicate sends a write applied here to the peers and waits for the level's acknowledgements.
func (s *Server) replicate(c echo.Context, level wire.Consistency, op replication.Op) error {
	err := s.Node.Replicate(c.Request().Context(), op, level)
	if errors.Is(err, replication.ErrReplication) {
		// Each such write is answered 503 and counted (bloomery_replication_write_failures_total);
		// while a peer is down that is every write, so the warning is spaced out.
		s.Log.Log(c.Request().Context(), s.spacedLevel("write not acknowledged"),
			"Write not acknowledged by enough pods (warned at most every 10 s; bloomery_replication_write_failures_total counts them all)",
			"filter", op.Name, "op", op.Kind, "error", err.Error())
		return &apiError{http.StatusServiceUnavailable, wire.CodeReplication, err.Error()}
	}
	return err
}

// replicateAdd replicates keys added to f, when there are peers to tell.
func (s *Server) replicateAdd(c echo.Context, level wire.Consistency, f *filter.Filter, keys []string) error {
	if !s.Node.Replicating() || len(keys) == 0 {
		return nil
	}
	return s.replicate(c, level, replication.Op{Kind: replication.OpAdd, Name: f.Name(), Generation: f.Generation(), Keys: keys})
}

// forwardToHome sends a request that must be served by the filter's home pod (check-and-set,
// create) there, and answers the home's answer. It reports false when this pod is the home, or
// every pod before it in the filter's order is unreachable: the request is then served here,
// with its body put back.
func (s *Server) forwardToHome(c echo.Context) (bool, error) {
	if forwarded(c) {
		// The sender takes a 503 with code 7 as its cue to try the next pod in the filter's
		// order. A pod still catching up would answer false for values its peers hold; a pod
		// that knows no peers (its membership is behind the sender's) would acknowledge a
		// write that no other pod holds.
		switch {
		case !s.Node.Ready():
			return false, &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "catching up from the peers; not serving as a filter's home yet"}
		case !s.Node.Replicating():
			return false, &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "this pod knows no peers yet; not serving as a filter's home"}
		}
		return false, nil
	}
	if !s.Node.Replicating() {
		return false, nil
	}
	name, err := url.PathUnescape(c.Param("name"))
	if err != nil {
		return false, nil //nolint:nilerr // served here, where filterName answers the error
	}
	order, self := s.Node.HomeOrder(name)
	if len(order) == 0 || order[0].Name == self {
		return false, nil
	}
	req := c.Request()
	raw, err := readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return false, err
	}
	for _, m := range order {
		if m.Name == self {
			break
		}
		a, err := s.Node.Forward(req.Context(), m, req.Method, req.URL.RequestURI(), req.Header.Get(echo.HeaderContentType), raw)
		if err != nil {
			s.failedOver(c, name, m.Name, err)
			continue
		}
		return true, c.Blob(a.Status, a.ContentType, a.Body)
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	return false, nil
}

// warnEvery spaces the warnings of one kind: while a pod is down or restarts, every write (or
// every check-and-set of the filters it is home of) meets the same problem, hundreds a second.
const warnEvery = 10 * time.Second

// spacedLevel is the level of a warning of the given kind: warning at most every warnEvery,
// debug in between.
func (s *Server) spacedLevel(kind string) slog.Level {
	v, _ := s.warned.LoadOrStore(kind, new(atomic.Int64))
	last := v.(*atomic.Int64)
	now, prev := time.Now().UnixNano(), last.Load()
	if now-prev < int64(warnEvery) || !last.CompareAndSwap(prev, now) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// failedOver counts a request that its filter's home did not serve, and warns about that home.
func (s *Server) failedOver(c echo.Context, filter, home string, err error) {
	s.Node.Stats().HomeFailovers.Add(1)
	s.Log.Log(c.Request().Context(), s.spacedLevel("failover from "+home),
		"Filter's home pod did not serve a forwarded request; trying the next (warned at most every 10 s per home; bloomery_replication_home_failovers_total counts them all)",
		"filter", filter, "home", home, "error", err.Error())
}

// checkPeers widens a read to ?consistency=quorum|all: the values absent here are asked of
// enough peers, and present ORs in their answers.
func (s *Server) checkPeers(c echo.Context, level wire.Consistency, name string, values []string, present []bool) error {
	if level == wire.ConsistencyOne || forwarded(c) || !s.Node.Replicating() {
		return nil
	}
	var absent []string
	var at []int
	for i, p := range present {
		if !p {
			absent, at = append(absent, values[i]), append(at, i)
		}
	}
	if len(absent) == 0 {
		return nil
	}
	answers := make([]bool, len(absent))
	if err := s.Node.CheckPeers(c.Request().Context(), name, absent, level, answers); err != nil {
		return &apiError{http.StatusServiceUnavailable, wire.CodeReplication, err.Error()}
	}
	for j, i := range at {
		present[i] = answers[j]
	}
	return nil
}

func (s *Server) getMembership(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Node.Membership())
}

func (s *Server) putMembership(c echo.Context) error {
	var m wire.Membership
	if err := decodeJSON(c, s.Config.MaxHTTPRequestLength, &m); err != nil {
		return err
	}
	err := s.Node.SetMembership(m)
	switch {
	case errors.Is(err, replication.ErrStaleEpoch):
		return &apiError{http.StatusConflict, wire.CodeStaleEpoch, err.Error()}
	case err != nil:
		return badRequest("invalid membership: " + err.Error())
	}
	return c.JSON(http.StatusOK, s.Node.Membership())
}

// applyOps applies a batch of a peer's writes.
func (s *Server) applyOps(c echo.Context) error {
	var req wire.ApplyRequest[replication.Op]
	limit := replication.ApplyBodyLimit(s.Config.MaxHTTPRequestLength)
	if c.Request().Header.Get(echo.HeaderContentType) == wire.OpsContentType {
		// What peers send; JSON is accepted too, for people and tools.
		raw, err := readLimited(c, limit)
		if err != nil {
			return err
		}
		if req.Ops, err = replication.DecodeOps(raw); err != nil {
			return badRequest(err.Error())
		}
	} else if err := decodeJSON(c, limit, &req); err != nil {
		return err
	}
	applied, err := s.Node.Apply(req.Ops)
	if err != nil {
		return badRequest(err.Error())
	}
	return c.JSON(http.StatusOK, wire.ApplyResponse{Applied: applied})
}

func (s *Server) inventory(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Node.Inventory())
}

// dump streams the filter's state in the snapshot's record format.
func (s *Server) dump(c echo.Context) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	st := f.State()
	// A dump of a large filter takes longer than the server's write timeout, meant for answers
	// from memory; a stalled reader is the peer's to give up on.
	if err := http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("lifting the write deadline for a dump: %w", err)
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEOctetStream)
	c.Response().WriteHeader(http.StatusOK)
	return persist.WriteDump(c.Response(), st)
}

// merge ORs a dump into the filter of the path, which must have the dump's shape. The bits reach
// the other pods through anti-entropy.
func (s *Server) merge(c echo.Context) error {
	raw, err := readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	st, err := persist.ReadDump(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return badRequest("invalid dump: " + err.Error())
	}
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	res, err := f.MergeBits(st)
	if err != nil {
		return engineError(err, false)
	}
	if res.LayersChanged > 0 {
		if err := s.Durable(); err != nil {
			return fmt.Errorf("merged, but not yet durable: %w", err)
		}
	}
	s.Log.Info("Merged a dump", "filter", f.Name(), "layersChanged", res.LayersChanged, "bytesChanged", res.BytesChanged)
	return c.JSON(http.StatusOK, s.describe(f.Info()))
}

// decodeJSON reads a body of the internal endpoints into v, strictly: they are called by the
// operator and by peers, whose mistakes should show at once.
func decodeJSON(c echo.Context, limit int64, v any) error {
	raw, err := readLimited(c, limit)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: " + err.Error())
	}
	return nil
}
