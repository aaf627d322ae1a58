package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The endpoints of the pod-to-pod protocol on the internal port, and the dumps and merges of the
// filter API: each decodes its request, lets the protocol's receiving end (peer.Server) apply
// it, and encodes the answer.

func (s *Server) getMembership(c echo.Context) error {
	return c.JSON(http.StatusOK, s.peers.Membership())
}

func (s *Server) putMembership(c echo.Context) error {
	var m wire.Membership
	if err := s.decodeJSON(c, s.Config.MaxHTTPRequestLength, &m); err != nil {
		return err
	}
	err := s.peers.SetMembership(m)
	switch {
	case errors.Is(err, peer.ErrStaleEpoch):
		return &apiError{http.StatusConflict, wire.CodeStaleEpoch, err.Error()}
	case errors.Is(err, peer.ErrMembershipNotKept):
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error()}
	case err != nil:
		return badRequest("invalid membership: " + err.Error())
	}
	return c.JSON(http.StatusOK, s.peers.Membership())
}

// applyOps applies a batch of a peer's writes.
func (s *Server) applyOps(c echo.Context) error {
	var applied []peer.Outcome
	if c.Request().Header.Get(echo.HeaderContentType) == wire.OpsContentType {
		// What peers send; JSON is accepted too, for people and tools.
		raw, err := s.readLimited(c, s.peers.BatchLimit())
		if err != nil {
			return err
		}
		if applied, err = s.peers.ApplyBatch(raw); err != nil {
			return badRequest(err.Error())
		}
		return c.JSON(http.StatusOK, peer.ApplyResponse(applied))
	}
	var req wire.ApplyRequest[peer.Op]
	if err := s.decodeJSON(c, s.Config.MaxHTTPRequestLength, &req); err != nil {
		// JSON, which no peer sends, costs a string header and more for each key of three
		// bytes: it gets a client's limit, not the eightfold one of binary batches.
		return err
	}
	applied, err := s.peers.Apply(req.Ops)
	if err != nil {
		return badRequest(err.Error())
	}
	return c.JSON(http.StatusOK, peer.ApplyResponse(applied))
}

// applyStream takes a peer's batches on the request's connection from now on. The request ends
// with the upgrade, so that the API's metrics and logs see an upgrade, not a request as long as
// the stream.
func (s *Server) applyStream(c echo.Context) error {
	err := s.peers.Upgrade(c.Response().Writer, c.Request())
	if bad, ok := errors.AsType[*peer.BadUpgradeError](err); ok {
		return badRequest(bad.Reason)
	}
	if errors.Is(err, peer.ErrStreamsClosed) {
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
func (s *Server) CloseStreams() { s.peers.CloseStreams() }

func (s *Server) inventory(c echo.Context) error {
	return c.JSON(http.StatusOK, s.peers.Inventory())
}

func (s *Server) placementStatus(c echo.Context) error {
	return c.JSON(http.StatusOK, s.peers.PlacementStatus())
}

// checkRoom answers whether this pod can hold the filters of a batch of creates, as it would
// answer the creates (507 when it cannot).
func (s *Server) checkRoom(c echo.Context) error {
	raw, err := s.readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	err = s.peers.RoomFor(raw)
	if errors.Is(err, peer.ErrMalformedOps) {
		return badRequest(err.Error())
	}
	if err != nil {
		return engineError(err, false)
	}
	return c.NoContent(http.StatusOK)
}

// dump streams the filter's state in the snapshot's record format (peer.Server.Dump).
func (s *Server) dump(c echo.Context) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	only, err := dumpPartitions(c, f.Partitions())
	if err != nil {
		return err
	}
	// The cluster's own dumps (the internal port's) are not bounded: catch-up and anti-entropy
	// must repair a filter of any size.
	client := !strings.HasPrefix(c.Path(), wire.InternalBasePath)
	err = s.peers.Dump(c.Request().Context(), f, only, client, func() io.Writer {
		c.Response().Header().Set(echo.HeaderContentType, echo.MIMEOctetStream)
		c.Response().WriteHeader(http.StatusOK)
		return stallDeadline{c.Response().Writer, s.Config.RequestTimeout}
	})
	if errors.Is(err, peer.ErrDumpTooLarge) {
		return &apiError{http.StatusInsufficientStorage, wire.CodeInsufficientSpace, err.Error()}
	}
	return engineError(err, false)
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

// clientMerge is merge on the client port, which has no authentication: a merge sets bits no key
// set, so it is served there only when the configuration allows it (docs/security.md).
func (s *Server) clientMerge(c echo.Context) error {
	if !s.Config.AllowClientMerges {
		return &apiError{http.StatusNotFound, wire.CodeNoSuchRoute,
			"merges are not served on the client port: set allowClientMerges, or merge through the internal port with the cluster's token"}
	}
	return s.merge(c)
}

// merge ORs a dump into the filter of the path, which must have the dump's shape
// (peer.Server.Merge).
func (s *Server) merge(c echo.Context) error {
	raw, err := s.readLimited(c, s.Config.MaxHTTPRequestLength)
	if err != nil {
		return err
	}
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	res, err := s.peers.Merge(f, raw, s.Writes.Placed())
	if errors.Is(err, peer.ErrBadDump) {
		return badRequest(err.Error())
	}
	if err != nil {
		return engineError(err, false)
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
