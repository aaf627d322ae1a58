package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Network is a Transport in memory, for tests: the pods that joined it reach each other's Server
// by function calls, through the faults the test sets, without a socket. A cut link fails every
// call at once, as a refused connection would; a delayed one waits first (the caller's context
// still bounds the call); one that loses answers makes the call and then fails it, so that the
// caller cannot tell whether it took effect. Batches of writes are encoded and decoded on the way,
// so the receiver holds a copy of its own, as it would over HTTP.
type Network struct {
	mu     sync.Mutex
	pods   map[string]*pod
	faults map[link]fault
	calls  map[link]int
}

// link is one direction between two pods, by name.
type link struct{ from, to string }

type fault struct {
	cut, loseAnswers bool
	delay            time.Duration
	// held, when not nil, holds calls until it is closed (Hold).
	held chan struct{}
}

// pod is what a member of the network serves: its Server, and the handler of the requests
// forwarded to it (the filter API); nil answers them 503 with code 7.
type pod struct {
	server  *Server
	handler http.Handler
}

// NewNetwork is a network that no pod has joined.
func NewNetwork() *Network {
	return &Network{pods: map[string]*pod{}, faults: map[link]fault{}, calls: map[link]int{}}
}

// Join makes the pod name reachable, served by s and, for forwarded requests, by handler.
func (n *Network) Join(name string, s *Server, handler http.Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods[name] = &pod{s, handler}
}

// Leave makes the pod name unreachable, as a pod that stopped.
func (n *Network) Leave(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pods, name)
}

// From is the transport of the pod name.
func (n *Network) From(name string) Transport { return from{n, name} }

// Cut fails every call between a and b, both ways, until Heal.
func (n *Network) Cut(a, b string) {
	n.change(a, b, func(f *fault) { f.cut = true })
	n.change(b, a, func(f *fault) { f.cut = true })
}

// Delay makes every call from one pod to another wait d first.
func (n *Network) Delay(from, to string, d time.Duration) {
	n.change(from, to, func(f *fault) { f.delay = d })
}

// Hold makes every call from one pod to another wait until release is called (or the caller's
// context ends), as requests wait in the socket of a process that is paused: the moment a held
// call arrives is the test's to choose. Heal does not release the calls held already.
func (n *Network) Hold(from, to string) (release func()) {
	ch := make(chan struct{})
	n.change(from, to, func(f *fault) { f.held = ch })
	var once sync.Once
	return func() {
		once.Do(func() {
			n.change(from, to, func(f *fault) {
				if f.held == ch {
					f.held = nil
				}
			})
			close(ch)
		})
	}
}

// LoseAnswers makes every call from one pod to another take effect and then fail.
func (n *Network) LoseAnswers(from, to string) {
	n.change(from, to, func(f *fault) { f.loseAnswers = true })
}

// Heal removes every fault.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.faults)
}

// Calls is how many calls one pod made of another (those that failed at once included).
func (n *Network) Calls(from, to string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[link{from, to}]
}

func (n *Network) change(from, to string, change func(*fault)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[link{from, to}]
	change(&f)
	n.faults[link{from, to}] = f
}

// errLost is the failure of a call whose answer was lost.
var errLost = errors.New("the answer was lost (in-memory network)")

// reach is the pod at the end of l once the link's faults let a call through, and whether its
// answer is to be lost.
func (n *Network) reach(ctx context.Context, l link) (*pod, bool, error) {
	n.mu.Lock()
	n.calls[l]++
	f, p := n.faults[l], n.pods[l.to]
	n.mu.Unlock()
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if f.held != nil {
		select {
		case <-f.held:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if f.cut || p == nil {
		return nil, false, fmt.Errorf("dial %s: connection refused (in-memory network)", l.to)
	}
	return p, f.loseAnswers, nil
}

// from is the Transport of one pod of a Network.
type from struct {
	n    *Network
	name string
}

func (t from) Peer(m wire.Member) Peer {
	l := link{t.name, m.Name}
	p := &memPeer{n: t.n, l: l}
	// Requests for the filter API go through a client of the internal port whose round trips
	// are served in process, so that their paths, bodies and errors are those of HTTP.
	p.client = client.New("http://"+m.Name, client.WithHTTPClient(&http.Client{Transport: p}), client.Internal(""), client.Forwarded())
	return p
}

type memPeer struct {
	n      *Network
	l      link
	client *client.Client
}

// call runs do on the pod at the link's end, through the link's faults.
func call[T any](ctx context.Context, p *memPeer, do func(*pod) (T, error)) (T, error) {
	var zero T
	target, lose, err := p.n.reach(ctx, p.l)
	if err != nil {
		return zero, err
	}
	out, err := do(target)
	if lose {
		return zero, errLost
	}
	return out, err
}

func (p *memPeer) Apply(ctx context.Context, ops []Op) ([]Outcome, error) {
	return call(ctx, p, func(t *pod) ([]Outcome, error) {
		applied, err := t.server.ApplyBatch(AppendOps(nil, ops))
		if err != nil {
			return nil, answerOf(err)
		}
		return applied, nil
	})
}

func (p *memPeer) CheckRoom(ctx context.Context, creates []Op) error {
	_, err := call(ctx, p, func(t *pod) (struct{}, error) {
		return struct{}{}, answerOf(t.server.RoomFor(AppendOps(nil, creates)))
	})
	return err
}

func (p *memPeer) Membership(ctx context.Context) (wire.Membership, error) {
	return call(ctx, p, func(t *pod) (wire.Membership, error) { return t.server.Membership(), nil })
}

func (p *memPeer) Inventory(ctx context.Context) (wire.Inventory, error) {
	return call(ctx, p, func(t *pod) (wire.Inventory, error) { return t.server.Inventory(), nil })
}

func (p *memPeer) Dump(ctx context.Context, name string, partitions []int) (io.ReadCloser, int64, error) {
	raw, err := call(ctx, p, func(t *pod) ([]byte, error) {
		f, err := t.server.opts.Store.Get(name)
		if err != nil {
			return nil, answerOf(err)
		}
		only := filter.All
		if partitions != nil {
			want := map[int]bool{}
			for _, part := range partitions {
				want[part] = true
			}
			only = func(part int) bool { return want[part] }
		}
		var buf bytes.Buffer
		if err := t.server.Dump(ctx, f, only, false, func() io.Writer { return &buf }); err != nil {
			return nil, answerOf(err)
		}
		return buf.Bytes(), nil
	})
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(raw)), int64(len(raw)), nil
}

func (p *memPeer) Forward(ctx context.Context, method, requestURI, contentType string, body []byte) (client.Answer, error) {
	return p.client.Forward(ctx, method, requestURI, contentType, body)
}

func (p *memPeer) Serve(ctx context.Context, level wire.Consistency, op wire.FilterOp, name string, values []string) ([]bool, error) {
	return serveThrough(ctx, p.client, level, op, name, values)
}

func (p *memPeer) Close() error { return nil }

// RoundTrip serves a request of the filter API with the handler of the pod at the link's end.
func (p *memPeer) RoundTrip(req *http.Request) (*http.Response, error) {
	return call(req.Context(), p, func(t *pod) (*http.Response, error) {
		rec := httptest.NewRecorder()
		if t.handler == nil {
			rec.Code = http.StatusServiceUnavailable
			_, _ = rec.WriteString(`{"error":"this pod serves no forwarded requests","code":7}`)
		} else {
			t.handler.ServeHTTP(rec, req)
		}
		resp := rec.Result()
		resp.Request = req
		return resp, nil
	})
}

// answerOf is the answer a pod's internal port gives to a call that failed with err, as the
// typed error the HTTP transport returns: the status and code that the caller decides on.
func answerOf(err error) error {
	if err == nil {
		return nil
	}
	e := &client.Error{Status: http.StatusInternalServerError, Code: wire.CodeInternal, Message: err.Error()}
	switch {
	case errors.Is(err, ErrMalformedOps):
		e.Status, e.Code = http.StatusBadRequest, wire.CodeBadParameter
	case errors.Is(err, filter.ErrNotFound):
		e.Status, e.Code = http.StatusNotFound, wire.CodeFilterNotFound
	case errors.Is(err, filter.ErrTooLarge), errors.Is(err, filter.ErrOutOfMemory):
		e.Status, e.Code = http.StatusInsufficientStorage, wire.CodeInsufficientSpace
	case errors.Is(err, filter.ErrNotJournaled):
		e.Status, e.Code = http.StatusInsufficientStorage, wire.CodeNotJournaled
	}
	return e
}
