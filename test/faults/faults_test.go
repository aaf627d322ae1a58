package faults

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
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

// A placed cluster, each of 8 partitions on 2 of 4 pods, grows by a pod while the home of
// partition 0 is cut off from the other pods; the test, standing for the operator, still reaches
// it, so it stays a member and is told each epoch: the move then waits for it to hold the epoch
// and completes once it is healed, with an epoch that reaches the pods one at a time.
func TestMoveUnderPartition(t *testing.T) {
	t.Parallel()
	moveUnderPartition{name: "placed (2 of 4, 8 partitions), a pod added while the home owner is cut off", subnet: 6}.run(t)
}

// moveUnderPartition is a scenario of a placed cluster, each of 8 partitions on 2 of 4 pods,
// that grows by a pod while the home of partition 0 is cut off from the others: the test pushes
// the memberships the operator would, every partition placed over the five pods at R = 2. A
// cut-off pod that still answers the operator is a member: the move names the placement it
// comes from until every member holds what it owns, which the pods count only once every member
// holds the epoch, after the healing; then a last epoch drops the placement moved from. Values
// are set at all and checked at one ("probes", a history of their own, checked as the
// workload's is) through the cut-off pod once the move's epochs are pushed, and through the pods
// that do not yet hold the epoch that ends it.
type moveUnderPartition struct {
	name   string
	subnet int
}

func (m moveUnderPartition) run(t *testing.T) {
	t.Helper()
	const partitions = 8
	var cut *pod
	var probes history.History
	var probing sync.WaitGroup
	probed := 0
	// probe sets new values at all through one pod, and checks each at one through others
	// (waiting in the socket of a paused one), as goroutines that probing waits for.
	probe := func(c *cluster, through *pod, checkers ...*pod) {
		for range 40 {
			probed++
			value := fmt.Sprintf("probe-%d", probed)
			o := history.Do(c.t.Context(), filterName, history.Set, value, history.Pod{Name: through.name, API: through.api}, wire.ConsistencyAll)
			probes.Add(o)
			if o.Outcome != history.OK {
				continue // all counts the cut-off pod, an owner of the value's partition
			}
			for _, p := range checkers {
				probing.Go(func() {
					ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Minute)
					defer cancel()
					probes.Add(history.Do(ctx, filterName, history.Check, value, history.Pod{Name: p.name, API: p.api}, wire.ConsistencyOne))
				})
			}
		}
	}
	scenario{name: m.name, subnet: m.subnet, pods: 4, factor: 2, partitions: partitions,
		inject: func(c *cluster, home *pod) {
			before := wire.Placement{Owners: c.owners, ReplicationFactor: c.factor}
			owners := append(slices.Clone(c.owners), fmt.Sprintf("p%d", len(c.pods)))
			requireMoves(c.t, filterName, partitions, before, owners)
			cut = home
			c.t.Logf("%s is cut off", cut.name)
			c.net.isolate(cut.i, others(c, cut))
			added := c.addPod()
			c.net.isolate(cut.i, []int{added.i})
			c.tell(c.pods, owners, &before)
			probe(c, c.pods[slices.IndexFunc(c.pods, func(p *pod) bool { return p != cut })], cut)
		},
		heal: func(c *cluster, _ *pod) {
			c.net.heal(cut.i)
			// The move completes: the epoch without the placement moved from reaches the pods
			// one at a time, as it may from the operator, which pushes to all at once. Values
			// set at all through the first, p0, are checked at one through the others, which do
			// not yet hold the epoch and read each partition from its previous owners: p3 of
			// partition 3, which p0 keeps and p3 leaves (requireMoves logs the moves).
			c.awaitCaughtUp()
			c.epoch++
			c.members, c.previous = c.pods, nil
			c.tellOne(c.pods[0])
			probe(c, c.pods[0], c.pods[1:]...)
			for _, p := range c.pods[1:] {
				c.tellOne(p)
			}
			cut.waitReady(c.t)
			probing.Wait()
			ops := probes.All()
			c.t.Logf("probes: %v", history.Counts(ops))
			for _, v := range history.Violations(ops, c.factor) {
				c.t.Error(v)
			}
		},
	}.run(t)
}

// requireMoves fails the test unless the move of the filter's partitions from before to owners,
// at before's factor, moves some partition: otherwise the scenario would move nothing.
func requireMoves(t *testing.T, filter string, partitions int, before wire.Placement, owners []string) {
	t.Helper()
	from := placement.Owners(filter, partitions, before.Owners, before.ReplicationFactor)
	to := placement.Owners(filter, partitions, owners, before.ReplicationFactor)
	var moved []string
	for p := range partitions {
		if !slices.Equal(slices.Sorted(slices.Values(from[p])), slices.Sorted(slices.Values(to[p]))) {
			moved = append(moved, fmt.Sprintf("%d: %v → %v", p, from[p], to[p]))
		}
	}
	if len(moved) == 0 {
		t.Fatalf("the move from %v to %v moves no partition of %s", before.Owners, owners, filter)
	}
	t.Logf("partitions moved (home first): %s", strings.Join(moved, "; "))
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
