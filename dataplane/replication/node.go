package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// ErrReplication means a write was applied here but fewer pods than its consistency level asked
// for acknowledged it in time. Nothing is rolled back: adds are monotone, and peers that missed
// the write are repaired by anti-entropy.
var ErrReplication = errors.New("replication incomplete")

// Options configure a Node.
type Options struct {
	Store *filter.Store
	Log   *slog.Logger
	// WriteConsistency is the default of writes that do not ask for one.
	WriteConsistency wire.Consistency
	// Timeout bounds how long a write waits for its peers, and every call to a peer.
	Timeout time.Duration
	// AwaitMembership keeps the pod unready until it was told its membership and caught up
	// (the operator sets it; a pod run by hand is ready alone).
	AwaitMembership bool
	// AntiEntropyInterval is the period of the anti-entropy pass; 0 turns it off.
	AntiEntropyInterval time.Duration
	// AntiEntropyBytesPerSecond caps the rate at which anti-entropy pulls dumps.
	AntiEntropyBytesPerSecond int64
	// MaxDumpBytes bounds a dump read from a peer before it is allocated.
	MaxDumpBytes int64
	// MaxBatchBytes bounds the writes sent to a peer in one request, as encoded; peers accept
	// batches of up to peer.ApplyBodyLimit(MaxBatchBytes).
	MaxBatchBytes int64
	// PodName, when known, is this pod's name: a membership whose Self names another pod is
	// refused (a pod IP reused before the operator noticed must not take another's identity).
	PodName string
	// Durable makes bits merged from peers survive a crash (a snapshot); nil when in memory.
	Durable func() error
	// Transport reaches the peers; nil builds the HTTP one with Token and TLS.
	Transport peer.Transport
	// Token is the cluster's bearer token, which the peers' internal ports require.
	Token string
	// TLS verifies https peers and presents this pod's certificate to them; nil for http.
	TLS *tls.Config
	// HomeLease reports whether this pod holds its lease as a home now, on a monotonic clock: a
	// home consults it at the moment it applies a check-and-set, after the filter answered and
	// before the answer is replicated or given, and answers 503 code 14 rather than that answer
	// when it is not held. It must be cheap and must not block. Nil means always held: a data
	// plane run without Kubernetes, whose homes are moved by pushed memberships alone.
	HomeLease func() bool
}

// Node is this pod's part of the cluster.
type Node struct {
	opts      Options
	members   *Membership
	transport peer.Transport
	// breaker is the transport's: it holds the peers that got no answer down (breaker.go).
	breaker *breaker
	stats   Stats

	mu      sync.Mutex
	senders map[wire.Member]*peer.Sender
	// active are the senders of the current peers, read on every write without a lock.
	active atomic.Pointer[[]*peer.Sender]
	ctx    context.Context // of the senders and of the routed checks' requests
	cancel context.CancelFunc

	// caughtUp is false from the first membership until the catch-up from the peers is done (and,
	// with AwaitMembership, before the first membership): the pod may then lack filters its
	// peers hold, so it must neither report ready nor create a filter, which would replace
	// theirs.
	caughtUp atomic.Bool

	// membershipFile is where the pod keeps the last membership it was told (Remember); "" keeps
	// none. Set before the pod serves, read after.
	membershipFile string

	// fence orders the check-and-sets a home applies (read) and the writes of homes it applies
	// (read) against a change of membership (write): once a new epoch is installed, no
	// check-and-set or home's add that was checked against the previous one is still being applied
	// (home.go).
	fence sync.RWMutex
	// standIn is the state of this pod as a new home under the membership's epoch (standin.go).
	standIn standIn

	placed placedState
	// checks sends the checks routed to each peer together while one request of them is under way.
	checks *checkBatcher
}

// NewNode returns a node with no membership: a cluster of one.
func NewNode(opts Options) *Node {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.MaxDumpBytes <= 0 {
		opts.MaxDumpBytes = 1 << 40
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = 4 << 20
	}
	if opts.AntiEntropyBytesPerSecond <= 0 {
		opts.AntiEntropyBytesPerSecond = 64 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		opts:      opts,
		members:   NewMembership(),
		transport: opts.Transport,
		senders:   make(map[wire.Member]*peer.Sender),
		ctx:       ctx,
		cancel:    cancel,
	}
	if n.transport == nil {
		n.transport = peer.NewHTTP(peer.HTTPOptions{Token: opts.Token, TLS: opts.TLS, DialTimeout: opts.Timeout,
			Log: opts.Log, Streamed: &n.stats.StreamedBatches})
	}
	n.breaker = newBreaker(ctx, n.transport, opts.Timeout, opts.Log)
	n.transport = n.breaker
	// A value may grow sixfold as JSON (\u escapes): the checks that go together fit a request.
	n.checks = newCheckBatcher(int(opts.MaxBatchBytes/8), n.sendChecks)
	n.caughtUp.Store(!opts.AwaitMembership)
	return n
}

// Stats are the node's counters.
func (n *Node) Stats() *Stats { return &n.stats }

// Self is this pod's name in its membership, or its PodName before it has one: the origin of
// the changes of expiry it makes.
func (n *Node) Self() string {
	if self := n.members.Get().Self; self != "" {
		return self
	}
	return n.opts.PodName
}

// Membership answers what the pod was last told since it started: none (epoch 0) while it counts
// its peers from a membership it kept before a restart and awaits being told again, so that the
// operator, which tells a pod whose epoch is behind, tells it.
func (n *Node) Membership() wire.Membership {
	if known, _ := n.members.Known(); !known {
		return wire.Membership{Members: []wire.Member{}}
	}
	m := n.members.Get()
	m.EndingMove = n.writesToEndedMove(m.Epoch)
	return m
}

// SetMembership installs a membership (see Membership.Set) and starts and stops the senders to
// peers accordingly.
func (n *Node) SetMembership(m wire.Membership) error {
	m.EndingMove = false // the pod's own answer, not the operator's to tell
	before := n.members.Get()
	if n.opts.PodName != "" && m.Self != n.opts.PodName {
		return fmt.Errorf("self: this pod is %q, not %q", n.opts.PodName, m.Self)
	}
	ends := n.endingMove(before, m) // before keep, which keeps the move ended with m
	if err := n.keep(before, m); err != nil {
		return err
	}
	// The first membership makes the pod one of several: until Run has caught up from the peers
	// just learned of, it may lack their filters.
	known, _ := n.members.Known()
	first, wasCaughtUp := !known, n.caughtUp.Load()
	if first {
		n.caughtUp.Store(false)
	}
	n.fence.Lock()
	err := n.members.Set(m)
	if err == nil {
		n.planStandIn(before, m, first)
	}
	n.fence.Unlock()
	if err != nil {
		if first {
			n.caughtUp.Store(wasCaughtUp)
		}
		return err
	}
	n.changed(before, m)
	n.breaker.wakeAll()
	if ends {
		go n.endMove(m)
	}
	return nil
}

// changed starts and stops the senders and places the filters after the membership changed from
// before to m, and logs a new epoch.
func (n *Node) changed(before, m wire.Membership) {
	n.syncSenders()
	n.arrange()
	if before.Epoch != m.Epoch {
		names := make([]string, len(m.Members))
		for i, member := range m.Members {
			names[i] = member.Name + "=" + member.URL
		}
		n.opts.Log.Info("Membership changed", "epoch", m.Epoch, "previousEpoch", before.Epoch, "self", m.Self, "members", strings.Join(names, ","),
			"owners", strings.Join(m.Owners, ","), "replicationFactor", m.ReplicationFactor, "moving", m.Previous != nil)
	}
}

// syncSenders keeps one sender per current peer.
func (n *Node) syncSenders() {
	peers := n.members.Peers()
	n.breaker.keep(peers)
	n.mu.Lock()
	defer n.mu.Unlock()
	keep := make(map[wire.Member]bool, len(peers))
	for _, p := range peers {
		keep[p] = true
		if _, ok := n.senders[p]; !ok {
			s := peer.NewSender(p.Name, n.transport.Peer(p), peer.SenderOptions{MaxBatchBytes: n.opts.MaxBatchBytes,
				Timeout: n.opts.Timeout, Sent: &n.stats.SentBatches, Dropped: &n.stats.DroppedOps})
			n.senders[p] = s
			go s.Run(n.ctx)
		}
	}
	for m, s := range n.senders {
		if !keep[m] {
			s.Stop()
			delete(n.senders, m)
		}
	}
	active := make([]*peer.Sender, 0, len(peers))
	for _, p := range peers {
		active = append(active, n.senders[p])
	}
	n.active.Store(&active)
}

func (n *Node) currentSenders() []*peer.Sender {
	if active := n.active.Load(); active != nil {
		return *active
	}
	return nil
}

// peer is the link to a member, for a call other than a batch of writes (those go through its
// sender).
func (n *Node) peer(m wire.Member) peer.Peer { return n.transport.Peer(m) }

// Known reports whether the pod was told its membership.
func (n *Node) Known() (bool, <-chan struct{}) { return n.members.Known() }

// Replicating reports whether the pod has peers to replicate to.
func (n *Node) Replicating() bool { return len(n.currentSenders()) > 0 }

// Close stops the senders; writes still waiting on them fail.
func (n *Node) Close() { n.cancel() }

// Ready reports whether the pod may take traffic as far as the cluster is concerned: it holds
// what its peers held when it learned of them.
func (n *Node) Ready() bool { return n.caughtUp.Load() }

// LeaseHeld reports whether this pod holds its lease as a home now (Options.HomeLease).
func (n *Node) LeaseHeld() bool { return n.opts.HomeLease == nil || n.opts.HomeLease() }

// WriteConsistency is the default level of writes.
func (n *Node) WriteConsistency() wire.Consistency { return n.opts.WriteConsistency }

// Replicate forwards op, already applied here, to every peer, and waits until as many pods as
// level asks (this one included) hold it. Peers beyond that count get it too, without waiting.
func (n *Node) Replicate(ctx context.Context, op peer.Op, level wire.Consistency) error {
	senders := n.currentSenders()
	if len(senders) == 0 {
		return nil
	}
	return n.replicateVia(ctx, op, senders, level, level.Count(len(senders)+1), 1)
}

// replicateVia sends op to senders and waits until the pods that acknowledged it, with the mine
// (0 or 1) that this pod counts for, reach need of the pods the level counts.
func (n *Node) replicateVia(ctx context.Context, op peer.Op, senders []*peer.Sender, level wire.Consistency, need, mine int) error {
	n.stats.ReplicatedOps.Add(1)
	acks := make(chan peer.Ack, len(senders))
	for i, s := range senders {
		s.Enqueue(op, peer.AckTo{Ch: acks, Peer: i})
	}
	t := []tally{{need: need, mine: mine, acked: mine, sent: len(senders)}}
	only := []int{0}
	if n.awaitTallies(ctx, acks, t, func(int) []int { return only }) < 0 {
		return nil
	}
	return t[0].shortfall("the write is applied on this pod, but consistency %q needs %d of %d pods and %d acknowledged (%s)",
		level, need, mine+len(senders), t[0].acked, strings.Join(t[0].failures, "; "))
}

// tally counts the acknowledgements of a write from the pods it needs them from.
type tally struct {
	need, mine, sent, acked, failed int
	// fenced counts the failures that are refusals of a home's add (peer.ErrFenced).
	fenced   int
	failures []string
}

// shortfall is the error of a write that fell short of its level: ErrReplication, and also
// peer.ErrFenced when peers refused it as a home's add from a pod a newer membership demoted.
func (t *tally) shortfall(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if t.fenced > 0 {
		return fmt.Errorf("%w: %d pods %w: %s", ErrReplication, t.fenced, peer.ErrFenced, msg)
	}
	return fmt.Errorf("%w: %s", ErrReplication, msg)
}

// possible reports whether the acknowledgements still to come can reach need.
func (t *tally) possible() bool { return t.mine+t.sent-t.failed >= t.need }

func (t *tally) count(err error) {
	if err == nil {
		t.acked++
		return
	}
	t.failed++
	if errors.Is(err, peer.ErrFenced) {
		t.fenced++
	}
	t.failures = append(t.failures, err.Error())
}

// awaitTallies counts each peer's acknowledgement for the tallies tallied(peer) names, until
// every tally reaches its need or one cannot, at most the replication timeout. It answers the
// index of a tally that fell short, its failures listed, or -1.
func (n *Node) awaitTallies(ctx context.Context, acks <-chan peer.Ack, tallies []tally, tallied func(peer int) []int) int {
	timer := time.NewTimer(n.opts.Timeout)
	defer timer.Stop()
	for {
		short := -1
		for i := range tallies {
			if tallies[i].acked < tallies[i].need {
				short = i
				if !tallies[i].possible() {
					break
				}
			}
		}
		if short < 0 {
			return -1
		}
		t := &tallies[short]
		if t.possible() {
			select {
			case a := <-acks:
				for _, i := range tallied(a.Peer) {
					tallies[i].count(a.Err)
				}
				continue
			case <-timer.C:
				t.failures = append(t.failures, fmt.Sprintf("no answer within %s", n.opts.Timeout))
			case <-ctx.Done():
				t.failures = append(t.failures, ctx.Err().Error())
			}
		} else if t.failed == 0 { // too few to begin with, rather than after failures already listed
			t.failures = append(t.failures, fmt.Sprintf("only %d pods to send it to", t.sent))
		}
		n.stats.ReplicationFailures.Add(1)
		return short
	}
}

// ReplicateAll is Replicate for ops applied here that make one write together, such as the
// pieces of one chunk of a load, each small enough for a batch: every peer gets them all, in
// order, and counts toward level once it acknowledged every one. writers, when not nil, are
// the pods that hold the write (a placed filter's partitions): only they get it and count.
func (n *Node) ReplicateAll(ctx context.Context, ops []peer.Op, level wire.Consistency, writers []string) error {
	senders, mine := n.currentSenders(), 1
	if writers != nil {
		if !slices.Contains(writers, n.members.Self()) {
			mine = 0
		}
		senders = slices.DeleteFunc(slices.Clone(senders), func(s *peer.Sender) bool { return !slices.Contains(writers, s.Name()) })
	}
	need := level.Count(len(senders) + mine)
	if writers != nil {
		need = level.Count(len(writers))
	}
	if len(senders) == 0 && mine >= need {
		return nil
	}
	n.stats.ReplicatedOps.Add(int64(len(ops)))
	raw := make(chan peer.Ack, len(senders)*len(ops))
	for i, s := range senders {
		for _, op := range ops {
			s.Enqueue(op, peer.AckTo{Ch: raw, Peer: i})
		}
	}
	// Each peer's acknowledgements become one: its first failure, or success once all arrived.
	acks, done := make(chan peer.Ack, len(senders)), make(chan struct{})
	defer close(done)
	go func() {
		left, pending := make([]int, len(senders)), len(senders)
		for i := range left {
			left[i] = len(ops)
		}
		for pending > 0 {
			select {
			case a := <-raw:
				switch {
				case left[a.Peer] == 0: // already answered for
				case a.Err != nil:
					left[a.Peer], pending = 0, pending-1
					acks <- a
				default:
					if left[a.Peer]--; left[a.Peer] == 0 {
						pending--
						acks <- peer.Ack{Peer: a.Peer}
					}
				}
			case <-done:
				return
			}
		}
	}()
	t := []tally{{need: need, mine: mine, acked: mine, sent: len(senders)}}
	only := []int{0}
	if n.awaitTallies(ctx, acks, t, func(int) []int { return only }) < 0 {
		return nil
	}
	return fmt.Errorf("%w: the write is applied on this pod, but consistency %q needs %d of %d pods and %d acknowledged (%s)",
		ErrReplication, level, need, mine+len(senders), t[0].acked, strings.Join(t[0].failures, "; "))
}

// MaxOpBytes is the most bytes of bits one replicated op should carry: half a batch, so that a
// peer's limit (peer.ApplyBodyLimit) takes it in either encoding.
func (n *Node) MaxOpBytes() int { return int(max(n.opts.MaxBatchBytes/2, 4096)) }
