// Package controllers holds the operator's reconcilers: BloomCluster runs a data plane as a
// StatefulSet, BloomFilter creates a filter on every pod of its cluster and reports its state.
package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Pod is a data-plane pod as the operator addresses it: its internal port, by IP, so no cluster
// domain is assumed, the cluster's token, which that port requires, and with the cluster's
// spec.tls, how to speak TLS to it.
type Pod struct {
	Name  string
	IP    string
	Port  int
	Token string
	// TLS, when set, has the pod called over https, verified against the cluster's CA and shown
	// the cluster's certificate; nil calls it over plain HTTP.
	TLS *ClusterTLS
}

// String leaves the token and the TLS key out wherever a Pod is formatted (%v), in errors, logs
// and tests.
func (p Pod) String() string { return p.Name + " at " + p.baseURL() }

func (p Pod) baseURL() string {
	scheme := "http://"
	if p.TLS != nil {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(p.IP, strconv.Itoa(p.Port))
}

// FilterShape is what the operator creates a filter with.
type FilterShape struct {
	Capacity               uint64
	FPP                    float64
	Scalable               bool
	Growth                 uint
	ValidPeriodAfterCreate int64 // seconds; 0 means never
	ValidPeriodAfterAccess int64 // seconds; 0 means none
	// Partitions is how many partitions the filter's values are split into; 0 lets the data
	// plane choose, and any number it chose then matches.
	Partitions int
}

// Matches reports whether a filter on a pod has this shape. A pod that reports no partitions (0,
// from before they existed) holds a filter that is not split: one partition.
func (s FilterShape) Matches(f wire.FilterStatus) bool {
	if f.ExpectedInsertions != s.Capacity || f.FPP != s.FPP || f.Scalable != s.Scalable {
		return false
	}
	if s.Partitions > 0 && partitionsOf(f) != s.Partitions {
		return false
	}
	return !s.Scalable || f.Growth == s.Growth
}

// partitionsOf is how many partitions a pod's filter has: 1 when the pod reports none, as a pod
// from before partitions does.
func partitionsOf(f wire.FilterStatus) int { return max(f.Partitions, 1) }

// partitionsHeldOf is how many of the filter's partitions the pod holds. A data plane from before
// placement reports none (the field is absent) and holds them all; one that holds none of them
// reports no bytes either, as every partition it holds has its bits.
func partitionsHeldOf(f wire.FilterStatus) int {
	switch {
	case f.PartitionsHeld > 0:
		return min(f.PartitionsHeld, partitionsOf(f))
	case f.SizeBytes == 0 && f.Items == 0:
		return 0
	}
	return partitionsOf(f)
}

// ErrFilterNotFound is the data plane's answer for a filter a pod does not hold.
var ErrFilterNotFound = errors.New("filter not found on the pod")

// ErrStaleEpoch is the data plane's answer to a membership older than the one the pod holds.
var ErrStaleEpoch = errors.New("the pod holds a membership of a higher epoch")

// DataPlane is everything the operator asks of a data-plane pod. The reconcilers use nothing
// else, so tests can point them at real servers on loopback addresses.
type DataPlane interface {
	// CreateFilter creates the filter unless the pod holds one of that name, marked as owner's
	// (its BloomFilter's UID); it returns the status of what the pod holds afterwards and whether
	// it created it.
	CreateFilter(ctx context.Context, pod Pod, name string, owner types.UID, shape FilterShape) (wire.FilterStatus, bool, error)
	// FilterStatus returns the status of the pod's filter, or ErrFilterNotFound. It must stay
	// cheap for a filter of any size: a pass reads it from every pod whose poll is not answering.
	FilterStatus(ctx context.Context, pod Pod, name string) (wire.FilterStatus, error)
	// FilterStatuses returns the statuses of the pod's filters: every filter, or what changed
	// since version (wire.FilterStatuses); with wait above zero it is a long poll that answers
	// once the pod's version differs from version, or after wait.
	FilterStatuses(ctx context.Context, pod Pod, version string, wait time.Duration) (wire.FilterStatuses, error)
	// DeleteFilter removes the filter from the pod, absent being success. With an owner it removes
	// it only if that owner made it, from the pod and, by replication, from its peers, and reports
	// whether it did: a pod that lacks it, or holds another's, removes nothing. A pod from before
	// owners removes it whoever made it.
	DeleteFilter(ctx context.Context, pod Pod, name string, owner types.UID) (bool, error)
	// GetMembership returns the membership the pod holds: epoch 0 and no members if it was
	// never told.
	GetMembership(ctx context.Context, pod Pod) (wire.Membership, error)
	// SetMembership tells the pod its membership; an error wrapping ErrStaleEpoch means the pod
	// holds a higher epoch and kept it.
	SetMembership(ctx context.Context, pod Pod, m wire.Membership) error
	// PlacementStatus returns the pod's part in the placement of the membership it holds; an
	// error wrapping ErrPlacementUnsupported means its data plane predates placement.
	PlacementStatus(ctx context.Context, pod Pod) (wire.PlacementStatus, error)
}

// ErrPlacementUnsupported is the answer of a pod whose data plane has no placement endpoint: it
// ignores a membership's owners and holds every partition of every filter, as every pod did
// before placement, so it holds whatever it owns in any move.
var ErrPlacementUnsupported = errors.New("the pod's data plane does not report placement: it holds every partition")

// DefaultFilterReconciles is how many BloomFilters the operator reconciles at once when nothing
// else says (its --max-concurrent-filter-reconciles flag). A filter's pass waits on the API
// server and the pods, not on the CPU, so the workers are many; but once the API server is the
// limit, as when thousands of filters are created at once, more of them only lengthen its queue,
// and with it the time the operator's lease renewals wait there.
const DefaultFilterReconciles = 64

// DefaultPodTimeout bounds each call to a pod when nothing else does (the operator's
// --pod-timeout flag).
const DefaultPodTimeout = 5 * time.Second

// HTTPDataPlane is the DataPlane of real pods, over the data plane's REST API. It shares one HTTP
// client (and its connections) across the pods of plain HTTP, and one per TLS Secret across those
// of TLS, and across reconciles; every call is bounded by Timeout and by the reconcile's context.
type HTTPDataPlane struct {
	HTTP    *http.Client
	Timeout time.Duration
	// transport is HTTP's, which the clients of TLS pods share.
	transport client.TransportOptions
	tls       tlsClients
}

// NewHTTPDataPlane returns a DataPlane with a 2 s dial timeout, kept-alive connections and
// per-call timeout.
func NewHTTPDataPlane(timeout time.Duration) *HTTPDataPlane {
	transport := client.TransportOptions{
		DialTimeout:         2 * time.Second,
		TLSHandshakeTimeout: 2 * time.Second,
		MaxIdleConns:        256,
		// As many as the filters' workers call a pod at once, so that they keep their connections.
		MaxIdleConnsPerHost: DefaultFilterReconciles,
	}
	return &HTTPDataPlane{HTTP: client.NewHTTPClient(transport), Timeout: timeout, transport: transport}
}

// client calls the pod's internal port with the token, over https with the pod's TLS.
func (d *HTTPDataPlane) client(pod Pod) *client.Client {
	return client.New(pod.baseURL(), client.WithHTTPClient(d.httpClient(pod)), client.Internal(pod.Token))
}

// httpClient is the HTTP client of the pod's scheme: the shared one, or its TLS Secret's.
func (d *HTTPDataPlane) httpClient(pod Pod) *http.Client {
	if pod.TLS != nil {
		return d.tls.get(pod.TLS, d.transport)
	}
	return d.HTTP
}

func (d *HTTPDataPlane) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.Timeout)
}

// CreateFilter implements DataPlane.
func (d *HTTPDataPlane) CreateFilter(ctx context.Context, pod Pod, name string, owner types.UID, shape FilterShape) (wire.FilterStatus, bool, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	opts := client.CreateOptions{
		ExpectedInsertions:     new(shape.Capacity),
		FPP:                    new(shape.FPP),
		Scalable:               new(shape.Scalable),
		ValidPeriodAfterCreate: new(shape.ValidPeriodAfterCreate),
		Owner:                  string(owner),
	}
	if shape.Scalable {
		opts.Growth = new(shape.Growth)
	}
	if shape.ValidPeriodAfterAccess > 0 {
		opts.ValidPeriodAfterAccess = new(shape.ValidPeriodAfterAccess)
	}
	if shape.Partitions > 0 {
		opts.Partitions = new(shape.Partitions)
	}
	// The create's answer counts the bits, once, of a filter that is new or that the pod lacked.
	f, created, err := d.client(pod).Create(ctx, name, opts)
	if refusedOwner(err) {
		// A data plane from before owners, as while the pods roll to this version: its filter is
		// made without one.
		opts.Owner = ""
		f, created, err = d.client(pod).Create(ctx, name, opts)
	}
	return f.Status(), created, err
}

// refusedOwner reports whether a create was refused for its owner field, as a data plane from
// before owners refuses a field it does not know: `unknown parameter: "owner"`.
func refusedOwner(err error) bool {
	e, ok := errors.AsType[*client.Error](err)
	return ok && e.Code == wire.CodeBadParameter && strings.HasPrefix(e.Message, `unknown parameter: "owner"`)
}

// FilterStatus implements DataPlane.
func (d *HTTPDataPlane) FilterStatus(ctx context.Context, pod Pod, name string) (wire.FilterStatus, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	st, err := d.client(pod).FilterStatus(ctx, name)
	if client.IsNotFound(err) {
		return st, ErrFilterNotFound
	}
	return st, err
}

// FilterStatuses implements DataPlane: the call is bounded by the wait and Timeout.
func (d *HTTPDataPlane) FilterStatuses(ctx context.Context, pod Pod, version string, wait time.Duration) (wire.FilterStatuses, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+d.Timeout)
	defer cancel()
	return d.client(pod).FilterStatuses(ctx, version, wait, true)
}

// DeleteFilter implements DataPlane.
func (d *HTTPDataPlane) DeleteFilter(ctx context.Context, pod Pod, name string, owner types.UID) (bool, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	if owner == "" {
		return true, d.client(pod).Delete(ctx, name)
	}
	switch err := d.client(pod).DeleteOwned(ctx, name, string(owner)); {
	case client.IsNotFound(err), client.IsOtherOwner(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// GetMembership implements DataPlane.
func (d *HTTPDataPlane) GetMembership(ctx context.Context, pod Pod) (wire.Membership, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	return d.client(pod).Membership(ctx)
}

// SetMembership implements DataPlane.
func (d *HTTPDataPlane) SetMembership(ctx context.Context, pod Pod, m wire.Membership) error {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	err := d.client(pod).SetMembership(ctx, m)
	if client.IsStaleEpoch(err) {
		return fmt.Errorf("%w: %w", ErrStaleEpoch, err)
	}
	return err
}

// maxPlacementAnswer bounds a pod's placement status, a few numbers.
const maxPlacementAnswer = 64 << 10

// PlacementStatus implements DataPlane. The data plane's client has no method for it yet, so the
// GET is made here, as the client makes the others: the internal port, the bearer token and the
// pod's HTTP client. A 404 of the data plane's "no such route" (code 5) is a data plane from
// before placement: ErrPlacementUnsupported.
func (d *HTTPDataPlane) PlacementStatus(ctx context.Context, pod Pod) (wire.PlacementStatus, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	var st wire.PlacementStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pod.baseURL()+wire.PlacementStatusPath, nil)
	if err != nil {
		return st, fmt.Errorf("building the GET %s request: %w", wire.PlacementStatusPath, err)
	}
	req.Header.Set("Authorization", "Bearer "+pod.Token)
	resp, err := d.httpClient(pod).Do(req)
	if err != nil {
		return st, fmt.Errorf("GET %s: %w", wire.PlacementStatusPath, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxPlacementAnswer))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxPlacementAnswer))
		var body wire.ErrorBody
		decoded := json.Unmarshal(raw, &body) == nil && body.Code != 0
		if resp.StatusCode == http.StatusNotFound && decoded && body.Code == wire.CodeNoSuchRoute {
			return st, fmt.Errorf("GET %s: %w", wire.PlacementStatusPath, ErrPlacementUnsupported)
		}
		msg := strings.ToValidUTF8(strings.TrimSpace(string(raw[:min(len(raw), 200)])), "")
		if decoded {
			msg = fmt.Sprintf("%s (code %d)", body.Error, body.Code)
		}
		return st, fmt.Errorf("GET %s: HTTP %d: %s", wire.PlacementStatusPath, resp.StatusCode, msg)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPlacementAnswer)).Decode(&st); err != nil {
		return st, fmt.Errorf("GET %s: decoding the answer: %w", wire.PlacementStatusPath, err)
	}
	return st, nil
}
