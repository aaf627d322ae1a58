// Package cluster runs a cluster of data planes inside one test binary, race detector included:
// real run.DataPlanes serving on loopback listeners, told their membership as the operator tells
// them, and reaching one another only through a Proxy per directed pair of pods, whose fault a
// test switches at run time (drop, refuse, delay, stall, partition). The test's own clients talk
// to the pods directly. See docs/testing.md.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// Token is the cluster's internal bearer token.
const Token = "the-token-of-the-in-process-cluster"

// Options shape a cluster. The zero Options are three pods in memory.
type Options struct {
	// Pods is the number of pods started and told their membership by New; 0 means 3.
	Pods int
	// Persist gives every pod a data directory of its own (a temporary one) instead of memory.
	Persist bool
	// Configure, if set, adjusts each pod's configuration after the harness's defaults, which
	// are: awaitMembership, replicationTimeoutMillis 1000, anti-entropy off, filters of 10,000
	// insertions at fpp 0.01 unless a create asks otherwise, no drain delay.
	Configure func(pod string, cfg *config.Config)
}

// Cluster is the pods of one test and the proxies between them.
type Cluster struct {
	t    testing.TB
	opts Options
	// token is the file every pod reads its token from.
	token string
	http  *http.Client

	mu      sync.Mutex
	pods    []*Pod
	proxies map[[2]string]*Proxy
	epoch   uint64
	members []*Pod // the last membership pushed
}

// New starts the pods, tells each its membership (epoch 1, every pod) and waits until every one
// is ready. Everything stops when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("a cluster of data planes: not in -short")
	}
	if opts.Pods == 0 {
		opts.Pods = 3
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		t: t, opts: opts, token: token, proxies: map[[2]string]*Proxy{},
		http: client.NewHTTPClient(client.TransportOptions{DialTimeout: 5 * time.Second, MaxIdleConns: 256, MaxIdleConnsPerHost: 64}),
	}
	t.Cleanup(c.stop)
	for i := range opts.Pods {
		c.Start(fmt.Sprintf("pod-%d", i))
	}
	c.Push(c.Pods()...)
	c.WaitReady(c.Pods()...)
	return c
}

// Pods are every pod started, in the order they were.
func (c *Cluster) Pods() []*Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Pod(nil), c.pods...)
}

// Pod is the pod started i-th.
func (c *Cluster) Pod(i int) *Pod { return c.Pods()[i] }

// Start starts a pod, with a proxy each way between it and every pod started before, but does not
// tell anyone: it waits for its membership (awaitMembership) until Push names it.
func (c *Cluster) Start(name string) *Pod {
	t := c.t
	t.Helper()
	cfg := config.Default()
	cfg.PodName = name
	cfg.InternalTokenFile = c.token
	cfg.AwaitMembership = true
	cfg.InMemory = !c.opts.Persist
	if c.opts.Persist {
		cfg.DataDir = t.TempDir()
	}
	cfg.ReplicationTimeout = time.Second
	cfg.AntiEntropyInterval = 0
	cfg.DefaultExpectedInsertions = 10_000
	cfg.DefaultFPP = 0.01
	cfg.ShutdownDrainDelay = 0
	// net/http's Shutdown waits up to 5 s for a connection dialed but not yet used, and peers'
	// transports dial ahead: a shorter timeout fails the stop on a busy machine.
	cfg.GracefulShutdownTimeout = 15 * time.Second
	if c.opts.Configure != nil {
		c.opts.Configure(name, &cfg)
	}
	logs := &logBuffer{}
	dp, err := run.New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	ls := run.Listeners{Client: listen(t), Internal: listen(t), Ops: listen(t)}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pod{
		Name:        name,
		URL:         "http://" + ls.Client.Addr().String(),
		InternalURL: "http://" + ls.Internal.Addr().String(),
		OpsURL:      "http://" + ls.Ops.Addr().String(),
		Config:      cfg,
		c:           c,
		logs:        logs,
		cancel:      cancel,
		done:        make(chan error, 1),
	}
	p.Client = client.New(p.URL, client.WithHTTPClient(c.http))
	p.Internal = client.New(p.InternalURL, client.WithHTTPClient(c.http), client.Internal(Token))
	go func() { p.done <- dp.Run(ctx, ls) }()

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.pods {
		c.proxies[[2]string{p.Name, q.Name}] = newProxy(t, p.Name, q.Name, strings.TrimPrefix(q.InternalURL, "http://"))
		c.proxies[[2]string{q.Name, p.Name}] = newProxy(t, q.Name, p.Name, strings.TrimPrefix(p.InternalURL, "http://"))
	}
	c.pods = append(c.pods, p)
	return p
}

// Push tells each of members, with the next epoch, a membership of exactly members, as the
// operator does. Each pod is told its peers' URLs as the proxies from it to them, and its own
// internal port.
func (c *Cluster) Push(members ...*Pod) {
	c.t.Helper()
	c.mu.Lock()
	c.epoch++
	epoch := c.epoch
	c.members = append([]*Pod(nil), members...)
	c.mu.Unlock()
	for _, p := range members {
		c.tell(epoch, members, p)
	}
}

// Tell tells the pods the membership last pushed, again: the operator does so with a pod that
// restarted.
func (c *Cluster) Tell(pods ...*Pod) {
	c.t.Helper()
	c.mu.Lock()
	epoch, members := c.epoch, c.members
	c.mu.Unlock()
	for _, p := range pods {
		c.tell(epoch, members, p)
	}
}

func (c *Cluster) tell(epoch uint64, members []*Pod, to *Pod) {
	c.t.Helper()
	m := wire.Membership{Epoch: epoch, Self: to.Name}
	for _, q := range members {
		url := to.InternalURL
		if q != to {
			url = c.Proxy(to, q).URL()
		}
		m.Members = append(m.Members, wire.Member{Name: q.Name, URL: url})
	}
	if err := to.Internal.SetMembership(c.t.Context(), m); err != nil {
		c.t.Fatalf("telling %s its membership of epoch %d: %v", to.Name, epoch, err)
	}
}

// Epoch is the epoch of the last membership pushed.
func (c *Cluster) Epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// Proxy is what from's calls to to go through.
func (c *Cluster) Proxy(from, to *Pod) *Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proxies[[2]string{from.Name, to.Name}]
	if p == nil {
		c.t.Fatalf("no proxy from %s to %s", from.Name, to.Name)
	}
	return p
}

// SetFault sets f on every proxy from the pod from to each of to (every other pod if none).
func (c *Cluster) SetFault(f Fault, from *Pod, to ...*Pod) {
	if len(to) == 0 {
		to = c.others(from)
	}
	for _, q := range to {
		c.Proxy(from, q).Set(f)
	}
}

// Partition refuses every connection between a and each of others (every other pod if none), both
// ways.
func (c *Cluster) Partition(a *Pod, others ...*Pod) {
	if len(others) == 0 {
		others = c.others(a)
	}
	for _, b := range others {
		c.Proxy(a, b).Set(Refuse())
		c.Proxy(b, a).Set(Refuse())
	}
}

// Heal lets every proxy pass again, and waits until every running pod calls its peers again
// (AwaitReachable): the pods' memberships must name no pod stopped.
func (c *Cluster) Heal() {
	c.t.Helper()
	c.mu.Lock()
	proxies := make([]*Proxy, 0, len(c.proxies))
	for _, p := range c.proxies {
		proxies = append(proxies, p)
	}
	c.mu.Unlock()
	for _, p := range proxies {
		p.Set(Pass())
	}
	var running []*Pod
	for _, p := range c.Pods() {
		if !p.stopped.Load() {
			running = append(running, p)
		}
	}
	c.AwaitReachable(running...)
}

// AwaitReachable waits until none of pods holds a peer down (bloomery_replication_peers_down is
// 0): a pod that got no answer from a peer fails its calls to it at once until a probe, up to a
// probe interval later, finds it again. A call cut by a change of fault may hold its peer down a
// moment after that change: a test that cut one waits for the pod to hold the peer down first
// (AwaitDown). A pod whose membership names a pod stopped holds that one down for good.
func (c *Cluster) AwaitReachable(pods ...*Pod) {
	c.t.Helper()
	for _, p := range pods {
		await.True(c.t, WaitTimeout, p.Name+" to call its peers again", func() bool {
			return p.Metric(c.t, "bloomery_replication_peers_down") == 0
		})
	}
}

// AwaitDown waits until pod holds n of its peers down (AwaitReachable).
func (c *Cluster) AwaitDown(pod *Pod, n int) {
	c.t.Helper()
	await.True(c.t, WaitTimeout, fmt.Sprintf("%s to hold %d peers down", pod.Name, n), func() bool {
		return pod.Metric(c.t, "bloomery_replication_peers_down") == float64(n)
	})
}

func (c *Cluster) others(p *Pod) []*Pod {
	var out []*Pod
	for _, q := range c.Pods() {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// HomeOrder is the order in which the pods of the last membership serve a filter's check-and-sets
// and creates: its home first (docs/replication.md, the home pod).
func (c *Cluster) HomeOrder(filter string) []*Pod {
	c.mu.Lock()
	members := c.members
	c.mu.Unlock()
	m := wire.Membership{Epoch: 1, Self: members[0].Name}
	byName := map[string]*Pod{}
	for _, p := range members {
		m.Members = append(m.Members, wire.Member{Name: p.Name, URL: "http://pod:1"})
		byName[p.Name] = p
	}
	ms := replication.NewMembership()
	if err := ms.Set(m); err != nil {
		c.t.Fatal(err)
	}
	order, _ := ms.HomeOrder(filter)
	out := make([]*Pod, len(order))
	for i, o := range order {
		out[i] = byName[o.Name]
	}
	return out
}

// NameHomedAt is a filter name starting with prefix whose home is the pod home.
func (c *Cluster) NameHomedAt(prefix string, home *Pod) string {
	for i := range 10_000 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if c.HomeOrder(name)[0] == home {
			return name
		}
	}
	c.t.Fatalf("no name %s-* has its home on %s", prefix, home.Name)
	return ""
}

// WaitReady waits until each pod's /readyz answers 200.
func (c *Cluster) WaitReady(pods ...*Pod) {
	c.t.Helper()
	for _, p := range pods {
		await.True(c.t, WaitTimeout, p.Name+" to be ready", func() bool {
			ready, _ := p.Ready(c.t)
			return ready
		})
	}
}

// AwaitHomes waits until none of pods is a new home still merging from a quorum of owners before
// serving the check-and-sets it gained (bloomery_replication_standing_in is 0): after a Push, the
// check-and-sets of the homes it moved answer 503 code 13 until then.
func (c *Cluster) AwaitHomes(pods ...*Pod) {
	c.t.Helper()
	for _, p := range pods {
		await.True(c.t, WaitTimeout, p.Name+" to serve as a home", func() bool {
			return p.Metric(c.t, "bloomery_replication_standing_in") == 0
		})
	}
}

// stop closes the proxies, then stops the pods, and shows their logs when the test failed.
func (c *Cluster) stop() {
	c.mu.Lock()
	proxies, pods := c.proxies, c.pods
	c.mu.Unlock()
	for _, p := range proxies {
		p.close()
	}
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() {
			if err := p.Stop(); err != nil {
				c.t.Errorf("%s: Run: %v", p.Name, err)
			}
		})
	}
	wg.Wait()
	c.http.CloseIdleConnections()
	if c.t.Failed() {
		for _, p := range pods {
			c.t.Logf("%s logs:\n%s", p.Name, p.Logs())
		}
	}
}

// logBuffer keeps a pod's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
