package writes_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
	"github.com/bloomery/bloomery/internal/await"
)

// journal records what the engine journals, in order.
type journal struct {
	mu    sync.Mutex
	added []string
	ops   []string
}

func (j *journal) Created(f *filter.Filter) error { j.record("create " + f.Name()); return nil }
func (j *journal) Deleted(name string, _ int64) error {
	j.record("delete " + name)
	return nil
}

func (j *journal) Added(name string, keys []string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.added = append(j.added, keys...)
	j.ops = append(j.ops, "add "+name)
	return nil
}
func (j *journal) Applied()                   {}
func (j *journal) Accessed(string, time.Time) {}
func (j *journal) Purged(string)              {}
func (j *journal) ExpiryChanged(name string, _ int64, e filter.Expiry) error {
	j.record("expiry " + e.Mode.String() + " " + name)
	return nil
}
func (j *journal) Loaded(name string, _ int64, _ filter.Load) error {
	j.record("load " + name)
	return nil
}

func (j *journal) record(op string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ops = append(j.ops, op)
}

func (j *journal) addedKeys() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.added)
}

// pod is a write service over its own store and node, with a journal that records.
type pod struct {
	store   *filter.Store
	node    *replication.Node
	journal *journal
	writes  *writes.Service
}

func newPod(t *testing.T, limits filter.Limits, await bool) *pod {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	p := &pod{store: filter.NewStore(limits, nil), journal: &journal{}}
	p.store.SetJournal(p.journal)
	p.node = replication.NewNode(replication.Options{
		Store: p.store, Log: log, WriteConsistency: wire.ConsistencyQuorum,
		Timeout: 500 * time.Millisecond, AwaitMembership: await, Token: peerToken,
	})
	t.Cleanup(p.node.Close)
	p.writes = writes.New(p.store, p.node, log)
	return p
}

// peerToken is the cluster's token in these tests.
const peerToken = "the-cluster-token-of-the-tests-0123456789"

// peer is a whole data plane in memory, served on loopback: the pod's peer. url is its internal
// port's, c a client of its client port.
func peer(t *testing.T) (url string, c *client.Client) {
	t.Helper()
	cfg := config.Default()
	cfg.InMemory = true
	cfg.InternalTokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.InternalTokenFile, []byte(peerToken), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	public := httptest.NewServer(d.ClientHandler())
	t.Cleanup(public.Close)
	internal := httptest.NewServer(d.InternalHandler())
	t.Cleanup(internal.Close)
	return internal.URL, client.New(public.URL)
}

// joinPeer makes p one of two pods with a peer at url, and waits until p caught up from it.
func (p *pod) joinPeer(t *testing.T, url string) {
	t.Helper()
	// The pod is b, the home of the filter f these tests write to.
	m := wire.Membership{Epoch: 1, Self: "b", Members: []wire.Member{{Name: "b", URL: "http://127.0.0.1:1"}, {Name: "a", URL: url}}}
	if err := p.node.SetMembership(m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.node.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for !p.node.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the pod did not catch up from its peer")
		}
		time.Sleep(time.Millisecond)
	}
}

var small = filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "key-" + strconv.Itoa(i)
	}
	return out
}

// Alone, a pod applies and journals its writes and has nobody to replicate them to.
func TestWritesAlone(t *testing.T) {
	p := newPod(t, filter.Limits{}, false)
	ctx := t.Context()
	f, created, err := p.writes.Create(ctx, wire.ConsistencyAll, "f", small, false)
	if err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	if present, err := p.writes.CheckAndSet(ctx, wire.ConsistencyAll, f, "x"); err != nil || present {
		t.Fatalf("CheckAndSet of a new value = %v, %v", present, err)
	}
	if present, err := p.writes.CheckAndSetMany(ctx, wire.ConsistencyAll, f, []string{"x", "y", "y"}); err != nil || !slices.Equal(present, []bool{true, false, true}) {
		t.Fatalf("CheckAndSetMany = %v, %v", present, err)
	}
	if err := p.writes.Set(ctx, wire.ConsistencyAll, f, "z"); err != nil {
		t.Fatal(err)
	}
	if err := p.writes.SetMany(ctx, wire.ConsistencyAll, f, []string{"u", "v"}); err != nil {
		t.Fatal(err)
	}
	if err := p.writes.Delete(ctx, wire.ConsistencyAll, "f"); err != nil {
		t.Fatal(err)
	}
	want := []string{"create f", "add f", "add f", "add f", "add f", "delete f"}
	if !slices.Equal(p.journal.ops, want) {
		t.Errorf("journaled %v, want %v", p.journal.ops, want)
	}
	if n := p.node.Stats().ReplicatedOps.Load(); n != 0 {
		t.Errorf("%d ops replicated by a pod alone", n)
	}
}

// Creates, adds and deletes reach the peer with the filter's generation, at consistency all.
func TestWritesReachThePeer(t *testing.T) {
	url, b := peer(t)
	p := newPod(t, filter.Limits{}, false)
	p.joinPeer(t, url)
	ctx := t.Context()
	f, _, err := p.writes.Create(ctx, wire.ConsistencyAll, "f", small, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.writes.CheckAndSet(ctx, wire.ConsistencyAll, f, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.writes.SetMany(ctx, wire.ConsistencyAll, f, []string{"y", "z"}); err != nil {
		t.Fatal(err)
	}
	if present, err := b.MultiCheck(ctx, "f", []string{"x", "y", "z", "w"}); err != nil || !slices.Equal(present, []bool{true, true, true, false}) {
		t.Fatalf("the peer answers %v, %v; want the three values written through the pod", present, err)
	}
	if err := p.writes.Delete(ctx, wire.ConsistencyAll, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "f"); !client.IsNotFound(err) {
		t.Errorf("the peer after a replicated delete: %v, want not found", err)
	}
}

// A batch the engine cannot finish (a memory limit reached in the middle) keeps what it added,
// and the peer gets exactly that before the error is answered.
func TestBatchFailingPartWayReplicatesWhatItApplied(t *testing.T) {
	url, b := peer(t)
	p := newPod(t, filter.Limits{TotalBytes: 64 << 10}, false)
	p.joinPeer(t, url)
	ctx := t.Context()
	f, _, err := p.writes.Create(ctx, wire.ConsistencyAll, "f", small, false)
	if err != nil {
		t.Fatal(err)
	}
	batch := keys(200_000)
	present, err := p.writes.CheckAndSetMany(ctx, wire.ConsistencyAll, f, batch)
	if !errors.Is(err, filter.ErrOutOfMemory) {
		t.Fatalf("CheckAndSetMany past the memory limit: %v, want ErrOutOfMemory", err)
	}
	applied := len(present)
	if applied == 0 || applied == len(batch) {
		t.Fatalf("%d of %d keys applied; the test needs a batch that fails part-way", applied, len(batch))
	}
	// The journal records a batch before it is applied (filter.Journal): all of it.
	if got := p.journal.addedKeys(); !slices.Equal(got, batch) {
		t.Errorf("journaled %d keys, want the whole batch of %d", len(got), len(batch))
	}
	// The error is the engine's, so a replication that outlived its timeout on a busy machine is
	// not reported: the peer may still be applying the keys.
	await.Until(t, 30*time.Second, "the peer to hold every key applied and journaled here before the error", func() (bool, string) {
		onPeer, err := b.MultiCheck(ctx, "f", batch[:applied])
		if err != nil {
			return false, err.Error()
		}
		if missing := slices.Index(onPeer, false); missing >= 0 {
			return false, "it lacks " + batch[missing]
		}
		return true, ""
	})
}

// A write that too few pods acknowledge is applied here and answered as a replication failure.
func TestUnacknowledgedWrite(t *testing.T) {
	p := newPod(t, filter.Limits{}, false)
	f, _, err := p.writes.Create(t.Context(), wire.ConsistencyOne, "f", small, false)
	if err != nil {
		t.Fatal(err)
	}
	// A peer nobody listens on: membership installed without catching up from it.
	m := wire.Membership{Epoch: 1, Self: "b", Members: []wire.Member{{Name: "b", URL: "http://127.0.0.1:1"}, {Name: "a", URL: "http://127.0.0.1:1"}}}
	if err := p.node.SetMembership(m); err != nil {
		t.Fatal(err)
	}
	_, err = p.writes.CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "x")
	if !errors.Is(err, replication.ErrReplication) {
		t.Fatalf("a write its only peer cannot take: %v, want ErrReplication", err)
	}
	if !f.Check("x") {
		t.Error("the unacknowledged write was not applied here")
	}
	if _, _, err := p.writes.Create(t.Context(), wire.ConsistencyOne, "g", small, false); !errors.Is(err, writes.ErrCatchingUp) {
		t.Errorf("a create before catching up from the first peers: %v, want ErrCatchingUp", err)
	}
	if err := p.writes.AcceptForwarded("g"); !isHomeUnavailable(err) {
		t.Errorf("a forwarded request before catching up: %v, want a HomeUnavailableError of code 13", err)
	}
}

// A change of expiry is journaled and reaches the peer; one to a deadline already past deletes
// the filter on both, and a change declined does nothing.
func TestChangeOfExpiryIsAWrite(t *testing.T) {
	url, b := peer(t)
	p := newPod(t, filter.Limits{}, false)
	p.joinPeer(t, url)
	ctx := t.Context()
	f, _, err := p.writes.Create(ctx, wire.ConsistencyAll, "f", small, false)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	at := func(at time.Time) filter.ExpiryChange {
		return func(time.Time) (filter.Expiry, bool) { return filter.Expiry{Mode: filter.ExpiryAt, At: at}, true }
	}
	if changed, err := p.writes.ChangeExpiry(ctx, wire.ConsistencyAll, f, at(deadline)); !changed || err != nil {
		t.Fatalf("ChangeExpiry = %v, %v", changed, err)
	}
	if got, err := b.Get(ctx, "f"); err != nil || got.Expiration != deadline.UTC().Format(wire.TimeFormat) {
		t.Errorf("the peer's filter: %+v, %v; want expiration %v", got, err, deadline)
	}
	declined := func(time.Time) (filter.Expiry, bool) { return filter.Expiry{}, false }
	if changed, err := p.writes.ChangeExpiry(ctx, wire.ConsistencyAll, f, declined); changed || err != nil {
		t.Errorf("a declined change = %v, %v", changed, err)
	}
	if changed, err := p.writes.ChangeExpiry(ctx, wire.ConsistencyAll, f, at(time.Now().Add(-time.Second))); !changed || err != nil {
		t.Errorf("a deadline in the past = %v, %v; want true, the filter deleted", changed, err)
	}
	if _, err := b.Get(ctx, "f"); !client.IsNotFound(err) {
		t.Errorf("the peer after a deadline in the past: %v, want not found", err)
	}
	if want := []string{"create f", "expiry at f", "delete f"}; !slices.Equal(p.journal.ops, want) {
		t.Errorf("journaled %v, want %v", p.journal.ops, want)
	}
}

// isHomeUnavailable reports whether err refuses a check-and-set or create with code 13.
func isHomeUnavailable(err error) bool {
	hu, ok := errors.AsType[*writes.HomeUnavailableError](err)
	return ok && hu.Code == wire.CodeHomeUnavailable
}
