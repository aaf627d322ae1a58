package process

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// These tests run clusters whose membership places each partition on two pods (R = 2): a pod
// killed under writes, and pods added and drained under writes, lose no acknowledged value.

// place tells every pod in to a new epoch of the members in, with the placement and the one the
// cluster moves from (nil: none).
func (c *testCluster) place(in []*replica, p wire.Placement, previous *wire.Placement) {
	c.t.Helper()
	c.epoch++
	c.tellPlaced(wire.Membership{Epoch: c.epoch, Placement: p, Previous: previous}, in, in...)
}

// completeMove waits until every pod in says it pulled what the move of the current epoch gave
// it, as the operator does, then ends the move with the next epoch.
func (c *testCluster) completeMove(in []*replica, p wire.Placement) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, r := range in {
		for {
			st, err := r.dp.internal.PlacementStatus(c.t.Context())
			if err == nil && st.Epoch == c.epoch && st.CaughtUp {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s did not catch up with the move of epoch %d: %+v, %v", r.name, c.epoch, st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.place(in, p, nil)
	// Each pod releases the partitions it no longer owns once every member holds the epoch that
	// ends the move, which it learns by asking the others.
	await.Until(c.t, 60*time.Second, "every pod holds only what it owns once the move ends", func() (bool, string) {
		for _, r := range in {
			st, err := r.dp.internal.PlacementStatus(c.t.Context())
			if err != nil || st.PartitionsHeld != st.PartitionsOwned {
				return false, fmt.Sprintf("%s: %+v, %v", r.name, st, err)
			}
		}
		return true, ""
	})
}

func names(pods []*replica) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.name
	}
	return out
}

// writer writes new values through the pods given, until stopped, and keeps those acknowledged.
type writer struct {
	mu    sync.Mutex
	acked []string
	// sent[i] is when the request that wrote acked[i] was sent.
	sent    []time.Time
	failed  int
	stop    chan struct{}
	stopped sync.WaitGroup
}

func startWriter(through func() []*replica, filter string, level wire.Consistency) *writer {
	w := &writer{stop: make(chan struct{})}
	for n := range 4 {
		w.stopped.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				pods := through()
				p := pods[(n+i)%len(pods)]
				batch := valuesOf(fmt.Sprintf("w%d-%d", n, i), 20)
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := p.clientOf(client.WithConsistency(level)).MultiSet(ctx, filter, batch)
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked = append(w.acked, batch...)
					for range batch {
						w.sent = append(w.sent, sent)
					}
				} else {
					w.failed++
				}
				w.mu.Unlock()
			}
		})
	}
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// atLeast waits until n values more than when were acknowledged.
func (w *writer) atLeast(t *testing.T, n int, what string) {
	t.Helper()
	want := w.count() + n
	deadline := time.Now().Add(30 * time.Second)
	for w.count() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d values acknowledged, want %d", what, w.count(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *writer) finish() []string {
	close(w.stop)
	w.stopped.Wait()
	return w.acked
}

// sentAfter are the values acknowledged for requests sent after at; finish first.
func (w *writer) sentAfter(at time.Time) []string {
	var out []string
	for i, v := range w.acked {
		if w.sent[i].After(at) {
			out = append(out, v)
		}
	}
	return out
}

// everyPodFinds checks that every pod in finds every value, routing to the owners.
func everyPodFinds(t *testing.T, in []*replica, filter string, values []string, when string) {
	t.Helper()
	for _, p := range in {
		if lost := p.absent(t, filter, values); len(lost) > 0 {
			t.Fatalf("%s: through %s, %d of %d acknowledged values are missing, such as %q", when, p.name, len(lost), len(values), lost[0])
		}
	}
}

// everyPodFindsWithin is everyPodFinds that waits up to timeout for the values to arrive.
func everyPodFindsWithin(t *testing.T, in []*replica, filter string, values []string, timeout time.Duration, when string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, p := range in {
		for lost := p.absent(t, filter, values); len(lost) > 0; lost = p.absent(t, filter, values) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: through %s, %d of %d acknowledged values are missing, such as %q", when, p.name, len(lost), len(values), lost[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// ownsWithinBound checks that every pod holds what it owns, and owns no more than the bound.
func ownsWithinBound(t *testing.T, in []*replica, partitions int) {
	t.Helper()
	bound := placement.Bound(partitions, 2, len(in))
	for _, p := range in {
		st, err := p.dp.internal.PlacementStatus(t.Context())
		if err != nil || st.PartitionsOwned > bound || st.PartitionsHeld != st.PartitionsOwned || st.PartitionsOwned == 0 {
			t.Errorf("%s: %+v, %v; want between 1 and %d partitions owned, and only those held", p.name, st, err, bound)
		}
	}
}

// wholeBytes is what a filter createPartitioned makes takes: 200,000 values at 0.001, 8 partitions.
const wholeBytes = 395_520

func createPartitioned(t *testing.T, p *replica, name string, partitions int) {
	t.Helper()
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(200_000)), FPP: new(0.001), Partitions: new(partitions)}
	f, _, err := p.clientOf(client.WithConsistency(wire.ConsistencyAll)).Create(t.Context(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if f.SizeBytes < wholeBytes-8*64 || f.SizeBytes > wholeBytes+8*64 {
		t.Fatalf("the filter takes %d bytes; wholeBytes says %d", f.SizeBytes, wholeBytes)
	}
}

// A pod killed with SIGKILL while values are written (at consistency=one: with R = 2 a quorum
// is both owners, which a write to the dead pod's partitions cannot reach) loses none of them.
// The filter is larger than any one pod may hold (maxTotalBytes).
// While it is down, the other owner of each of its partitions answers for it, and holds every
// value written meanwhile; once it is back, every pod finds every acknowledged value, including
// those only the dead pod held when it died.
func TestPlacedPodKilledUnderWritesLosesNothing(t *testing.T) {
	c := startTestCluster(t, 4, 1, nil, fmt.Sprintf("maxTotalBytes: %d", wholeBytes*3/4))
	r2 := wire.Placement{ReplicationFactor: 2}
	c.place(c.pods, r2, nil)
	createPartitioned(t, c.pods[0], "events", 8)
	victim, survivors := c.pods[3], c.pods[:3]

	w := startWriter(func() []*replica { return survivors }, "events", wire.ConsistencyOne)
	w.atLeast(t, 2000, "before the kill")
	victim.dp.stop(t, syscall.SIGKILL)
	killed := time.Now() // the victim is gone: no request sent from now on reaches it
	w.atLeast(t, 2000, "while the pod is down")
	acked := w.finish()
	whileDown := w.sentAfter(killed)
	t.Logf("%d values acknowledged, %d of them while a pod was down; %d batches refused", len(acked), len(whileDown), w.failed)
	// At consistency=one a write is answered once its partition's home holds it, and reaches the
	// other owner a moment later.
	everyPodFindsWithin(t, survivors, "events", whileDown, 10*time.Second, "while a pod is down")

	c.launch(victim)
	c.place(c.pods, r2, nil) // the operator tells a restarted pod the membership, in a new epoch
	victim.dp.waitReady(t)
	// The other pods pull what only the victim held by anti-entropy.
	everyPodFindsWithin(t, c.pods, "events", acked, 20*time.Second, "after the restart")
	ownsWithinBound(t, c.pods, 8)
}

// Adding two pods to four and then draining two away, under writes, loses no acknowledged value;
// afterwards each pod holds what placement gives it and no more, and concurrent check-and-sets of
// a new value through every pod answer false once.
func TestPlacedScaleOutAndDrainUnderWrites(t *testing.T) {
	const partitions = 16
	c := newTestCluster(t, 4, 1)
	r2 := wire.Placement{ReplicationFactor: 2}
	c.place(c.pods, r2, nil)
	createPartitioned(t, c.pods[0], "events", partitions)

	var mu sync.Mutex
	serving := slices.Clone(c.pods) // the pods clients write through
	through := func() []*replica {
		mu.Lock()
		defer mu.Unlock()
		return serving
	}
	w := startWriter(through, "events", wire.ConsistencyQuorum)
	w.atLeast(t, 2000, "before the change")

	// Out: two new pods join; the move pulls their partitions, then ends.
	for _, name := range []string{"pod-4", "pod-5"} {
		p := c.newReplica(name)
		c.launch(p)
		c.pods = append(c.pods, p)
	}
	four := wire.Placement{Owners: names(c.pods[:4]), ReplicationFactor: 2}
	c.place(c.pods, r2, &four)
	for _, p := range c.pods[4:] {
		p.dp.waitReady(t)
	}
	mu.Lock()
	serving = slices.Clone(c.pods)
	mu.Unlock()
	w.atLeast(t, 2000, "during the move out")
	c.completeMove(c.pods, r2)
	w.atLeast(t, 2000, "after the move out")
	ownsWithinBound(t, c.pods, partitions)

	// In: pods 0 and 1 drain, then leave.
	staying := c.pods[2:]
	drained := wire.Placement{Owners: names(staying), ReplicationFactor: 2}
	six := wire.Placement{ReplicationFactor: 2}
	c.place(c.pods, drained, &six)
	mu.Lock()
	serving = slices.Clone(staying)
	mu.Unlock()
	w.atLeast(t, 2000, "during the drain")
	c.completeMove(c.pods, drained)
	for _, p := range c.pods[:2] {
		if st, err := p.dp.internal.PlacementStatus(t.Context()); err != nil || st.PartitionsHeld != 0 {
			t.Errorf("drained %s still holds partitions: %+v, %v", p.name, st, err)
		}
	}
	c.pods = staying
	c.place(c.pods, r2, nil) // the drained pods leave
	w.atLeast(t, 2000, "after the drain")
	acked := w.finish()
	t.Logf("%d values acknowledged, %d batches refused", len(acked), w.failed)
	everyPodFinds(t, c.pods, "events", acked, "after scaling out and in")
	ownsWithinBound(t, c.pods, partitions)
	checkAndSetOnceThroughEveryPod(t, c.pods, "events", valuesOf("once", 200))
}

// checkAndSetOnceThroughEveryPod sends check-and-sets of the same new values through every pod at
// once, with clients of opts: one pod (the filter's home, or each value's partition's) serves them
// all, so each answers false exactly once.
func checkAndSetOnceThroughEveryPod(t *testing.T, pods []*replica, filter string, values []string, opts ...client.Option) {
	t.Helper()
	falses := make([]int, len(values))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pods {
		cl := p.clientOf(opts...)
		wg.Go(func() {
			for i, v := range values {
				present, err := cl.CheckAndSet(t.Context(), filter, v)
				if err != nil {
					t.Errorf("check-and-set through %s: %v", p.name, err)
					return
				}
				if !present {
					mu.Lock()
					falses[i]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for i, n := range falses {
		if n != 1 {
			t.Fatalf("%s answered false %d times through %d pods, want once", values[i], n, len(pods))
		}
	}
}
