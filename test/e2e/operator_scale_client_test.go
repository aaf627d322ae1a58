//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// The operator's scale benchmark writes its BloomFilters through the API itself rather than with
// kubectl, which sends one request at a time under its own rate limit: 1,000 filters took 28 s to
// apply, and `kubectl wait` another 100 s to see them Ready after the operator had made them so.
// What is measured is the operator, not the benchmark's client.

// scaleLabel marks the benchmark's filters, apart from the samples' own.
const scaleLabel = "bloomery.io/bench=operator-scale"

// scaleWorkers is how many of the benchmark's requests are in flight at once, creates or deletes.
const scaleWorkers = 16

var bloomFilters = schema.GroupVersionResource{Group: "bloomery.io", Version: "v1alpha1", Resource: "bloomfilters"}

// scaleClient is the administrator's dynamic client, without a client-side rate limit (the API
// server's priority and fairness still applies).
func scaleClient(t *testing.T) dynamic.Interface {
	t.Helper()
	config := *h.cp.config
	config.QPS, config.Burst = -1, 0
	c, err := dynamic.NewForConfig(&config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// scaleName is the name of the benchmark's i-th BloomFilter.
func scaleName(i int) string { return fmt.Sprintf("%s%05d", scalePrefix, i) }

// scalePrefix begins the name of every filter of the benchmark.
const scalePrefix = "scale-"

// scaleFilter is the benchmark's i-th BloomFilter.
func scaleFilter(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bloomery.io/v1alpha1",
		"kind":       "BloomFilter",
		"metadata": map[string]any{
			"name":   scaleName(i),
			"labels": map[string]any{"bloomery.io/bench": "operator-scale"},
		},
		"spec": map[string]any{
			"clusterRef":        map[string]any{"name": "example"},
			"capacity":          int64(1000),
			"falsePositiveRate": "0.01",
		},
	}}
}

// inParallel runs do(i) for i in [0, n), scaleWorkers at a time, and fails the test with the
// first error.
func inParallel(t *testing.T, n int, do func(ctx context.Context, i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, scaleWorkers)
	for range scaleWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(t.Context(), kubectlTimeout)
				err := do(ctx, i)
				cancel()
				if err != nil {
					errs <- err
					next.Store(int64(n)) // the others stop too
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// filterWatch follows the benchmark's BloomFilters of one namespace through a watch (an
// informer): how many exist, and how many are Ready.
type filterWatch struct {
	mu    sync.Mutex
	ready map[string]bool
	// readyOnes is how many of ready are true, counted as they change: counting them at each of
	// tens of thousands of events took CPU from what the benchmark measures.
	readyOnes int
	changed   chan struct{} // one pending signal: something changed since the last look
}

func watchScaleFilters(t *testing.T, c dynamic.Interface, namespace string) *filterWatch {
	t.Helper()
	w := &filterWatch{ready: map[string]bool{}, changed: make(chan struct{}, 1)}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c, 0, namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = scaleLabel
	})
	informer := factory.ForResource(bloomFilters).Informer()
	set := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.mu.Lock()
		w.readyOnes -= boolCount(w.ready[u.GetName()])
		w.ready[u.GetName()] = isReady(u)
		w.readyOnes += boolCount(w.ready[u.GetName()])
		w.mu.Unlock()
		w.signal()
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				w.mu.Lock()
				w.readyOnes -= boolCount(w.ready[u.GetName()])
				delete(w.ready, u.GetName())
				w.mu.Unlock()
				w.signal()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(t.Context().Done(), informer.HasSynced) {
		t.Fatal("the BloomFilters' informer did not sync")
	}
	return w
}

func (w *filterWatch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// counts returns how many of the filters exist, and how many are Ready.
func (w *filterWatch) counts() (exist, ready int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready), w.readyOnes
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// await waits until cond holds of the counts, looking again at every change, and fails the test
// after timeout; it returns when cond held, which is when the watch saw it.
func (w *filterWatch) await(t *testing.T, timeout time.Duration, what string, cond func(exist, ready int) bool) time.Time {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		exist, ready := w.counts()
		if cond(exist, ready) {
			return time.Now()
		}
		select {
		case <-w.changed:
		case <-deadline.C:
			t.Fatalf("%s: not within %v; %d filters exist, %d Ready", what, timeout, exist, ready)
		}
	}
}

// isReady reports whether the object's Ready condition is True.
func isReady(u *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

// createScaleFilters creates the benchmark's filters 0..n-1.
func createScaleFilters(t *testing.T, c dynamic.Interface, namespace string, n int) {
	t.Helper()
	filters := c.Resource(bloomFilters).Namespace(namespace)
	inParallel(t, n, func(ctx context.Context, i int) error {
		_, err := filters.Create(ctx, scaleFilter(i), metav1.CreateOptions{})
		return err
	})
}

// deleteScaleFilters deletes the benchmark's filters 0..n-1, each in its own request as kubectl
// delete sends them, scaleWorkers at a time, without waiting for them to go. (One DeleteCollection
// took longer: the API server marks the objects for deletion one after the other.)
func deleteScaleFilters(t *testing.T, c dynamic.Interface, namespace string, n int) {
	t.Helper()
	filters := c.Resource(bloomFilters).Namespace(namespace)
	inParallel(t, n, func(ctx context.Context, i int) error {
		err := filters.Delete(ctx, scaleName(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
