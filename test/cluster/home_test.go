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

// Check-and-sets and creates go to the filter's home, and only there: while the home does not
// serve them, the pod that received them answers 503 code 13 and no pod applies them, until a
// membership that no longer names the home moves it. A pod that stood in on its own could not
// know which values the home had already answered false for.
func TestTheMembershipAloneMovesTheHome(t *testing.T) {
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
	c.Proxy(last, next).Set(cluster.Drop()) // the next pod in the order is not asked either way
	before = counters(t, writesTotal, order...)
	for _, level := range []wire.Consistency{wire.ConsistencyOne, wire.ConsistencyAll} {
		_, err := last.With(level).CheckAndSet(t.Context(), name, "v2")
		cluster.WantError(t, err, 503, wire.CodeHomeUnavailable)
	}
	_, _, err := last.Client.Create(t.Context(), c.NameHomedAt("orders", home), client.CreateOptions{})
	cluster.WantError(t, err, 503, wire.CodeHomeUnavailable)
	wantServedBy(t, "home refusing", nil, before)
	if got := last.Metric(t, unavailableTotal); got != 3 {
		t.Errorf("%s counted %v requests its homes did not serve, want 3", last.Name, got)
	}
	if lines := last.LogLines("Filter's home pod did not serve a request; answered 503 code 13"); len(lines) == 0 || lines[0]["home"] != home.Name {
		t.Errorf("%s's warnings of homes unavailable: %v, want one naming %s", last.Name, lines, home.Name)
	}

	// The operator moves the home: a membership without it, which the old home is not told.
	c.Proxy(last, next).Set(cluster.Pass())
	c.Push(next, last)
	if got := c.HomeOrder(name)[0]; got != next {
		t.Fatalf("the home after %s left is %s, want %s, the next in the order", home.Name, got.Name, next.Name)
	}
	c.AwaitHomes(next)
	before = counters(t, writesTotal, next, last)
	casThrough(last.Client, "v2", false)
	wantServedBy(t, "home moved", next, before)
	casThrough(last.Client, "v2", true)
	// The new home merged from a quorum before it served: it holds what the old home answered
	// false for.
	casThrough(last.Client, "v1", true)

	// The old home, told nothing, still serves its own clients' check-and-sets as the home; the
	// pods that took the new epoch refuse its writes, so it answers no false.
	_, err = home.Client.CheckAndSet(t.Context(), name, "v3")
	if msg := cluster.WantError(t, err, 503, wire.CodeHomeUnavailable); !strings.Contains(msg, "a newer membership moved the home") {
		t.Errorf("a check-and-set through the old home: %q, want it fenced", msg)
	}
	casThrough(last.Client, "v3", false)
}

// A pod that has been told its membership and is still catching up refuses, as a filter's home,
// forwarded creates and check-and-sets, and the pods that forwarded them answer 503 code 13
// rather than serving them elsewhere; once caught up it serves them.
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
	from := order[3]
	before := counters(t, writesTotal, order...)
	_, _, err := from.Client.Create(t.Context(), name, client.CreateOptions{})
	cluster.WantError(t, err, 503, wire.CodeHomeUnavailable)
	_, err = from.Client.CheckAndSet(t.Context(), name, "v1")
	cluster.WantError(t, err, 503, wire.CodeHomeUnavailable)
	wantServedBy(t, "requests while the home catches up", nil, before)
	if got := from.Metric(t, unavailableTotal); got != 2 {
		t.Errorf("%s counted %v requests the catching-up home did not serve, want 2", from.Name, got)
	}
	asPeer := client.New(joiner.InternalURL, client.Internal(cluster.Token), client.Forwarded())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a home that served would wait a minute for its stalled peers
	defer cancel()
	_, err = asPeer.CheckAndSet(ctx, name, "v2")
	if msg := cluster.WantError(t, err, 503, wire.CodeUnavailable); !strings.HasPrefix(msg, "catching up from the peers") {
		t.Errorf("a forwarded check-and-set on a home catching up: %q", msg)
	}

	c.SetFault(cluster.Pass(), joiner) // cuts the stalled call: the catch-up goes on
	c.WaitReady(joiner)
	c.AwaitReachable(joiner) // the cut calls held its peers down
	c.AwaitHomes(joiner)     // it stands in for every value it is the home of: it joined
	create(t, from, name, client.CreateOptions{})
	before = counters(t, writesTotal, order...)
	if present, err := from.Client.CheckAndSet(t.Context(), name, "v1"); err != nil || present {
		t.Errorf("check-and-set once the home caught up = %v, %v; want false", present, err)
	}
	wantServedBy(t, "a check-and-set once the home caught up", joiner, before)
}

// A check-and-set whose home does not answer within the request's timeout is answered in time, 503
// with code 13 (the home did not serve it; the write may have been applied), never with a closed
// connection: the forward to the home ends with the request's deadline, however long the
// replication timeout.
func TestACheckAndSetIsAnsweredWithinTheRequestTimeout(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.RequestTimeout, cfg.ReplicationTimeout = 2*time.Second, time.Minute
	}})
	home, through := c.Pod(0), c.Pod(1)
	name := c.NameHomedAt("coupons", home)
	create(t, home, name, client.CreateOptions{})
	c.SetFault(cluster.Stall(), through, home)
	_, err := through.Client.CheckAndSet(t.Context(), name, "v")
	cluster.WantError(t, err, 503, wire.CodeHomeUnavailable)
}
