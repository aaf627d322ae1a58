package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A breaker fails the calls to a peer at once while the peer is known unreachable: a call that
// got no answer (a refused or cut connection, a peer that did not answer in time) holds it down,
// and a probe in the background lets calls through again as soon as it answers. Without it, every
// check-and-set forwarded to an unreachable home, every write at consistency all and every quorum
// read waited for that peer again, up to the replication timeout each; with it, a fault costs one
// timeout, and writes the peer misses meanwhile reach it through anti-entropy. Failing a call
// never makes an answer: a write or read that needed the peer fails as it would have after the
// timeout, only sooner.

// errPeerDown is what fails a call to a peer the breaker holds down (errors.Is).
var errPeerDown = errors.New("held down")

// downError fails a call to a peer the breaker holds down; cause is what its last call met.
type downError struct{ cause error }

func (e *downError) Error() string {
	return fmt.Sprintf("not called: it did not answer its last call (%v) nor a probe since", e.cause)
}

func (e *downError) Is(target error) bool { return target == errPeerDown }

// breaker is a peer.Transport whose peers fail fast while down.
type breaker struct {
	inner peer.Transport
	ctx   context.Context // the node's: probes end with it
	// probe is both the time between probes of a peer that is down and how long a probe waits
	// for its answer.
	probe time.Duration
	// patience is the least time a call must have been given for its lack of an answer to hold
	// the peer down: half the replication timeout, which calls to peers are given.
	patience time.Duration
	log      *slog.Logger

	mu sync.Mutex
	// peers are the states of the current peers (keep), by name and URL: a pod back at another
	// address is a new peer. Calls to others, which only a pod that left or is leaving makes,
	// hold no one down.
	peers map[wire.Member]*peerState
}

// peerState is what the breaker knows of one peer. Its fields are guarded by breaker.mu.
type peerState struct {
	down  bool
	since time.Time
	cause error // what the call that held it down met
	// failedFast counts the calls failed without being made.
	failedFast int64
	// wake is non-nil while a probe of the peer runs: a send makes it probe at once.
	wake chan struct{}
}

func newBreaker(ctx context.Context, inner peer.Transport, timeout time.Duration, log *slog.Logger) *breaker {
	return &breaker{inner: inner, ctx: ctx, probe: min(max(timeout/2, 100*time.Millisecond), time.Second), patience: timeout / 2,
		log: log, peers: map[wire.Member]*peerState{}}
}

func (b *breaker) Peer(m wire.Member) peer.Peer { return &guarded{Peer: b.inner.Peer(m), b: b, m: m} }

// refuse answers the error that fails a call to m at once, nil when the call may be made.
func (b *breaker) refuse(m wire.Member) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.peers[m]
	if st == nil || !st.down {
		return nil
	}
	st.failedFast++
	return &downError{st.cause}
}

// observe takes the outcome of a call to m made at start under ctx. An answer, even an error,
// shows the peer reachable. A call that its caller gave up (ctx canceled), or that ended with a
// deadline shorter than b.patience, is no sign either way: the peer was not given the time it is
// owed. Any other failure is no answer, and holds m down until a probe gets one.
func (b *breaker) observe(ctx context.Context, start time.Time, m wire.Member, err error) {
	if _, answered := errors.AsType[*client.Error](err); err == nil || answered {
		b.up(m, "an answer to a call", nil)
		return
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		deadline, ok := ctx.Deadline()
		if errors.Is(ctxErr, context.Canceled) || !ok || deadline.Sub(start) < b.patience {
			return
		}
	}
	b.mu.Lock()
	st := b.peers[m]
	if st == nil {
		b.mu.Unlock()
		return // not a peer (keep): not probed
	}
	already := st.down
	if !already {
		st.down, st.since, st.cause = true, time.Now(), err
	}
	probing := st.wake != nil
	if !probing {
		st.wake = make(chan struct{}, 1)
	}
	wake := st.wake
	b.mu.Unlock()
	if !already {
		b.log.Warn("Peer unreachable: calls to it fail at once until it answers a probe", "peer", m.Name, "error", err.Error(), "probe", b.probe.String())
	}
	if !probing {
		go b.probeUntilUp(m, st, wake)
	}
}

// up lets calls to m through again, if it was down, on the evidence of how.
// A probe that got an answer ends (probed): under the same lock, so that a peer held down again
// from then on is probed again.
func (b *breaker) up(m wire.Member, how string, probed *peerState) {
	b.mu.Lock()
	st := b.peers[m]
	if probed != nil {
		probed.wake = nil
	}
	if st == nil || !st.down || (probed != nil && st != probed) {
		b.mu.Unlock()
		return
	}
	st.down = false
	down := time.Since(st.since)
	b.mu.Unlock()
	b.log.Info("Peer reachable again", "peer", m.Name, "by", how, "down", down.String())
}

// probeUntilUp asks m its membership every probe, or at once when woken, until it answers or
// another call did, or m is no longer a peer (keep).
func (b *breaker) probeUntilUp(m wire.Member, st *peerState, wake chan struct{}) {
	ticker := time.NewTicker(b.probe)
	defer ticker.Stop()
	link := b.inner.Peer(m)
	defer func() { _ = link.Close() }()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-ticker.C:
		case <-wake:
		}
		b.mu.Lock()
		if !st.down || b.peers[m] != st {
			st.wake = nil
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(b.ctx, b.probe)
		_, err := link.Membership(ctx)
		cancel()
		if _, answered := errors.AsType[*client.Error](err); err == nil || answered {
			b.up(m, "a probe", st)
			return
		}
	}
}

// wakeAll has every peer held down probed at once: a new membership, pushed when pods start,
// stop or become ready, is a sign that one may be back.
func (b *breaker) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, st := range b.peers {
		if st.wake != nil {
			select {
			case st.wake <- struct{}{}:
			default:
			}
		}
	}
}

// keep makes the peers' states, and forgets those of members that are no longer peers: their
// probes end.
func (b *breaker) keep(peers []wire.Member) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for m := range b.peers {
		if !slices.Contains(peers, m) {
			delete(b.peers, m)
		}
	}
	for _, p := range peers {
		if b.peers[p] == nil {
			b.peers[p] = &peerState{}
		}
	}
}

// down answers the names of the peers held down, sorted.
func (b *breaker) down() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for m, st := range b.peers {
		if st.down {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// failedFast answers, per peer, the calls failed without being made.
func (b *breaker) failedFast() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(b.peers))
	for m, st := range b.peers {
		out[m.Name] = st.failedFast
	}
	return out
}

// PeersDown answers the names of the peers whose calls fail at once, sorted: they got no answer
// at their last call and have not answered a probe since.
func (n *Node) PeersDown() []string { return n.breaker.down() }

// FailedFastCalls answers, per peer, the calls to it failed at once while it was held down.
func (n *Node) FailedFastCalls() map[string]int64 { return n.breaker.failedFast() }

// guarded is a link to a peer through the breaker.
type guarded struct {
	peer.Peer
	b *breaker
	m wire.Member
}

// through makes call under ctx unless the peer is down, and observes its outcome.
func through[T any](ctx context.Context, g *guarded, call func() (T, error)) (T, error) {
	if err := g.b.refuse(g.m); err != nil {
		var zero T
		return zero, err
	}
	start := time.Now()
	out, err := call()
	g.b.observe(ctx, start, g.m, err)
	return out, err
}

func (g *guarded) Apply(ctx context.Context, ops []peer.Op) ([]peer.Outcome, error) {
	return through(ctx, g, func() ([]peer.Outcome, error) { return g.Peer.Apply(ctx, ops) })
}

func (g *guarded) CheckRoom(ctx context.Context, creates []peer.Op) error {
	_, err := through(ctx, g, func() (struct{}, error) { return struct{}{}, g.Peer.CheckRoom(ctx, creates) })
	return err
}

func (g *guarded) Membership(ctx context.Context) (wire.Membership, error) {
	return through(ctx, g, func() (wire.Membership, error) { return g.Peer.Membership(ctx) })
}

func (g *guarded) Inventory(ctx context.Context) (wire.Inventory, error) {
	return through(ctx, g, func() (wire.Inventory, error) { return g.Peer.Inventory(ctx) })
}

func (g *guarded) Dump(ctx context.Context, name string, partitions []int) (io.ReadCloser, int64, error) {
	type dump struct {
		body io.ReadCloser
		size int64
	}
	d, err := through(ctx, g, func() (dump, error) {
		body, size, err := g.Peer.Dump(ctx, name, partitions)
		return dump{body, size}, err
	})
	return d.body, d.size, err
}

func (g *guarded) Forward(ctx context.Context, method, requestURI, contentType string, body []byte) (client.Answer, error) {
	return through(ctx, g, func() (client.Answer, error) { return g.Peer.Forward(ctx, method, requestURI, contentType, body) })
}

func (g *guarded) Serve(ctx context.Context, level wire.Consistency, op wire.FilterOp, name string, values []string) ([]bool, error) {
	return through(ctx, g, func() ([]bool, error) { return g.Peer.Serve(ctx, level, op, name, values) })
}
