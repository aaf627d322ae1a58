package cluster_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/cluster"
)

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// create makes a filter through pod, at consistency=all.
func create(t *testing.T, p *cluster.Pod, name string, opts client.CreateOptions) {
	t.Helper()
	if _, created, err := p.With(wire.ConsistencyAll).Create(t.Context(), name, opts); err != nil || !created {
		t.Fatalf("creating %s through %s: created %v, %v", name, p.Name, created, err)
	}
}

const (
	writesTotal      = "bloomery_replication_writes_total"
	failuresTotal    = "bloomery_replication_write_failures_total"
	droppedTotal     = "bloomery_replication_dropped_writes_total"
	batchesTotal     = "bloomery_replication_sent_batches_total"
	forwardedTotal   = "bloomery_replication_forwarded_requests_total"
	unavailableTotal = "bloomery_replication_home_unavailable_total"
	mergesTotal      = "bloomery_replication_merges_total"
	mergedBytes      = "bloomery_replication_merged_bytes_total"
	passesTotal      = "bloomery_replication_anti_entropy_passes_total"
	differences      = "bloomery_replication_differences_total"
	queuedWrites     = "bloomery_replication_queued_writes"
	epochGauge       = "bloomery_replication_membership_epoch"
	peersGauge       = "bloomery_replication_peers"
)

// Every write reaches every pod through the proxies: at consistency=all each pod holds it when it
// is answered, each write travels in a batch of its own to each peer, and at quorum, written
// concurrently through every pod, every pod holds every value soon after.
func TestWritesReachEveryPodThroughTheProxies(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	pods := c.Pods()
	for _, p := range pods {
		m := p.Metrics(t)
		if epoch, peers := m.Value(epochGauge), m.Value(peersGauge); epoch != 1 || peers != 2 {
			t.Errorf("%s: membership epoch %v with %v peers, want 1 and 2", p.Name, epoch, peers)
		}
	}
	create(t, pods[0], "users", client.CreateOptions{})

	for _, p := range pods {
		all := p.With(wire.ConsistencyAll)
		for _, v := range values("all-"+p.Name, 30) {
			if err := all.Set(t.Context(), "users", v); err != nil {
				t.Fatalf("set through %s at consistency=all: %v", p.Name, err)
			}
			for _, q := range pods {
				if !q.HoldsAll(t, "users", v) {
					t.Fatalf("%s answered a write at consistency=all, and %s lacks it", p.Name, q.Name)
				}
			}
		}
	}
	// Sequential writes at consistency=all leave nothing to batch together: one batch per write
	// and peer, and no lag.
	for _, p := range pods {
		m := p.Metrics(t)
		writes, batches := m.Value(writesTotal), m.Value(batchesTotal)
		if writes < 30 || batches != 2*writes {
			t.Errorf("%s: %v writes replicated in %v batches, want at least 30 in twice as many", p.Name, writes, batches)
		}
		for _, q := range pods {
			if q != p {
				if queued := m.Value(queuedWrites, "peer", q.Name); queued != 0 {
					t.Errorf("%s: %v writes queued for %s after every write was acknowledged by all", p.Name, queued, q.Name)
				}
				if c.Proxy(p, q).Accepted() == 0 {
					t.Errorf("nothing went from %s to %s through the proxy", p.Name, q.Name)
				}
			}
		}
	}

	var wg sync.WaitGroup
	for _, p := range pods {
		for w := range 4 {
			wg.Go(func() {
				for _, v := range values(fmt.Sprintf("quorum-%s-%d", p.Name, w), 50) {
					if err := p.Client.Set(t.Context(), "users", v); err != nil {
						t.Errorf("set through %s: %v", p.Name, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, p := range pods {
		for _, q := range pods {
			for w := range 4 {
				vs := values(fmt.Sprintf("quorum-%s-%d", p.Name, w), 50)
				await.True(t, cluster.WaitTimeout, q.Name+" to hold what "+p.Name+" was written", func() bool { return q.HoldsAll(t, "users", vs...) })
			}
		}
	}
	for _, p := range pods {
		m := p.Metrics(t)
		if failures := m.Value(failuresTotal); failures != 0 {
			t.Errorf("%s: %v writes failed in a healthy cluster", p.Name, failures)
		}
		if writes, batches := m.Value(writesTotal), m.Value(batchesTotal); writes < 230 || batches > 2*writes {
			t.Errorf("%s: %v writes replicated in %v batches", p.Name, writes, batches)
		}
	}
	if holds := pods[2].Holds(t, "users", values("never-written", 20)...); strings.Count(fmt.Sprint(holds), "true") > 2 {
		t.Errorf("values never written are present: %v", holds)
	}
}

// A write whose consistency cannot be met answers 503 code 9 naming each peer and why, stays
// applied on the pod that served it (a retried check-and-set answers true), and reaches the
// others through anti-entropy once they are reachable again.
func TestWriteThatCannotMeetItsConsistencyStaysAndIsRepaired(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.AntiEntropyInterval = 200 * time.Millisecond
	}})
	a, b, d := c.Pod(0), c.Pod(1), c.Pod(2)
	name := c.NameHomedAt("coupons", a)
	create(t, a, name, client.CreateOptions{})
	before := a.Metrics(t)

	c.Partition(a)
	err := a.Client.Set(t.Context(), name, "refused")
	msg := cluster.WantError(t, err, 503, wire.CodeReplication)
	want := `replication incomplete: the write is applied on this pod, but consistency "quorum" needs 2 of 3 pods and 1 acknowledged (`
	if !strings.HasPrefix(msg, want) || !strings.Contains(msg, "pod-1: ") || !strings.Contains(msg, "pod-2: ") || refusals(msg) != 2 {
		t.Errorf("a quorum write with both peers refusing: %q, want it to start %q and name both peers, refused", msg, want)
	}

	// While a holds its peers down, its writes do not call them: a's calls to them pass until a
	// calls them again (their calls to a stay refused: their anti-entropy must not pull the
	// writes).
	reach := func() {
		c.Proxy(a, b).Set(cluster.Pass())
		c.Proxy(a, d).Set(cluster.Pass())
		c.AwaitReachable(a)
	}
	reach()

	// A peer that does not answer holds the write for the replication timeout...
	c.Proxy(a, b).Set(cluster.Stall())
	c.Proxy(a, d).Set(cluster.Refuse())
	err = a.Client.Set(t.Context(), name, "stalled")
	msg = cluster.WantError(t, err, 503, wire.CodeReplication)
	// The stalled peer's part fails at the replication timeout, by the writer's clock ("no answer
	// within") or, on a loaded machine, by its sender's a moment before ("deadline exceeded").
	timedOut := strings.Contains(msg, "no answer within 1s") || strings.Contains(msg, "deadline exceeded")
	if !strings.Contains(msg, `consistency "quorum" needs 2 of 3 pods and 1 acknowledged`) || !timedOut || !strings.Contains(msg, "pod-2: ") {
		t.Errorf("a quorum write with a peer stalled and one refusing: %q", msg)
	}
	// ...unless so many peers failed that the level cannot be reached any more: the answer comes
	// at once, without waiting for the stalled one. The stalled peer is called again, not held
	// down, once the stalled write's batch has failed and a calls it again.
	c.AwaitDown(a, 2)
	reach()
	c.Proxy(a, b).Set(cluster.Stall())
	c.Proxy(a, d).Set(cluster.Refuse())
	err = a.With(wire.ConsistencyAll).Set(t.Context(), name, "early")
	msg = cluster.WantError(t, err, 503, wire.CodeReplication)
	if !strings.Contains(msg, `consistency "all" needs 3 of 3 pods and 1 acknowledged (pod-2: `) || strings.Contains(msg, "no answer within") {
		t.Errorf("a write at consistency=all with a peer refusing: %q, want it answered on the refusal alone", msg)
	}

	// A check-and-set on its home, a, answered 503: applied there all the same.
	c.Proxy(a, b).Set(cluster.Refuse())
	_, err = a.Client.CheckAndSet(t.Context(), name, "checked")
	cluster.WantError(t, err, 503, wire.CodeReplication)
	if err := a.With(wire.ConsistencyOne).Set(t.Context(), name, "alone"); err != nil {
		t.Errorf("a write at consistency=one while partitioned: %v", err)
	}

	written := []string{"refused", "stalled", "early", "checked", "alone"}
	if !a.HoldsAll(t, name, written...) {
		t.Errorf("the pod that served the writes lacks some of them: %v", a.Holds(t, name, written...))
	}
	for _, q := range []*cluster.Pod{b, d} {
		if got := q.Holds(t, name, written...); strings.Contains(fmt.Sprint(got), "true") {
			t.Errorf("%s holds writes it could not have received: %v", q.Name, got)
		}
	}
	after := a.Metrics(t)
	if got := after.Value(failuresTotal) - before.Value(failuresTotal); got != 4 {
		t.Errorf("%s counted %v writes answered 503 code 9, want 4", a.Name, got)
	}
	if got := after.Value(writesTotal) - before.Value(writesTotal); got != 5 {
		t.Errorf("%s counted %v writes replicated, want 5", a.Name, got)
	}

	repairs := map[string]float64{}
	for _, q := range []*cluster.Pod{b, d} {
		repairs[q.Name] = q.Metric(t, mergesTotal)
	}
	c.Heal()
	for _, q := range []*cluster.Pod{b, d} {
		await.True(t, cluster.WaitTimeout, q.Name+" to be repaired", func() bool { return q.HoldsAll(t, name, written...) })
		m := q.Metrics(t)
		if m.Value(mergesTotal) <= repairs[q.Name] || m.Value(mergedBytes) == 0 || m.Value(differences) == 0 || m.Value(passesTotal) == 0 {
			t.Errorf("%s was repaired, but its metrics do not show a merge: merges %v (before %v), bytes %v, differences %v, passes %v", q.Name,
				m.Value(mergesTotal), repairs[q.Name], m.Value(mergedBytes), m.Value(differences), m.Value(passesTotal))
		}
	}
	// Retrying is safe: the check-and-set the first attempt applied answers true, through any pod.
	if present, err := b.Client.CheckAndSet(t.Context(), name, "checked"); err != nil || !present {
		t.Errorf("the retried check-and-set through %s = %v, %v; want true", b.Name, present, err)
	}
}

// refusals counts the peers a message says refused: "connection refused", or, when a kept-alive
// connection that the refusal cut was reused, "EOF" or a reset.
func refusals(msg string) int {
	return strings.Count(msg, "connection refused") + strings.Count(msg, ": EOF") + strings.Count(msg, "connection reset by peer")
}
