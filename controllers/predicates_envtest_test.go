package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// passCounter is the real data plane, counting the status reads of each filter: one per pod
// and pass, so that a test counts a filter's passes. The pods' polls fail on it, so that every
// pass reads the pods and no poll requeues a filter.
type passCounter struct {
	DataPlane
	mu    sync.Mutex
	reads map[string]int
}

func newPassCounter() *passCounter {
	return &passCounter{DataPlane: NewHTTPDataPlane(2 * time.Second), reads: map[string]int{}}
}

func (d *passCounter) FilterStatus(ctx context.Context, pod Pod, name string) (wire.FilterStatus, error) {
	d.mu.Lock()
	d.reads[name]++
	d.mu.Unlock()
	return d.DataPlane.FilterStatus(ctx, pod, name)
}

func (d *passCounter) FilterStatuses(context.Context, Pod, string, time.Duration) (wire.FilterStatuses, error) {
	return wire.FilterStatuses{}, errors.New("no polls: every pass reads the pods")
}

func (d *passCounter) passes(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads[name]
}

// startCountedFilterReconciler runs the BloomFilter reconciler on dp with resync. It returns the
// manager's cache and the count of its writes.
func startCountedFilterReconciler(t *testing.T, ns string, dp DataPlane, resync time.Duration) (crclient.Reader, *writeCounter) {
	t.Helper()
	var cache crclient.Reader
	writes := startManager(t, ns, func(mgr ctrl.Manager) error {
		cache = mgr.GetCache()
		return (&BloomFilterReconciler{
			Client: mgr.GetClient(), DataPlane: dp, Recorder: mgr.GetEventRecorder("bloomfilter"),
			Resync: resync, MaxConcurrentReconciles: 4,
		}).SetupWithManager(mgr)
	})
	return cache, writes
}

// startQuietFilterReconciler runs the BloomFilter reconciler with a resync longer than any test,
// so that every pass it makes is one an event brought.
func startQuietFilterReconciler(t *testing.T, ns string, dp DataPlane) crclient.Reader {
	t.Helper()
	cache, _ := startCountedFilterReconciler(t, ns, dp, time.Hour)
	return cache
}

// scaleBarrier asks the cluster for a second pod and waits for filter f to report it: an event
// that must bring exactly one pass of f, and whose pass shows. The tests below count the passes
// once it has come, after the events that must bring none; with no second pod to answer, the
// pass's status write is then the last change.
func scaleBarrier(t *testing.T, ns, cluster string) {
	t.Helper()
	var c bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: cluster}, &c); err != nil {
		t.Fatal(err)
	}
	patch := crclient.MergeFrom(c.DeepCopy())
	c.Spec.Replicas = new(int32(2))
	if err := k8s.Patch(t.Context(), &c, patch); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionFalse, "on 1 of 2 pods")
}

func wantPasses(t *testing.T, dp *passCounter, name string, want int) {
	t.Helper()
	if got := dp.passes(name); got != want {
		t.Fatalf("%d passes of %s, want %d: an event that changes nothing brought a pass", got, name, want)
	}
}

// A filter's first pass creates it, adds the finalizer and writes its status: those writes are the
// operator's own, and bring no second pass.
func TestOwnWritesBringNoPass(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	addPod(t, ns, "c", "c-0")
	dp := newPassCounter()
	startQuietFilterReconciler(t, ns, dp)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 1 pods")
	scaleBarrier(t, ns, "c")
	wantPasses(t, dp, "f", 2)
}

// A change of the cluster's status that no filter reads (its count of filters, its conditions)
// requeues none of them; a new spec.replicas requeues each once.
func TestClusterStatusRequeuesOnlyWhatItAffects(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	addPod(t, ns, "c", "c-0")
	dp := newPassCounter()
	cache := startQuietFilterReconciler(t, ns, dp)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 1 pods")

	version := patchClusterStatus(t, ns, "c", func(s *bloomeryv1alpha1.BloomClusterStatus) {
		s.Filters = 1
		s.ReadyReplicas = 1
		s.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonAllReplicasReady,
			Message: "1 of 1 replicas are ready", LastTransitionTime: metav1.Now()}}
	})
	// Once the reconciler's cache holds the patch, its event has reached the handlers: a pass it
	// brought would be under way before the barrier, an event of the same informer, comes in
	// (rather than merged with it in the queue).
	await.Until(t, 20*time.Second, "the cache to see the status", func() (bool, string) {
		var c bloomeryv1alpha1.BloomCluster
		err := cache.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "c"}, &c)
		return err == nil && c.ResourceVersion == version, fmt.Sprint(c.ResourceVersion, err)
	})
	scaleBarrier(t, ns, "c")
	wantPasses(t, dp, "f", 2)
}

// patchClusterStatus changes the cluster's status as its reconciler would, and returns the
// resourceVersion it made.
func patchClusterStatus(t *testing.T, ns, name string, change func(*bloomeryv1alpha1.BloomClusterStatus)) string {
	t.Helper()
	var c bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	patch := crclient.MergeFrom(c.DeepCopy())
	change(&c.Status)
	if err := k8s.Status().Patch(t.Context(), &c, patch); err != nil {
		t.Fatal(err)
	}
	return c.ResourceVersion
}
