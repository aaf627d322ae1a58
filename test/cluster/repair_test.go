package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/cluster"
)

// A new pod waits for its membership, catches up from every peer through the proxies, and is
// ready holding everything they held; the writes after reach it too.
func TestNewPodCatchesUpThroughTheProxies(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	a, b := c.Pod(0), c.Pod(1)
	create(t, a, "users", client.CreateOptions{})
	create(t, b, "orders", client.CreateOptions{ExpectedInsertions: new(uint64(200_000))})
	users, orders := values("u", 2000), values("o", 3000)
	if err := a.Client.MultiSet(t.Context(), "users", users); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.MultiSet(t.Context(), "orders", orders); err != nil {
		t.Fatal(err)
	}

	joiner := c.Start("pod-3")
	await.True(t, cluster.WaitTimeout, "the new pod to answer", func() bool {
		_, msg := joiner.Ready(t)
		return msg == "not ready: waiting for the operator to tell this pod its peers"
	})
	c.Push(append(c.Pods()[:3], joiner)...)
	c.WaitReady(joiner)
	// Ready means caught up: everything is there at once.
	if !joiner.HoldsAll(t, "users", users...) || !joiner.HoldsAll(t, "orders", orders...) {
		t.Fatal("the new pod is ready without every value its peers held")
	}
	m := joiner.Metrics(t)
	if m.Value(mergesTotal) != 2 || m.Value(differences) != 2 || m.Value(mergedBytes) == 0 || m.Value(epochGauge) != 2 || m.Value(peersGauge) != 3 {
		t.Errorf("the new pod's metrics: merges %v, differences %v, merged bytes %v, epoch %v, peers %v; want 2, 2, some, 2, 3",
			m.Value(mergesTotal), m.Value(differences), m.Value(mergedBytes), m.Value(epochGauge), m.Value(peersGauge))
	}
	if lines := joiner.LogLines("Caught up"); len(lines) != 1 || lines[0]["reached"] != 3.0 || lines[0]["merged"] != 2.0 {
		t.Errorf("the new pod's Caught up lines: %v", lines)
	}
	for _, p := range c.Pods()[:3] {
		if c.Proxy(joiner, p).Accepted() == 0 {
			t.Errorf("the new pod caught up without calling %s through the proxy", p.Name)
		}
		if got := p.Metric(t, peersGauge); got != 3 {
			t.Errorf("%s has %v peers, want 3", p.Name, got)
		}
	}
	if err := a.With(wire.ConsistencyAll).Set(t.Context(), "users", "after"); err != nil {
		t.Fatal(err)
	}
	if !joiner.HoldsAll(t, "users", "after") {
		t.Error("a write at consistency=all after the new pod joined did not reach it")
	}
}

// A dump that stops mid-transfer is given up after the replication timeout ("nothing received
// for 1s"), and the catch-up goes on with the peer's other filters and with the other peers.
func TestStalledDumpIsGivenUp(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	a, b := c.Pod(0), c.Pod(1)
	// A filter whose dump (about 1.2 MB) is far larger than what the stalling proxy lets through.
	create(t, a, "big", client.CreateOptions{ExpectedInsertions: new(uint64(1_000_000))})
	big := values("big", 1000)
	if err := a.With(wire.ConsistencyAll).MultiSet(t.Context(), "big", big); err != nil {
		t.Fatal(err)
	}
	// Small filters that only b holds: written while b is cut off from the others, and homed at b,
	// which alone creates them.
	c.Partition(b)
	var small []string
	for i := range 4 {
		name := c.NameHomedAt(fmt.Sprintf("only-b%d", i), b)
		small = append(small, name)
		if _, _, err := b.With(wire.ConsistencyOne).Create(t.Context(), name, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b.With(wire.ConsistencyOne).Set(t.Context(), name, "x"); err != nil {
			t.Fatal(err)
		}
	}
	c.Heal()

	joiner := c.Start("pod-3")
	c.Proxy(joiner, a).Set(cluster.Refuse())
	c.Proxy(joiner, b).Set(cluster.StallAfter(128 << 10))
	c.Push(append(c.Pods()[:3], joiner)...)
	c.WaitReady(joiner)

	if !joiner.HoldsAll(t, "big", big...) {
		t.Error("the new pod lacks the big filter, which the third pod could give it")
	}
	for _, name := range small {
		if !joiner.HoldsAll(t, name, "x") {
			t.Errorf("the new pod lacks %s, which only the stalling peer held", name)
		}
	}
	incomplete := map[string]string{}
	for _, l := range joiner.LogLines("Catch-up from a peer was incomplete; anti-entropy repairs the rest") {
		incomplete[fmt.Sprint(l["peer"])] = fmt.Sprint(l["error"])
	}
	if e := incomplete[b.Name]; !strings.Contains(e, `dump of "big" from pod-1: `) || !strings.Contains(e, "nothing received for 1s") {
		t.Errorf("the catch-up from the stalling peer reported %q", e)
	}
	if e := incomplete[a.Name]; refusals(e) == 0 {
		t.Errorf("the catch-up from the refusing peer reported %q", e)
	}
	if lines := joiner.LogLines("Caught up"); len(lines) != 1 || lines[0]["reached"] != 1.0 {
		t.Errorf("the new pod's Caught up lines: %v, want one that reached 1 peer", lines)
	}
	if got := joiner.Metric(t, mergesTotal); got != 5 {
		t.Errorf("the new pod merged %v dumps, want 5 (four from the stalling peer, the big one from the other)", got)
	}
}

// Anti-entropy runs while a pod is cut off (its passes fail and are counted) and repairs it once
// the partition heals.
func TestAntiEntropyRepairsAPartitionedPod(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.AntiEntropyInterval = 200 * time.Millisecond
	}})
	a, cut := c.Pod(0), c.Pod(2)
	create(t, a, "events", client.CreateOptions{})
	c.Partition(cut)
	missed := values("missed", 500)
	if err := a.Client.MultiSet(t.Context(), "events", missed); err != nil {
		t.Fatalf("a quorum write with one pod of three cut off: %v", err)
	}
	if _, created, err := a.Client.Create(t.Context(), "new", client.CreateOptions{}); err != nil || !created {
		t.Fatalf("a quorum create with one pod of three cut off: %v, %v", created, err)
	}
	before := cut.Metrics(t)
	await.True(t, cluster.WaitTimeout, "anti-entropy passes on the cut-off pod", func() bool {
		return cut.Metric(t, passesTotal) >= before.Value(passesTotal)+3
	})
	if cut.HoldsAll(t, "events", missed[:1]...) {
		t.Fatal("the cut-off pod holds a write it cannot have received")
	}
	if len(cut.LogLines("Anti-entropy pass was incomplete")) == 0 {
		t.Error("the cut-off pod's failed passes were not logged")
	}
	if got := cut.Metric(t, mergesTotal); got != before.Value(mergesTotal) {
		t.Errorf("the cut-off pod merged %v dumps while partitioned", got-before.Value(mergesTotal))
	}

	c.Heal()
	await.True(t, cluster.WaitTimeout, "the pod to be repaired", func() bool { return cut.HoldsAll(t, "events", missed...) })
	await.True(t, cluster.WaitTimeout, "the filter created meanwhile to reach the pod", func() bool {
		_, err := cut.Client.Get(t.Context(), "new")
		return err == nil
	})
	m := cut.Metrics(t)
	if m.Value(differences) <= before.Value(differences) || m.Value(mergesTotal) <= before.Value(mergesTotal) || m.Value(mergedBytes) <= before.Value(mergedBytes) {
		t.Errorf("repaired, but the metrics do not show it: differences %v→%v, merges %v→%v, bytes %v→%v",
			before.Value(differences), m.Value(differences), before.Value(mergesTotal), m.Value(mergesTotal), before.Value(mergedBytes), m.Value(mergedBytes))
	}
	if len(cut.LogLines("Anti-entropy repaired differences")) == 0 {
		t.Error("the repair was not logged")
	}
}
