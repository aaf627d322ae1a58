//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
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

// scaleAPI is the administrator's client of BloomFilters for the benchmark, without a client-side
// rate limit (the API server's priority and fairness still applies). It sends each request as
// bytes and decodes, of what comes back, only what it reads (scaleObject). Decoding every answer
// and watch event into maps cost it 9-10 s of CPU while 10,000 filters were created, 5-9 s this
// way: CPU taken from the machine it measures.
type scaleAPI struct{ rest *rest.RESTClient }

func scaleClient(t *testing.T) scaleAPI {
	t.Helper()
	gv := schema.GroupVersion{Group: "bloomery.io", Version: "v1alpha1"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gv.WithKind("BloomFilter"), &scaleObject{})
	scheme.AddKnownTypeWithName(gv.WithKind("BloomFilterList"), &scaleObjectList{})
	metav1.AddToGroupVersion(scheme, gv)
	config := *h.cp.config
	config.QPS, config.Burst = -1, 0
	config.GroupVersion, config.APIPath = &gv, "/apis"
	config.ContentType = runtime.ContentTypeJSON
	config.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c, err := rest.RESTClientFor(&config)
	if err != nil {
		t.Fatal(err)
	}
	return scaleAPI{c}
}

func (a scaleAPI) filters(namespace string) *rest.Request {
	return a.rest.Get().Namespace(namespace).Resource("bloomfilters")
}

// scaleObject is what the benchmark reads of a BloomFilter: its metadata and its conditions.
type scaleObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Conditions []metav1.Condition `json:"conditions"`
	} `json:"status"`
}

func (o *scaleObject) DeepCopyObject() runtime.Object {
	c := *o
	o.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = slices.Clone(o.Status.Conditions)
	return &c
}

// ready reports whether the filter's Ready condition is True.
func (o *scaleObject) ready() bool {
	return meta.IsStatusConditionTrue(o.Status.Conditions, "Ready")
}

type scaleObjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []scaleObject `json:"items"`
}

func (l *scaleObjectList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = make([]scaleObject, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*scaleObject)
	}
	return &c
}

// scaleName is the name of the benchmark's i-th BloomFilter.
func scaleName(i int) string { return fmt.Sprintf("%s%05d", scalePrefix, i) }

// scalePrefix begins the name of every filter of the benchmark.
const scalePrefix = "scale-"

// scaleFilter is the benchmark's i-th BloomFilter, as the body of its create.
func scaleFilter(i int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"bloomery.io/v1alpha1","kind":"BloomFilter",`+
		`"metadata":{"name":%q,"labels":{"bloomery.io/bench":"operator-scale"}},`+
		`"spec":{"clusterRef":{"name":"example"},"capacity":1000,"falsePositiveRate":"0.01"}}`, scaleName(i))
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

func watchScaleFilters(t *testing.T, c scaleAPI, namespace string) *filterWatch {
	t.Helper()
	w := &filterWatch{ready: map[string]bool{}, changed: make(chan struct{}, 1)}
	labelled := func(o *metav1.ListOptions) *metav1.ListOptions {
		o.LabelSelector = scaleLabel
		return o
	}
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &scaleObjectList{}
			return list, c.filters(namespace).VersionedParams(labelled(&o), metav1.ParameterCodec).Do(ctx).Into(list)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return c.filters(namespace).VersionedParams(labelled(&o), metav1.ParameterCodec).Watch(ctx)
		},
	}, &scaleObject{}, 0, cache.Indexers{})
	set := func(obj any) {
		f, ok := obj.(*scaleObject)
		if !ok {
			return
		}
		w.mu.Lock()
		w.readyOnes -= boolCount(w.ready[f.Name])
		w.ready[f.Name] = f.ready()
		w.readyOnes += boolCount(w.ready[f.Name])
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
			if f, ok := obj.(*scaleObject); ok {
				w.mu.Lock()
				w.readyOnes -= boolCount(w.ready[f.Name])
				delete(w.ready, f.Name)
				w.mu.Unlock()
				w.signal()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go informer.RunWithContext(ctx)
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

// createScaleFilters creates the benchmark's filters 0..n-1.
func createScaleFilters(t *testing.T, c scaleAPI, namespace string, n int) {
	t.Helper()
	inParallel(t, n, func(ctx context.Context, i int) error {
		return c.filters(namespace).Verb(http.MethodPost).Body(scaleFilter(i)).Do(ctx).Error()
	})
}

// deleteScaleFilters deletes the benchmark's filters 0..n-1, each in its own request as kubectl
// delete sends them, scaleWorkers at a time, without waiting for them to go. (One DeleteCollection
// took longer: the API server marks the objects for deletion one after the other.)
func deleteScaleFilters(t *testing.T, c scaleAPI, namespace string, n int) {
	t.Helper()
	inParallel(t, n, func(ctx context.Context, i int) error {
		err := c.filters(namespace).Verb(http.MethodDelete).Name(scaleName(i)).Do(ctx).Error()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
