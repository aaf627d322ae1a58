package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/sync/semaphore"

	"github.com/bloomery/bloomery/dataplane/batchstream"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// The HTTP side of replication (docs/replication.md): the consistency parameter, forwarding to a
// filter's home (decided by the write service), quorum reads, and the internal endpoints that the
// operator and the peers call.

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

// forwardToHome sends a request that must be served by the filter's home pod (check-and-set,
// create) there, and answers the home's answer. It reports false when this pod is the home, or
// every pod before it in the filter's order is unreachable: the request is then served here,
// with its body put back.
func (s *Server) forwardToHome(c echo.Context) (bool, error) {
	if forwarded(c) {
		return false, writeError(s.Writes.AcceptForwarded(), false)
	}
	name, err := url.PathUnescape(c.Param(wire.NameParam))
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
	if err := s.decodeJSON(c, s.Config.MaxHTTPRequestLength, &m); err != nil {
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
		raw, err := s.readLimited(c, limit)
		if err != nil {
			return err
		}
		applied, err := s.applyBatch(raw)
		if err != nil {
			return badRequest(err.Error())
		}
		return c.JSON(http.StatusOK, wire.ApplyResponse{Applied: applied})
	}
	if err := s.decodeJSON(c, s.Config.MaxHTTPRequestLength, &req); err != nil {
		// JSON, which no peer sends, costs a string header and more for each key of three
		// bytes: it gets a client's limit, not the eightfold one of binary batches.
		return err
	}
	applied, err := s.Node.Apply(req.Ops)
	if err != nil {
		return badRequest(err.Error())
	}
	return c.JSON(http.StatusOK, wire.ApplyResponse{Applied: applied})
}

// applyBatch applies a batch in the binary form of wire.OpsContentType.
func (s *Server) applyBatch(raw []byte) ([]bool, error) {
	ops, err := replication.DecodeOps(raw)
	if err != nil {
		return nil, err
	}
	return s.Node.Apply(ops)
}

// applyStream takes a peer's batches on the request's connection from now on (package
// batchstream). The request ends with the upgrade, so that the API's metrics and logs see an
// upgrade, not a request as long as the stream.
func (s *Server) applyStream(c echo.Context) error {
	err := s.streams.Upgrade(c.Response().Writer, c.Request())
	if bad, ok := errors.AsType[*batchstream.BadUpgradeError](err); ok {
		return badRequest(bad.Reason)
	}
	if errors.Is(err, batchstream.ErrClosed) {
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error()}
	}
	if err != nil {
		return err
	}
	c.Response().Status, c.Response().Committed = http.StatusSwitchingProtocols, true
	return nil
}

// CloseStreams ends the peers' streams and returns once none is served: the pod is shutting
// down, and what they would apply must not race the final snapshot.
func (s *Server) CloseStreams() { s.streams.Close() }

func (s *Server) inventory(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Node.Inventory())
}

// dump streams the filter's state in the snapshot's record format. Its checksum comes first, so
// the bits are copied: copies share dumpCopyBytes, and a dump that would exceed it waits for
// others to finish (one larger than all of it runs alone), so that any number of dumps holds at
// most the largest filter or dumpCopyBytes, whichever is more.
func (s *Server) dump(c echo.Context) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	only, err := dumpPartitions(c, f.Partitions())
	if err != nil {
		return err
	}
	release, err := s.dumpCopies.acquire(c.Request().Context(), f.SizeBytes())
	if err != nil {
		return fmt.Errorf("waiting for other dumps to finish: %w", err)
	}
	defer release()
	st, releaseCopy, err := f.CopyState(only)
	if err != nil {
		return engineError(err, false)
	}
	defer releaseCopy()
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEOctetStream)
	c.Response().WriteHeader(http.StatusOK)
	return persist.WriteDump(stallDeadline{c.Response().Writer, s.Config.RequestTimeout}, st)
}

// dumpPartitions reads ?partitions= of a dump: the partitions listed (an empty list: none),
// every one when absent.
func dumpPartitions(c echo.Context, partitions int) (filter.Holds, error) {
	raw, given := c.QueryParams()[wire.PartitionsParam]
	if !given {
		return filter.All, nil
	}
	want := make([]bool, partitions)
	for field := range strings.SplitSeq(strings.Join(raw, ","), ",") {
		if field == "" {
			continue
		}
		p, err := strconv.Atoi(field)
		if err != nil || p < 0 || p >= partitions {
			return nil, invalidParameter(wire.PartitionsParam, fmt.Sprintf("%q is not a partition of the filter's %d", field, partitions))
		}
		want[p] = true
	}
	return func(p int) bool { return want[p] }, nil
}

// checkRoom answers whether this pod can hold the filters of a batch of creates, as it would
// answer the creates (507 when it cannot).
func (s *Server) checkRoom(c echo.Context) error {
	raw, err := s.readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	ops, err := replication.DecodeOps(raw)
	if err != nil {
		return badRequest(err.Error())
	}
	for _, op := range ops {
		if op.Kind != replication.OpCreate || op.Options == nil {
			return badRequest(fmt.Sprintf("a room check takes creates, not %q", op.Kind))
		}
		if err := s.Node.CheckRoom(op.Name, *op.Options); err != nil {
			return engineError(err, false)
		}
	}
	return c.NoContent(http.StatusOK)
}

func (s *Server) placementStatus(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Node.PlacementStatus())
}

// dumpCopyBytes bounds the bits that concurrent dumps hold copies of.
const dumpCopyBytes = 64 << 20

// copyBudget shares a number of bytes between copies: a copy larger than all of it takes all of
// it, and so runs alone.
type copyBudget struct {
	sem   *semaphore.Weighted
	limit int64
}

func newCopyBudget(limit int64) copyBudget {
	return copyBudget{sem: semaphore.NewWeighted(limit), limit: limit}
}

// acquire waits until a copy of size bytes fits; release gives its share back.
func (b copyBudget) acquire(ctx context.Context, size uint64) (release func(), err error) {
	share := int64(min(size, uint64(b.limit)))
	if err := b.sem.Acquire(ctx, share); err != nil {
		return nil, err
	}
	return func() { b.sem.Release(share) }, nil
}

// stallDeadline gives every write its own deadline, timeout from its start: a dump of a large
// filter takes as long as it takes, while a reader that stops reading is dropped, and the copy
// it held with it.
type stallDeadline struct {
	w       http.ResponseWriter
	timeout time.Duration
}

func (s stallDeadline) Write(p []byte) (int, error) {
	if err := http.NewResponseController(s.w).SetWriteDeadline(time.Now().Add(s.timeout)); err != nil {
		return 0, fmt.Errorf("extending the write deadline of a dump: %w", err)
	}
	return s.w.Write(p)
}

// merge ORs a dump into the filter of the path, which must have the dump's shape. The bits reach
// the other pods through anti-entropy.
func (s *Server) merge(c echo.Context) error {
	raw, err := s.readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	st, release, err := persist.ReadDump(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return badRequest("invalid dump: " + err.Error())
	}
	defer release()
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	if s.Writes.Placed() && len(st.Parts) == f.Partitions() {
		// The pod takes the partitions it holds; the others' owners are not asked.
		for p := range st.Parts {
			if !f.Holds(p) {
				st.Parts[p].Layers = nil
			}
		}
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
func (s *Server) decodeJSON(c echo.Context, limit int64, v any) error {
	raw, err := s.readLimited(c, limit)
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
