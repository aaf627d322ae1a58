package controllers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// callCounter is the real data plane, counting the calls about one filter (status reads, creates,
// deletes) and the polls of a pod's filters.
type callCounter struct {
	DataPlane
	perFilter, polls atomic.Int64
}

func (d *callCounter) FilterStatus(ctx context.Context, pod Pod, name string) (wire.FilterStatus, error) {
	d.perFilter.Add(1)
	return d.DataPlane.FilterStatus(ctx, pod, name)
}

func (d *callCounter) CreateFilter(ctx context.Context, pod Pod, name string, owner types.UID, shape FilterShape) (wire.FilterStatus, bool, error) {
	d.perFilter.Add(1)
	return d.DataPlane.CreateFilter(ctx, pod, name, owner, shape)
}

func (d *callCounter) FilterStatuses(ctx context.Context, pod Pod, version string, wait time.Duration) (wire.FilterStatuses, error) {
	d.polls.Add(1)
	return d.DataPlane.FilterStatuses(ctx, pod, version, wait)
}

// startWatchedFilterReconciler runs the BloomFilter reconciler on dp with resync.
func startWatchedFilterReconciler(t *testing.T, ns string, dp DataPlane, resync time.Duration) {
	t.Helper()
	startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomFilterReconciler{
			Client: mgr.GetClient(), DataPlane: dp, Recorder: mgr.GetEventRecorder("bloomfilter"),
			Resync: resync, MaxConcurrentReconciles: 4,
		}).SetupWithManager(mgr)
	})
}

// A filter deleted on a pod behind the operator's back is back on it and reported recreated, with
// no periodic pass and no event of the pod: its poll told.
func TestPodChangeReachesStatusWithoutAPass(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	pod := addPod(t, ns, "c", "c-0")
	startWatchedFilterReconciler(t, ns, NewHTTPDataPlane(2*time.Second), time.Hour)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 1 pods")
	if bf := getBloomFilter(t, ns, "f"); bf.Status.LastRecreationTime != nil {
		t.Fatalf("recreated before the test deleted it: %v", bf.Status.LastRecreationTime)
	}

	if err := pod.internal.Delete(t.Context(), "f"); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "the filter recreated on the pod and reported", func() (bool, string) {
		bf := getBloomFilter(t, ns, "f")
		_, err := pod.internal.FilterStatus(t.Context(), "f")
		return bf.Status.LastRecreationTime != nil && err == nil, fmt.Sprintf("lastRecreationTime %v, the pod: %v", bf.Status.LastRecreationTime, err)
	})
}

// Passes every half second of 20 filters on 2 pods stop calling the pods once their polls
// answer: the calls that remain are one poll per pod, whatever the number of filters.
func TestPassesReadThePodsPolls(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 2)
	addPod(t, ns, "c", "c-0")
	addPod(t, ns, "c", "c-1")
	dp := &callCounter{DataPlane: NewHTTPDataPlane(2 * time.Second)}
	startWatchedFilterReconciler(t, ns, dp, 500*time.Millisecond)
	const filters = 20
	for i := range filters {
		createBloomFilter(t, ns, "f"+string(rune('a'+i)), "c")
	}
	for i := range filters {
		waitCondition(t, ns, "f"+string(rune('a'+i)), ConditionReady, metav1.ConditionTrue, "all 2 pods")
	}
	// Without the polls, each second brings 2 passes of each filter, each reading both pods: 80
	// calls.
	await.Until(t, 20*time.Second, "a second in which the passes call no pod", func() (bool, string) {
		before := dp.perFilter.Load()
		time.Sleep(time.Second)
		calls := dp.perFilter.Load() - before
		return calls == 0, fmt.Sprintf("%d calls about one filter in the last second", calls)
	})
	calls, polls := dp.perFilter.Load(), dp.polls.Load()
	time.Sleep(3 * time.Second)
	if n := dp.perFilter.Load() - calls; n != 0 {
		t.Errorf("%d calls about one filter in 3 quiet seconds, want none", n)
	}
	// A quiet pod holds its poll for 30 s (half the counts' refresh): at most the one under way ends in these seconds.
	if n := dp.polls.Load() - polls; n > 2 {
		t.Errorf("%d polls of 2 quiet pods in 3 s, want at most one each", n)
	}
}
