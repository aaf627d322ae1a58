package faults

import (
	"cmp"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/test/history"
)

// filterName is the filter every scenario writes to.
const filterName = "dedup"

// scenario is a fault and its healing, injected while the workload runs.
type scenario struct {
	name   string
	subnet int // of its network: scenarios run at once, each on its own
	// pods is the cluster's size (3 when 0); factor, when set, places each partition on that
	// many of them.
	pods, factor int
	// partitions is the filter's (1 when 0).
	partitions int
	// inject starts the fault on the cluster, whose filter's home is home; heal ends it.
	inject, heal func(c *cluster, home *pod)
}

// run starts the cluster, runs the workload for a while before, during and after the fault, and
// checks the history.
func (s scenario) run(t *testing.T) {
	t.Helper()
	pods := cmp.Or(s.pods, 3)
	c := newCluster(t, s.subnet, pods, s.factor, s.partitions, filterName)
	home := c.home(filterName)
	w := &history.Workload{Filter: filterName, Pods: c.targets()}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, 6) }()
	phase := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-t.Context().Done():
		}
	}
	phase(5 * time.Second)
	injected := time.Now()
	s.inject(c, home)
	phase(15 * time.Second)
	healed := time.Now()
	s.heal(c, home)
	phase(10 * time.Second)
	cancel()
	<-done
	// Every pod, the healed ones and any the fault added, must now see what was acknowledged,
	// however long ago: the workload checks a value only right after its write.
	w.Pods = c.targets()
	w.Recheck(t.Context(), 200)

	ops := w.History.All()
	counts := history.Counts(ops)
	t.Logf("%s, home %s: %v", s.name, home.name, counts)
	t.Logf("check-and-sets before the fault %s", history.Latencies(ops, time.Time{}, injected))
	t.Logf("check-and-sets during the fault %s", history.Latencies(ops, injected, healed))
	if history.Served(ops, history.CheckAndSet) == 0 || history.Served(ops, history.Check) == 0 {
		t.Errorf("the workload was not served: %v", counts)
	}
	for _, v := range history.Violations(ops, cmp.Or(s.factor, pods)) {
		t.Error(v)
	}
	if t.Failed() {
		for _, p := range c.pods {
			t.Logf("pod %s's log (tail):\n%s", p.name, tail(p.logs(), 40))
		}
	}
}

func others(c *cluster, p *pod) []int {
	var out []int
	for _, o := range c.pods {
		if o != p {
			out = append(out, o.i)
		}
	}
	return out
}

// The filter's home cut off from its peers for 15 s, its clients still reaching it.
func TestHomeIsolated(t *testing.T) {
	t.Parallel()
	scenario{name: "home isolated", subnet: 1,
		inject: func(c *cluster, home *pod) { c.net.isolate(home.i, others(c, home)) },
		heal:   func(c *cluster, home *pod) { c.net.heal(home.i) },
	}.run(t)
}

// The filter's home paused with SIGSTOP for 15 s: requests wait in its sockets meanwhile.
func TestHomePaused(t *testing.T) {
	t.Parallel()
	scenario{name: "home paused", subnet: 2,
		inject: func(_ *cluster, home *pod) { home.signal(syscall.SIGSTOP) },
		heal:   func(_ *cluster, home *pod) { home.signal(syscall.SIGCONT) },
	}.run(t)
}

// A pod that is not the home cut off from its peers.
func TestOtherPodIsolated(t *testing.T) {
	t.Parallel()
	scenario{name: "another pod isolated", subnet: 3,
		inject: func(c *cluster, home *pod) {
			for _, p := range c.pods {
				if p != home {
					c.net.isolate(p.i, others(c, p))
					return
				}
			}
		},
		heal: func(c *cluster, _ *pod) {
			for _, p := range c.pods {
				c.net.heal(p.i)
			}
		},
	}.run(t)
}

// A placed cluster, each partition on 2 of 4 pods, with the filter's home, one of its partition's
// two owners, cut off from the other pods.
func TestPlacedOwnerIsolated(t *testing.T) {
	t.Parallel()
	scenario{name: "placed (2 of 4), the home owner isolated", subnet: 5, pods: 4, factor: 2,
		inject: func(c *cluster, home *pod) { c.net.isolate(home.i, others(c, home)) },
		heal:   func(c *cluster, home *pod) { c.net.heal(home.i) },
	}.run(t)
}

// The filter's home killed with SIGKILL and started again four times while clients write.
func TestHomeKilledAndRestarted(t *testing.T) {
	t.Parallel()
	scenario{name: "home killed and restarted four times", subnet: 4,
		inject: func(c *cluster, home *pod) {
			for range 4 {
				c.restart(home)
				time.Sleep(2 * time.Second)
			}
		},
		heal: func(*cluster, *pod) {},
	}.run(t)
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
