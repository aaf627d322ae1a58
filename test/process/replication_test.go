package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// These tests run several real data-plane processes on loopback, tell them their membership as
// the operator would, and show that what one pod acknowledged every pod holds.

// replicaConfig is every pod's config.yaml, as the operator writes it in spirit: not ready until
// told its peers, and every write fsynced, so that a kill -9 loses nothing acknowledged.
const replicaConfig = `
awaitMembership: true
logSync: always
defaultValidSecondsAfterCreate: 0
replicationTimeoutMillis: 3000
antiEntropyIntervalSeconds: %d
`

// replica is one pod of a test cluster. It keeps its port and data directory across restarts,
// as a StatefulSet pod keeps its name, address and volume.
type replica struct {
	name, port, internalPort, dir string
	// respPort is the pod's RESP port when its cluster opens one (startRESPCluster); "" for none.
	respPort string
	dp       *dataPlane
	// scheme is https when the cluster runs over TLS, with tlsArgs naming the pod's files and hc
	// the HTTP client that trusts the cluster's CA.
	scheme  string
	tlsArgs []string
	hc      *http.Client
}

// clientOf is a client of the pod's client port.
func (p *replica) clientOf(opts ...client.Option) *client.Client {
	if p.hc != nil {
		opts = append(opts, client.WithHTTPClient(p.hc))
	}
	return client.New(p.url(), opts...)
}

func (p *replica) url() string { return p.scheme + "://127.0.0.1:" + p.port }

// internalURL is where its peers and the operator call it.
func (p *replica) internalURL() string { return p.scheme + "://127.0.0.1:" + p.internalPort }

type testCluster struct {
	t      *testing.T
	config string
	epoch  uint64
	pods   []*replica
	// tls, when set, runs the pods over TLS with certificates of the cluster's CA.
	tls *clusterTLS
	// resp opens a RESP port on every pod.
	resp bool
}

// newTestCluster starts n pods, tells each the membership of all n, and waits until they are
// ready. antiEntropy is the anti-entropy period in seconds (0: off).
func newTestCluster(t *testing.T, n, antiEntropy int) *testCluster {
	t.Helper()
	return startTestCluster(t, n, antiEntropy, nil)
}

// startTestCluster starts a test cluster, over TLS with tls set, with extra lines of
// configuration.
func startTestCluster(t *testing.T, n, antiEntropy int, tls *clusterTLS, extra ...string) *testCluster {
	t.Helper()
	return startCluster(t, &testCluster{tls: tls}, n, antiEntropy, extra...)
}

// startRESPCluster is startTestCluster of pods that open a RESP port each, over plain TCP.
func startRESPCluster(t *testing.T, n, antiEntropy int, extra ...string) *testCluster {
	t.Helper()
	return startCluster(t, &testCluster{resp: true}, n, antiEntropy, extra...)
}

// startCluster starts the n pods of c, as startTestCluster says.
func startCluster(t *testing.T, c *testCluster, n, antiEntropy int, extra ...string) *testCluster {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.yaml")
	content := fmt.Sprintf(replicaConfig, antiEntropy) + strings.Join(extra, "\n") + "\n"
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	c.t, c.config = t, config
	for i := range n {
		c.pods = append(c.pods, c.newReplica(fmt.Sprintf("pod-%d", i)))
	}
	for _, p := range c.pods {
		c.launch(p)
	}
	c.push(c.pods...)
	for _, p := range c.pods {
		p.dp.waitReady(t)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.pods {
				if p.dp != nil {
					t.Logf("%s logs:\n%s", p.name, p.dp.logs())
				}
			}
		}
	})
	return c
}

// newReplica is a pod with its data directory and, over TLS, certificate, not started. Its ports
// are the kernel's choice at its first start, and the same at every restart.
func (c *testCluster) newReplica(name string) *replica {
	t := c.t
	t.Helper()
	p := &replica{name: name, port: "0", internalPort: "0", dir: t.TempDir(), scheme: "http"}
	if c.resp { // respPort 0 opens no RESP port: the test picks one
		p.respPort = portOf(t, freeAddress(t))
	}
	if c.tls != nil {
		p.scheme = "https"
		files := c.tls.issueFiles(t, name)
		p.tlsArgs = []string{"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-file", files.CA}
		p.hc = c.tls.httpClient
	}
	return p
}

// launch starts the pod's process on its ports and directory, without waiting for readiness. A
// restart takes the ports it had, which another process may have taken meanwhile for a moment:
// it tries again then, as a pod's container would be restarted.
func (c *testCluster) launch(p *replica) {
	c.t.Helper()
	args := append([]string{"-p", p.port, "--internal-port", p.internalPort, "-c", c.config}, p.tlsArgs...)
	if p.respPort != "" {
		args = append(args, "--resp-port", p.respPort)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		dp, err := tryLaunch(c.t, nil, p.dir, args...)
		if err == nil {
			p.dp = dp
			break
		}
		if !errors.Is(err, errExitedEarly) || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			c.t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.port, p.internalPort = portOf(c.t, p.dp.addr), portOf(c.t, p.dp.internalAddr)
	if p.hc != nil {
		p.dp.client = p.clientOf()
		p.dp.internal = client.New(p.internalURL(), client.WithHTTPClient(p.hc), client.Internal(testToken))
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// push tells every pod in to a new membership of exactly those pods, with the next epoch.
func (c *testCluster) push(in ...*replica) {
	c.t.Helper()
	c.epoch++
	c.tell(in, in...)
}

// tell sends the current epoch's membership of members to the pods to.
func (c *testCluster) tell(members []*replica, to ...*replica) {
	c.t.Helper()
	c.tellPlaced(wire.Membership{Epoch: c.epoch}, members, to...)
}

// tellPlaced sends m, with members as its members, to the pods to.
func (c *testCluster) tellPlaced(m wire.Membership, members []*replica, to ...*replica) {
	c.t.Helper()
	for _, p := range members {
		m.Members = append(m.Members, wire.Member{Name: p.name, URL: p.internalURL()})
	}
	for _, p := range to {
		m.Self = p.name
		if err := p.dp.internal.SetMembership(c.t.Context(), m); err != nil {
			c.t.Fatalf("membership of %s: %v", p.name, err)
		}
	}
}

func (p *replica) client(level wire.Consistency) *client.Client {
	return p.clientOf(client.WithConsistency(level))
}

// absent returns the values the pod does not hold, asking it alone.
func (p *replica) absent(t *testing.T, filter string, values []string) []string {
	t.Helper()
	var out []string
	for start := 0; start < len(values); start += 5000 {
		batch := values[start:min(start+5000, len(values))]
		present, err := p.dp.client.MultiCheck(t.Context(), filter, batch)
		if err != nil {
			t.Fatalf("multi-check on %s: %v", p.name, err)
		}
		for i, ok := range present {
			if !ok {
				out = append(out, batch[i])
			}
		}
	}
	return out
}

// eventuallyHolds waits until the pod holds every value.
func (p *replica) eventuallyHolds(t *testing.T, filter string, values []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lost := p.absent(t, filter, values)
		if len(lost) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lacks %d of %d values, such as %q", p.name, len(lost), len(values), lost[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func valuesOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestValuesWrittenThroughAnyPodAreSeenByEveryPod(t *testing.T) {
	bothTransports(t, func(t *testing.T, tls *clusterTLS) { //nolint:thelper // a test's body, run once per transport: its failures belong to its own lines
		c := startTestCluster(t, 3, 0, tls)
		createFilter(t, c.pods[0].dp, "users")

		// consistency=all: every pod holds the write when it is answered.
		for _, p := range c.pods {
			values := valuesOf("all-"+p.name, 50)
			cl := p.client(wire.ConsistencyAll)
			for _, v := range values {
				if _, err := cl.CheckAndSet(t.Context(), "users", v); err != nil {
					t.Fatalf("check-and-set through %s: %v", p.name, err)
				}
			}
			for _, q := range c.pods {
				if lost := q.absent(t, "users", values); len(lost) > 0 {
					t.Errorf("written through %s with consistency=all, %s lacks %d values at once, such as %q", p.name, q.name, len(lost), lost[0])
				}
			}
		}

		// The default, quorum: a quorum read sees the write at once (R + W > N), and every pod holds
		// it shortly after.
		for _, p := range c.pods {
			values := valuesOf("quorum-"+p.name, 300)
			if err := p.dp.client.MultiSet(t.Context(), "users", values[:200]); err != nil {
				t.Fatalf("multi-set through %s: %v", p.name, err)
			}
			if _, err := p.dp.client.MultiCheckAndSet(t.Context(), "users", values[200:]); err != nil {
				t.Fatalf("multi-check-and-set through %s: %v", p.name, err)
			}
			for _, q := range c.pods {
				present, err := q.client(wire.ConsistencyQuorum).MultiCheck(t.Context(), "users", values)
				if err != nil {
					t.Fatalf("quorum multi-check on %s: %v", q.name, err)
				}
				for i, ok := range present {
					if !ok {
						t.Fatalf("written through %s, a quorum read on %s misses %q", p.name, q.name, values[i])
					}
				}
			}
			for _, q := range c.pods {
				q.eventuallyHolds(t, "users", values)
			}
		}

		// Values never written stay absent everywhere: the reads above could not pass by answering
		// true for anything.
		for _, q := range c.pods {
			if lost := q.absent(t, "users", valuesOf("never-written", 100)); len(lost) < 90 {
				t.Errorf("%s holds %d of 100 values never written", q.name, 100-len(lost))
			}
		}

		// Every batch went on a stream (over the internal port's TLS, when it has one), none as a
		// request: a pod falls back to requests only for a peer that takes no stream.
		// The two counters are read apart, and a batch counts as streamed a moment before it
		// counts as sent: they agree once the last batches are answered.
		for _, p := range c.pods {
			await.Until(t, 10*time.Second, p.name+"'s batches to have gone on streams", func() (bool, string) {
				sent, streamed := counter(t, p, "bloomery_replication_sent_batches_total"), counter(t, p, "bloomery_replication_streamed_batches_total")
				return sent > 0 && streamed == sent, fmt.Sprintf("%v batches sent, %v of them on streams", sent, streamed)
			})
		}
	})
}

func TestKilledPodLosesNothingAndCatchesUp(t *testing.T) {
	bothTransports(t, func(t *testing.T, tls *clusterTLS) { //nolint:thelper // a test's body, run once per transport: its failures belong to its own lines
		c := startTestCluster(t, 3, 0, tls)
		createFilter(t, c.pods[0].dp, "events")
		victim, survivors := c.pods[2], c.pods[:2]

		var mu sync.Mutex
		var acked []string
		stop := make(chan struct{})
		var writers sync.WaitGroup
		for w := range 4 {
			p := survivors[w%2]
			writers.Go(func() {
				cl := p.clientOf()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					v := fmt.Sprintf("w%d-%d", w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := cl.CheckAndSet(ctx, "events", v)
					cancel()
					if err == nil {
						mu.Lock()
						acked = append(acked, v)
						mu.Unlock()
					}
				}
			})
		}
		// Acknowledged writes before the kill, and as many again while the pod is down.
		ackedAtLeast := func(n int, when string) int {
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				got := len(acked)
				mu.Unlock()
				if got >= n {
					return got
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: only %d writes acknowledged, want %d", when, got, n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		before := ackedAtLeast(100, "before the kill")
		victim.dp.stop(t, syscall.SIGKILL)
		ackedAtLeast(before+100, "while the pod is down")
		close(stop)
		writers.Wait()

		for _, p := range survivors {
			p.eventuallyHolds(t, "events", acked)
		}

		c.launch(victim)
		if victim.dp.ready(t) {
			t.Fatal("the restarted pod was ready before it was told its peers")
		}
		c.tell(c.pods, victim) // the operator tells a restarted pod the current membership
		victim.dp.waitReady(t)
		if lost := victim.absent(t, "events", acked); len(lost) > 0 {
			t.Fatalf("once ready, the restarted pod lacks %d of %d acknowledged values, such as %q", len(lost), len(acked), lost[0])
		}
	})
}

func TestNewPodCatchesUpBeforeItIsReady(t *testing.T) {
	c := newTestCluster(t, 2, 0)
	createFilter(t, c.pods[0].dp, "a")
	createFilter(t, c.pods[1].dp, "b")
	values := valuesOf("v", 20_000)
	if err := c.pods[0].dp.client.MultiSet(t.Context(), "a", values); err != nil {
		t.Fatal(err)
	}
	if err := c.pods[1].dp.client.MultiSet(t.Context(), "b", values[:5000]); err != nil {
		t.Fatal(err)
	}

	joiner := c.newReplica("pod-2")
	c.pods = append(c.pods, joiner)
	c.launch(joiner)
	if joiner.dp.ready(t) {
		t.Fatal("a new pod was ready before it was told its peers")
	}
	c.push(c.pods...)
	joiner.dp.waitReady(t)

	names, err := joiner.dp.client.List(t.Context())
	if err != nil || len(names) != 2 {
		t.Fatalf("the new pod lists %v (%v), want [a b]", names, err)
	}
	if lost := joiner.absent(t, "a", values); len(lost) > 0 {
		t.Fatalf("once ready, the new pod lacks %d of %d values of a", len(lost), len(values))
	}
	if lost := joiner.absent(t, "b", values[:5000]); len(lost) > 0 {
		t.Fatalf("once ready, the new pod lacks %d of 5000 values of b", len(lost))
	}
}

// Concurrent check-and-sets of one value through every pod answer false once: each pod sends them
// to the filter's home. A client that marks its requests as forwarded by a peer changes nothing:
// the client port does not believe the marker.
func TestConcurrentCheckAndSetAnswersFalseOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		marked bool
		tls    bool
	}{{"http", false, false}, {"marked as forwarded", true, false}, {"tls", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var ctls *clusterTLS
			if tc.tls {
				ctls = newClusterTLS(t)
			}
			c := startTestCluster(t, 3, 0, ctls)
			createFilter(t, c.pods[0].dp, "coupons")
			var opts []client.Option
			if tc.marked {
				opts = append(opts, client.Forwarded())
			}
			checkAndSetOnceThroughEveryPod(t, c.pods, "coupons", valuesOf("coupon", 300), opts...)
		})
	}
}

func TestDeletedFilterStaysDeletedAfterAStalePeersAntiEntropy(t *testing.T) {
	c := newTestCluster(t, 2, 1)
	a, b := c.pods[0], c.pods[1]
	createFilter(t, a.dp, "doomed")
	createFilter(t, a.dp, "kept")
	if err := a.dp.client.MultiSet(t.Context(), "doomed", valuesOf("d", 100)); err != nil {
		t.Fatal(err)
	}

	// b goes down holding both filters; meanwhile "doomed" is deleted and "kept" written to.
	b.dp.stop(t, syscall.SIGKILL)
	one := a.client(wire.ConsistencyOne)
	if err := one.Delete(t.Context(), "doomed"); err != nil {
		t.Fatal(err)
	}
	missed := valuesOf("while-b-was-down", 500)
	if err := one.MultiSet(t.Context(), "kept", missed); err != nil {
		t.Fatal(err)
	}

	// b is back but not told its membership, so it neither catches up nor learns of the delete:
	// a stale peer. a's anti-entropy pulls from it (b is a's only peer).
	passes := counter(t, a, "bloomery_replication_anti_entropy_passes_total")
	differences := counter(t, a, "bloomery_replication_differences_total")
	c.launch(b)
	for deadline := time.Now().Add(20 * time.Second); counter(t, a, "bloomery_replication_anti_entropy_passes_total") < passes+3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a ran no anti-entropy passes against b")
		}
	}
	if got := counter(t, a, "bloomery_replication_differences_total"); got <= differences {
		t.Fatalf("a's anti-entropy found no difference with b (%v before, %v after): it did not see b's stale copy", differences, got)
	}
	if _, err := a.dp.client.Get(t.Context(), "doomed"); !client.IsNotFound(err) {
		t.Fatalf("after anti-entropy with a stale peer, GET doomed on a = %v, want 404", err)
	}
	// The stale peer serves no filter request before it catches up; its inventory, which its
	// peers read, shows what it holds.
	var inv wire.Inventory
	if err := b.dp.internal.Call(t.Context(), http.MethodGet, wire.InventoryPath, "", nil, &inv); err != nil ||
		!slices.ContainsFunc(inv.Filters, func(d wire.Digest) bool { return d.Name == "doomed" }) {
		t.Fatalf("the stale peer should still hold doomed before it catches up: %+v, %v", inv.Filters, err)
	}

	// Told its membership, b catches up: the delete reaches it, and the writes it missed.
	c.tell(c.pods, b)
	b.dp.waitReady(t)
	if _, err := b.dp.client.Get(t.Context(), "doomed"); !client.IsNotFound(err) {
		t.Fatalf("after catch-up, GET doomed on b = %v, want 404", err)
	}
	if lost := b.absent(t, "kept", missed); len(lost) > 0 {
		t.Fatalf("after catch-up, b lacks %d of the %d values written while it was down", len(lost), len(missed))
	}
}

// counter reads one unlabelled counter from the pod's /metrics.
func counter(t *testing.T, p *replica, name string) float64 {
	t.Helper()
	v, ok := metricValue(t, "http://"+p.dp.opsAddr, name)
	if !ok {
		t.Fatalf("%s has no %s in /metrics", p.name, name)
	}
	return v
}

// metricValue reads one unlabelled metric from the /metrics of the data plane at baseURL.
func metricValue(t *testing.T, baseURL, name string) (float64, bool) {
	t.Helper()
	_, body := httpGet(t, baseURL+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}
