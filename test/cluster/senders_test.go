package cluster_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/cluster"
)

// queueLength is how many writes a sender holds for one peer (replication.queueLength).
const queueLength = 16384

// A peer that does not answer holds its sender's batch; the writes behind it queue up to a bound,
// and past it they are not queued: counted as dropped, and a write that needs that peer fails at
// once.
func TestSenderQueueOverflowDropsWrites(t *testing.T) {
	c := cluster.New(t, cluster.Options{Pods: 2, Configure: func(_ string, cfg *config.Config) {
		cfg.ReplicationTimeout = time.Minute // the stalled batch is held for the whole test
	}})
	a, b := c.Pod(0), c.Pod(1)
	create(t, a, "events", client.CreateOptions{})
	c.Proxy(a, b).Set(cluster.Stall())

	var stop atomic.Bool
	var wg sync.WaitGroup
	halt := func() { stop.Store(true); wg.Wait() }
	defer halt()
	one := a.With(wire.ConsistencyOne)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if err := one.Set(t.Context(), "events", fmt.Sprintf("w%d-%d", w, i)); err != nil {
					t.Errorf("a write at consistency=one: %v", err)
					return
				}
			}
		})
	}
	// Under the race detector, on a busy machine, eight writers fill the queue in up to a minute.
	await.True(t, 3*cluster.WaitTimeout, "writes to be dropped", func() bool { return a.Metric(t, droppedTotal) > 0 })
	halt()

	m := a.Metrics(t)
	if queued := m.Value(queuedWrites, "peer", b.Name); queued != queueLength {
		t.Errorf("%v writes queued for the stalled peer, want the bound, %d", queued, queueLength)
	}
	dropped, failures := m.Value(droppedTotal), m.Value(failuresTotal)
	err := a.Client.Set(t.Context(), "events", "needs-b")
	msg := cluster.WantError(t, err, 503, wire.CodeReplication)
	if want := fmt.Sprintf("(%s: %d writes already queued for it)", b.Name, queueLength); !strings.HasSuffix(msg, want) {
		t.Errorf("a quorum write with the peer's queue full: %q, want it to end %q", msg, want)
	}
	m = a.Metrics(t)
	if got := m.Value(droppedTotal) - dropped; got != 1 {
		t.Errorf("the quorum write counted %v dropped writes, want 1", got)
	}
	if got := m.Value(failuresTotal) - failures; got != 1 {
		t.Errorf("the quorum write counted %v failures, want 1", got)
	}
	if !a.HoldsAll(t, "events", "needs-b") {
		t.Error("the write that could not be queued for the peer is not applied here")
	}
}

// Writes queued for a pod that leaves the membership fail their wait for it; the writes after the
// change no longer wait for it.
func TestWritesQueuedForADepartedPodFail(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.ReplicationTimeout = time.Minute
		cfg.RequestTimeout = time.Minute // the writes wait until the push below, however slow the machine
	}})
	a, b, gone := c.Pod(0), c.Pod(1), c.Pod(2)
	create(t, a, "events", client.CreateOptions{})
	c.Proxy(a, gone).Set(cluster.Stall())

	all := a.With(wire.ConsistencyAll)
	errs := make(chan error, 2)
	writes := a.Metric(t, writesTotal)
	go func() { errs <- all.Set(t.Context(), "events", "in-flight") }()
	await.True(t, cluster.WaitTimeout, "the first write to be in flight to "+gone.Name, func() bool {
		m := a.Metrics(t)
		return m.Value(writesTotal) == writes+1 && m.Value(queuedWrites, "peer", gone.Name) == 0
	})
	go func() { errs <- all.Set(t.Context(), "events", "queued") }()
	await.True(t, cluster.WaitTimeout, "the second write to be queued for "+gone.Name, func() bool {
		return a.Metric(t, queuedWrites, "peer", gone.Name) == 1
	})

	c.Push(a, b)
	// Passing again cuts the stalled batch's connection, which fails the write in flight; the
	// departed pod is reachable, and still the write queued for it is not sent to it.
	c.Proxy(a, gone).Set(cluster.Pass())
	for range 2 {
		msg := cluster.WantError(t, <-errs, 503, wire.CodeReplication)
		if !strings.Contains(msg, `consistency "all" needs 3 of 3 pods and 2 acknowledged (pod-2: `) {
			t.Errorf("a write waiting for the departed pod: %q", msg)
		}
	}
	if !a.HoldsAll(t, "events", "in-flight", "queued") || !b.HoldsAll(t, "events", "in-flight", "queued") {
		t.Error("the writes that failed their wait for the departed pod are not on the pods that remain")
	}

	if err := all.Set(t.Context(), "events", "after"); err != nil {
		t.Errorf("a write at consistency=all once the pod left: %v", err)
	}
	m := a.Metrics(t)
	if m.Value(epochGauge) != 2 || m.Value(peersGauge) != 1 || len(m.Samples(queuedWrites, "peer", gone.Name)) != 0 {
		t.Errorf("after the pod left: epoch %v, peers %v, queued for it %v", m.Value(epochGauge), m.Value(peersGauge), m.Samples(queuedWrites, "peer", gone.Name))
	}
}
