package faults

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/history"
)

// token is the internal port's token of every pod.
const token = "the-cluster-token-of-the-fault-tests-0123"

// podConfig is every pod's configuration file: it waits to be told its peers, fsyncs every write
// (a kill -9 loses nothing acknowledged) and gives up on a peer after a second.
const podConfig = `
awaitMembership: true
logSync: always
defaultValidSecondsAfterCreate: 0
replicationTimeoutMillis: 1000
requestTimeoutSeconds: 5
`

// pod is one data plane in a namespace of its own. It keeps its address and data directory across
// restarts, as a StatefulSet pod keeps its name and volume.
type pod struct {
	i          int
	name, dir  string
	net        *network
	mu         sync.Mutex
	cmd        *exec.Cmd
	exited     chan struct{}
	log        bytes.Buffer
	api, inner *client.Client // the client and internal ports
}

// cluster is the pods of one test and the membership they were told.
type cluster struct {
	t                 *testing.T
	net               *network
	pods              []*pod
	epoch             uint64
	config, tokenFile string // every pod's
	// factor places each partition on that many pods; 0: on every pod.
	factor, partitions int
	// The membership of epoch: the pods told it, its placement's owners (when factor is set) and
	// the placement a move comes from (nil: none under way).
	members  []*pod
	owners   []string
	previous *wire.Placement
}

// newCluster starts n pods on a network of their own, tells them their membership (each
// partition on factor of them, on every pod when 0), creates the filter name of partitions
// partitions (1 when 0) on them and waits until every pod serves.
func newCluster(t *testing.T, subnet, n, factor, partitions int, name string) *cluster {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.yaml")
	tokenFile := filepath.Join(t.TempDir(), "token")
	partitions = max(partitions, 1)
	c := &cluster{t: t, net: newNetwork(t, subnet), config: config, tokenFile: tokenFile, factor: factor, partitions: partitions}
	for path, text := range map[string]string{config: podConfig, tokenFile: token} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		c.addPod()
	}
	c.tell(c.pods, c.names(c.pods), nil)
	for _, p := range c.pods {
		p.waitReady(t)
	}
	if _, _, err := c.pods[0].api.At(wire.ConsistencyAll).Create(t.Context(), name, client.CreateOptions{
		ExpectedInsertions: new(uint64(1_000_000)), FPP: new(1e-6), ValidPeriodAfterCreate: new(int64(0)),
		Partitions: new(partitions),
	}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return c
}

// addPod starts one more pod, which no membership names yet.
func (c *cluster) addPod() *pod {
	c.t.Helper()
	i := len(c.pods)
	c.net.addPod(i)
	p := &pod{i: i, name: fmt.Sprintf("p%d", i), dir: c.t.TempDir(), net: c.net}
	base := "http://" + c.net.podAddr(i)
	// Each request a connection of its own: a pod killed or partitioned leaves no pooled
	// connection behind that a later request would find dead.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	p.api = client.New(base+":8080", client.WithHTTPClient(hc))
	p.inner = client.New(base+":8090", client.WithHTTPClient(hc), client.Internal(token))
	p.start(c.t, c.config, c.tokenFile)
	c.pods = append(c.pods, p)
	return p
}

func (c *cluster) names(pods []*pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.name
	}
	return out
}

// start runs the pod's data plane in its namespace, and waits until it listens.
func (p *pod) start(t *testing.T, config, tokenFile string) {
	t.Helper()
	// Killed by the cleanup below at the latest; the context ends it if the test stops first.
	cmd := exec.CommandContext(t.Context(), "ip", "netns", "exec", p.net.podNS(p.i), binary, "dataplane",
		"--config", config, "--bind-address", p.net.podAddr(p.i), "-p", "8080", "--internal-port", "8090", "--ops-port", "9090",
		"--internal-token-file", tokenFile, "--data-dir", p.dir)
	cmd.Stdout, cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.log}, &lockedWriter{mu: &p.mu, w: &p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	await.Until(t, 30*time.Second, "pod "+p.name+" listening", func() (bool, string) {
		resp, err := get(t, "http://"+p.net.podAddr(p.i)+":9090"+wire.HealthzPath)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// waitReady waits until the pod's /readyz answers 200: told its membership and caught up.
func (p *pod) waitReady(t *testing.T) {
	t.Helper()
	await.Until(t, 30*time.Second, "pod "+p.name+" ready", func() (bool, string) {
		resp, err := get(t, "http://"+p.net.podAddr(p.i)+":8080"+wire.ReadyzPath)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// kill stops the pod's process with SIGKILL and waits until it is gone.
func (p *pod) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// signal sends sig to the pod's process: SIGSTOP pauses it, SIGCONT resumes it.
func (p *pod) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
}

// logs is what the pod's processes printed.
func (p *pod) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// tell pushes a membership of the next epoch to its members, as the operator does: members, the
// placement's owners (used when factor is set) and the placement a move comes from (nil: none).
func (c *cluster) tell(members []*pod, owners []string, previous *wire.Placement) {
	c.t.Helper()
	c.epoch++
	c.members, c.owners, c.previous = members, owners, previous
	for _, p := range members {
		c.tellOne(p)
	}
}

// tellOne pushes the current membership to p, as the operator does to a pod that restarted.
func (c *cluster) tellOne(p *pod) {
	c.t.Helper()
	m := wire.Membership{Epoch: c.epoch, Self: p.name, Previous: c.previous}
	for _, member := range c.members {
		m.Members = append(m.Members, wire.Member{Name: member.name, URL: "http://" + c.net.podAddr(member.i) + ":8090"})
	}
	if c.factor > 0 {
		m.Owners, m.ReplicationFactor = c.owners, c.factor
	}
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	if err := p.inner.SetMembership(ctx, m); err != nil {
		c.t.Fatalf("telling %s its membership: %v", p.name, err)
	}
}

// targets are the pods as the workload sends to them.
func (c *cluster) targets() []history.Pod {
	out := make([]history.Pod, len(c.pods))
	for i, p := range c.pods {
		out[i] = history.Pod{Name: p.name, API: p.api}
	}
	return out
}

// awaitCaughtUp waits until every member holds the partitions it owns under the current
// membership, pulled from their previous owners (PlacementStatus.CaughtUp), as the operator waits
// before it ends a move.
func (c *cluster) awaitCaughtUp() {
	c.t.Helper()
	await.Until(c.t, time.Minute, fmt.Sprintf("every member caught up under epoch %d", c.epoch), func() (bool, string) {
		var behind []string
		for _, p := range c.members {
			ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
			st, err := p.inner.PlacementStatus(ctx)
			cancel()
			if err != nil || st.Epoch != c.epoch || !st.CaughtUp {
				behind = append(behind, fmt.Sprintf("%s: %+v %v", p.name, st, err))
			}
		}
		return len(behind) == 0, strings.Join(behind, "; ")
	})
}

// restart kills p with SIGKILL, starts it again on its data directory, and tells it its
// membership once it listens.
func (c *cluster) restart(p *pod) {
	c.t.Helper()
	p.kill()
	p.start(c.t, c.config, c.tokenFile)
	c.tellOne(p)
}

// home is the pod that serves the filter's check-and-sets: the one that forwards none of them.
// A filter of many partitions has a home for each: it is then partition 0's, its first owner
// under the placement held (placement.Owners, which every pod computes alike).
func (c *cluster) home(name string) *pod {
	c.t.Helper()
	if c.partitions > 1 {
		first := placement.Owners(name, c.partitions, c.owners, c.factor)[0][0]
		return c.pods[slices.IndexFunc(c.pods, func(p *pod) bool { return p.name == first })]
	}
	for _, p := range c.pods {
		before := forwarded(c.t, p)
		if _, err := p.api.CheckAndSet(c.t.Context(), name, "home-probe-"+p.name); err != nil {
			c.t.Fatalf("check-and-set through %s: %v", p.name, err)
		}
		if forwarded(c.t, p) == before {
			return p
		}
	}
	c.t.Fatalf("every pod forwarded its check-and-set of %s", name)
	return nil
}

// forwarded reads the pod's count of requests it forwarded to another pod.
func forwarded(t *testing.T, p *pod) string {
	t.Helper()
	resp, err := get(t, "http://"+p.net.podAddr(p.i)+":9090/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	for line := range strings.SplitSeq(body.String(), "\n") {
		if strings.HasPrefix(line, "bloomery_replication_forwarded_requests_total ") {
			return line
		}
	}
	t.Fatalf("pod %s has no bloomery_replication_forwarded_requests_total", p.name)
	return ""
}

// lockedWriter writes to w under mu: a process's two output streams share one buffer.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// get sends a GET that ends with the test.
func get(t *testing.T, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}
