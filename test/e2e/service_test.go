//go:build e2e

package e2e

import (
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// TestServicePath sends an application's writes and reads through the client Service, as every
// application in the cluster reaches Bloomery: its cluster IP, the EndpointSlices the real
// EndpointSlice controller publishes from the pods' readiness, and the harness's service proxy
// standing for kube-proxy. A pod deleted under that traffic drains before it stops (the operator's
// shutdownDrainDelayMillis), and a pod that stops answering its readiness probe (its process
// frozen with SIGSTOP) leaves the endpoints and gets no new connection until it answers again. No
// request fails beyond the README's retries, and every check of an acknowledged value answers
// true.
func TestServicePath(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	svc := n.serviceAPI("example", "http")
	if present := svc.checkAndSet("users", "through-the-service"); present {
		t.Error("check-and-set of a new value through the Service answered true")
	}
	traffic := n.startClientTraffic(t, "users", "through-service")
	traffic.w.waitAcked(t, 50)

	deleted := time.Now()
	n.run("delete", "pod", "example-1")
	n.wait("condition=Ready", "pod/example-1")
	n.wait("condition=Ready", "bloomcluster/example")
	traffic.w.waitAcked(t, traffic.w.count(time.Time{}, time.Now())+50)
	t.Logf("example-1 deleted and back in %v", time.Since(deleted).Round(time.Millisecond))

	frozen := n.api("example-2")
	endpoint := strings.TrimPrefix(frozen.base, "http://")
	pid := freezeContainer(t, n, "example-2")
	stopped := time.Now()
	// Its liveness probe may have the node agent kill and restart it meanwhile: then there is
	// nothing left to resume.
	resume := sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	t.Cleanup(resume)
	await.Until(t, waitTimeout, "example-2 leaves the Service's ready endpoints", func() (bool, string) {
		ready := n.readyEndpoints("example")
		return !slices.Contains(strings.Fields(ready), endpointIP(endpoint)), "ready endpoints: " + ready
	})
	t.Logf("example-2 left the ready endpoints %v after it froze", time.Since(stopped).Round(time.Millisecond))
	before, acked := h.proxy.Connections(endpoint), traffic.w.count(time.Time{}, time.Now())
	traffic.w.waitAcked(t, acked+30)
	after := h.proxy.Connections(endpoint)
	// Its liveness probe may have had it restarted and ready again meanwhile (on a loaded machine
	// the writes slow down while the frozen pod holds their replication): then it earned them.
	if ready := n.readyEndpoints("example"); slices.Contains(strings.Fields(ready), endpointIP(endpoint)) {
		t.Logf("example-2 was ready again, restarted by its liveness probe, before 30 more writes were acknowledged (%d connections)", after-before)
	} else if after != before {
		t.Errorf("the Service opened %d connections to example-2 while it was not ready", after-before)
	}
	resume()
	n.wait("condition=Ready", "pod/example-2")
	await.Until(t, waitTimeout, "example-2 gets connections again once ready", func() (bool, string) {
		return h.proxy.Connections(endpoint) > before, "ready endpoints: " + n.readyEndpoints("example")
	})

	traffic.halt(t)
	requireEverywhere(t, "users", traffic.w.values(), n.apis(podNames(sampleReplicas)...))
}

// readyEndpoints lists the addresses the EndpointSlices of a Service mark ready.
func (n namespace) readyEndpoints(service string) string {
	n.t.Helper()
	return strings.TrimSpace(n.run("get", "endpointslices", "-l", "kubernetes.io/service-name="+service, "-o",
		`jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]} {end}`))
}

// endpointIP is the address of "ip:port".
func endpointIP(endpoint string) string {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return endpoint
	}
	return host
}
