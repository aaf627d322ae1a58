package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/cluster"
)

// counters reads one counter of several pods.
func counters(t *testing.T, name string, pods ...*cluster.Pod) map[*cluster.Pod]float64 {
	t.Helper()
	out := map[*cluster.Pod]float64{}
	for _, p := range pods {
		out[p] = p.Metric(t, name)
	}
	return out
}

// wantServedBy asserts that of pods, exactly server replicated one more write since before: the
// pod that served a check-and-set replicates it, the others do not.
func wantServedBy(t *testing.T, what string, server *cluster.Pod, before map[*cluster.Pod]float64) {
	t.Helper()
	for p, was := range before {
		want := was
		if p == server {
			want++
		}
		if got := p.Metric(t, writesTotal); got != want {
			t.Errorf("%s: %s replicated %v writes, want %v (it should be served by %s)", what, p.Name, got-was, want-was, server.Name)
		}
	}
}

// Check-and-sets go to the filter's home, and to the next pod in the filter's order while the
// ones before it cannot be reached; the pod that received the request serves it last.
func TestFailoverFollowsTheHomeOrder(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	name := c.NameHomedAt("coupons", c.Pod(0))
	order := c.HomeOrder(name)
	home, next, last := order[0], order[1], order[2]
	create(t, last, name, client.CreateOptions{})

	casThrough := func(cl *client.Client, value string, want bool) {
		t.Helper()
		if got, err := cl.CheckAndSet(t.Context(), name, value); err != nil || got != want {
			t.Fatalf("check-and-set of %q through %s = %v, %v; want %v", value, last.Name, got, err, want)
		}
	}
	before, forwarded := counters(t, writesTotal, order...), last.Metric(t, forwardedTotal)
	casThrough(last.Client, "v1", false)
	wantServedBy(t, "all reachable", home, before)
	if got := last.Metric(t, forwardedTotal) - forwarded; got != 1 {
		t.Errorf("%s forwarded %v requests for one check-and-set, want 1", last.Name, got)
	}

	c.Proxy(last, home).Set(cluster.Refuse())
	before = counters(t, writesTotal, order...)
	casThrough(last.Client, "v2", false)
	wantServedBy(t, "home refusing", next, before)
	casThrough(last.Client, "v2", true)
	m := last.Metrics(t)
	if got := m.Value(failoversTotal); got != 2 {
		t.Errorf("%s counted %v failovers, want 2", last.Name, got)
	}
	if got := m.Value(forwardedTotal) - forwarded; got != 5 {
		t.Errorf("%s forwarded %v requests, want 5 (one, then two attempts twice)", last.Name, got)
	}
	if lines := last.LogLines("Filter's home pod did not serve a forwarded request; trying the next"); len(lines) == 0 || lines[0]["home"] != home.Name {
		t.Errorf("%s's warnings of failovers: %v, want one naming %s", last.Name, lines, home.Name)
	}

	// Neither reachable: the pod serves the request itself. It applies the value, but answers no
	// false until a quorum holds it, whatever the level: alone, it answers 503 code 9.
	c.Proxy(last, next).Set(cluster.Drop())
	before = counters(t, writesTotal, order...)
	_, err := last.With(wire.ConsistencyOne).CheckAndSet(t.Context(), name, "v3")
	cluster.WantError(t, err, 503, wire.CodeReplication)
	wantServedBy(t, "home and next unreachable", last, before)
	if got := last.Metric(t, failoversTotal); got != 4 {
		t.Errorf("%s counted %v failovers, want 4", last.Name, got)
	}

	c.Heal()
	before = counters(t, writesTotal, order...)
	casThrough(last.Client, "v4", false)
	wantServedBy(t, "healed", home, before)
}

// A pod that has been told its membership and is still catching up refuses, as a filter's home,
// forwarded creates and check-and-sets (503 code 7), so the next pod in the order serves them;
// once caught up it serves them itself.
func TestHomeCatchingUpDoesNotServe(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(pod string, cfg *config.Config) {
		if pod == "pod-3" {
			// Its catch-up waits on a stalled peer as long as the test wants.
			cfg.ReplicationTimeout = time.Minute
		}
	}})
	joiner := c.Start("pod-3")
	c.SetFault(cluster.Stall(), joiner)
	c.Push(append(c.Pods()[:3], joiner)...)
	if ready, msg := joiner.Ready(t); ready || msg != "not ready: catching up from the peers" {
		t.Fatalf("the new pod's readiness: %v %q, want catching up", ready, msg)
	}

	name := c.NameHomedAt("coupons", joiner)
	order := c.HomeOrder(name)
	next, from := order[1], order[3]
	failovers := from.Metric(t, failoversTotal)
	before := counters(t, writesTotal, order...)
	create(t, from, name, client.CreateOptions{})
	wantServedBy(t, "a create while the home catches up", next, before)

	before = counters(t, writesTotal, order...)
	if present, err := from.Client.CheckAndSet(t.Context(), name, "v1"); err != nil || present {
		t.Fatalf("check-and-set through %s while the home catches up = %v, %v; want false", from.Name, present, err)
	}
	wantServedBy(t, "a check-and-set while the home catches up", next, before)
	if got := from.Metric(t, failoversTotal) - failovers; got != 2 {
		t.Errorf("%s counted %v failovers from the catching-up home, want 2", from.Name, got)
	}
	asPeer := client.New(joiner.InternalURL, client.Internal(cluster.Token), client.Forwarded())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a home that served would wait a minute for its stalled peers
	defer cancel()
	_, err := asPeer.CheckAndSet(ctx, name, "v2")
	if msg := cluster.WantError(t, err, 503, wire.CodeUnavailable); !strings.HasPrefix(msg, "catching up from the peers") {
		t.Errorf("a forwarded check-and-set on a home catching up: %q", msg)
	}

	c.SetFault(cluster.Pass(), joiner) // cuts the stalled call: the catch-up goes on
	c.WaitReady(joiner)
	before = counters(t, writesTotal, order...)
	if present, err := from.Client.CheckAndSet(t.Context(), name, "v1"); err != nil || !present {
		t.Errorf("check-and-set of a value set while the home caught up = %v, %v; want true", present, err)
	}
	wantServedBy(t, "a check-and-set once the home caught up", joiner, before)
	if got := from.Metric(t, failoversTotal) - failovers; got != 2 {
		t.Errorf("%s counted %v failovers in all, want still 2", from.Name, got)
	}
}

// A check-and-set whose home does not answer within the request's timeout is answered in time, 503
// with code 9 (the write may have been applied), never with a closed connection: the forward to
// the home ends with the request's deadline, however long the replication timeout.
func TestACheckAndSetIsAnsweredWithinTheRequestTimeout(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.RequestTimeout, cfg.ReplicationTimeout = 2*time.Second, time.Minute
	}})
	home, through := c.Pod(0), c.Pod(1)
	name := c.NameHomedAt("coupons", home)
	create(t, home, name, client.CreateOptions{})
	c.SetFault(cluster.Stall(), through, home)
	_, err := through.Client.CheckAndSet(t.Context(), name, "v")
	cluster.WantError(t, err, 503, wire.CodeReplication)
}
