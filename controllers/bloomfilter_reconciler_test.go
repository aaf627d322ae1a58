package controllers

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	dpclient "github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The tests in this file run the BloomFilter reconciler's Reconcile directly, on a fake client,
// against a real data plane whose requests are recorded: no manager, no watches.

// worldToken is the internal token of the fake world's cluster.
const worldToken = "5eed0123456789abcdef5eed0123456789abcdef5eed0123456789abcdef5eed"

// recordingDataPlane is the internal port of a real, in-memory data plane on a loopback port,
// which records the method and path of every request it serves, and whether it carried the token.
type recordingDataPlane struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
	// untokened lists the requests without the world's token.
	untokened []string
}

func startRecordingDataPlane(t *testing.T) *recordingDataPlane {
	t.Helper()
	cfg := config.Default()
	cfg.InMemory = true
	cfg.InternalTokenFile = tokenFile(t, worldToken)
	srv, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d := &recordingDataPlane{}
	handler := srv.InternalHandler()
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request := r.Method + " " + r.URL.Path
		d.mu.Lock()
		d.requests = append(d.requests, request)
		if r.Header.Get("Authorization") != "Bearer "+worldToken {
			d.untokened = append(d.untokened, request)
		}
		d.mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *recordingDataPlane) served() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.requests)
}

// servedCount counts the requests served of method and path.
func (d *recordingDataPlane) servedCount(method, path string) int {
	n := 0
	for _, r := range d.served() {
		if r == method+" "+path {
			n++
		}
	}
	return n
}

func (d *recordingDataPlane) servedWithoutToken() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.untokened)
}

func (d *recordingDataPlane) port(t *testing.T) int32 {
	t.Helper()
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return int32(port)
}

// worldStatefulSetRef makes a pod one of the fake world's StatefulSet.
var worldStatefulSetRef = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "c", UID: "sts-uid", Controller: new(true)}

// worldPod is a Ready pod of cluster "c" in the fake world, served by dp, with owners.
func worldPod(t *testing.T, name string, dp *recordingDataPlane, owners ...metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: selectorLabels("c"), OwnerReferences: owners},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  containerName,
			Ports: []corev1.ContainerPort{{Name: internalPortName, ContainerPort: dp.port(t)}},
		}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// fakeFilterWorld is a fake API server holding a cluster "c" of one ready pod of its
// StatefulSet, served by dp, its token Secret, and a BloomFilter "f" of that cluster. Objects in
// extra are added; one of the same name and kind replaces the world's.
func fakeFilterWorld(t *testing.T, dp *recordingDataPlane, funcs interceptor.Funcs, extra ...client.Object) client.Client {
	t.Helper()
	const ns = "ns"
	cluster := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "cluster-uid"}}
	sts := buildStatefulSet(cluster, testImage, "", "", "")
	sts.UID = "sts-uid"
	secret := &corev1.Secret{
		ObjectMeta: childMeta(cluster, tokenSecretName("c")),
		Data:       map[string][]byte{tokenSecretKey: []byte(worldToken)},
	}
	for _, child := range []client.Object{sts, secret} {
		if err := ctrl.SetControllerReference(cluster, child, testScheme); err != nil {
			t.Fatal(err)
		}
	}
	pod := worldPod(t, "c-0", dp, worldStatefulSetRef)
	bf := &bloomeryv1alpha1.BloomFilter{
		ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: ns},
		Spec: bloomeryv1alpha1.BloomFilterSpec{
			ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "c"},
			Capacity:   1000, FalsePositiveRate: "0.01", Scalable: new(true), Growth: new(int32(2)),
		},
	}
	objects := []client.Object{pod, cluster, bf, sts, secret}
	for _, o := range extra {
		objects = slices.DeleteFunc(objects, func(w client.Object) bool {
			return w.GetName() == o.GetName() && reflect.TypeOf(w) == reflect.TypeOf(o)
		})
	}
	return fake.NewClientBuilder().WithScheme(testScheme).
		WithObjects(append(objects, extra...)...).
		WithStatusSubresource(&bloomeryv1alpha1.BloomFilter{}).
		WithInterceptorFuncs(funcs).
		Build()
}

var filterRequest = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "f"}}

// A reconciler given nothing but a client runs as in production: events go nowhere instead of
// panicking, passes repeat every 30 s, and a delete of a BloomFilter with the finalizer retries a
// pod that does not answer instead of giving up at once.
func TestBloomFilterReconcilerZeroSettings(t *testing.T) {
	dp := startRecordingDataPlane(t)
	k := fakeFilterWorld(t, dp, interceptor.Funcs{})
	r := &BloomFilterReconciler{Client: k}

	result, err := r.Reconcile(t.Context(), filterRequest) // creates the filter: a Created event
	if err != nil {
		t.Fatal(err)
	}
	if result.RequeueAfter != defaultFilterResync {
		t.Errorf("requeued after %v, want %v", result.RequeueAfter, defaultFilterResync)
	}
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(bf.Status.Conditions, ConditionReady) {
		t.Errorf("conditions %+v, want Ready", bf.Status.Conditions)
	}

	// As a BloomFilter made by an operator from before owners has it.
	controllerutil.AddFinalizer(&bf, filterFinalizer)
	if err := k.Update(t.Context(), &bf); err != nil {
		t.Fatal(err)
	}
	dp.Close() // the pod stops answering
	if err := k.Delete(t.Context(), &bf); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), filterRequest); err == nil {
		t.Error("a delete with the pod not answering succeeded; want it retried")
	}
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); apierrors.IsNotFound(err) {
		t.Error("the BloomFilter went at once: the delete gave up without retrying")
	}
}

// The passes read a filter's status from its cheap endpoint, never from the GET that counts every
// bit, and status shows what the pod holds.
func TestBloomFilterStatusIsReadCheaply(t *testing.T) {
	dp := startRecordingDataPlane(t)
	k := fakeFilterWorld(t, dp, interceptor.Funcs{})
	r := &BloomFilterReconciler{Client: k}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil { // creates the filter
		t.Fatal(err)
	}
	if err := dpclient.New(dp.URL, dpclient.Internal(worldToken)).MultiSet(t.Context(), "f", []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}

	served := dp.served()
	if slices.Contains(served, "GET "+wire.InternalPath(wire.FilterPath("f"))) {
		t.Errorf("the passes read the filter's full description, which counts its bits: %q", served)
	}
	if !slices.Contains(served, "GET "+wire.FilterStatusPath("f")) {
		t.Errorf("the passes never read the filter's status: %q", served)
	}
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if bf.Status.Items != 3 || bf.Status.SizeBytes == 0 || bf.Status.FillRatio == "0" || bf.Status.EstimatedFalsePositiveRate == "0" {
		t.Errorf("status %+v: want 3 items, a size, a fill ratio and a rate", bf.Status)
	}
}

func TestPodEventsThatRequeueFilters(t *testing.T) {
	ready := corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	tests := []struct {
		name   string
		change func(*corev1.Pod)
		want   bool
	}{
		{"nothing the passes read", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, RestartCount: 0}}
			p.Labels = map[string]string{"extra": "label"}
		}, false},
		{"address", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2" }, true},
		{"phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"readiness", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c-0"}, Status: *ready.DeepCopy()}
			pod := old.DeepCopy()
			tt.change(pod)
			if got := podServingChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: pod}); got != tt.want {
				t.Errorf("requeue = %v, want %v", got, tt.want)
			}
		})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c-0"}}
	if !podServingChanged.Create(event.CreateEvent{Object: pod}) || !podServingChanged.Delete(event.DeleteEvent{Object: pod}) {
		t.Error("a pod created or deleted does not requeue the filters")
	}
}

// A status computed from an object that changed meanwhile is not written over the newer one, and
// the conflict is a requeue, not a failure.
func TestBloomFilterStatusWriteIsLocked(t *testing.T) {
	dp := startRecordingDataPlane(t)
	var patches int
	k := fakeFilterWorld(t, dp, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			patches++
			// Another writer changes the object between the pass's read and its status write.
			var bf bloomeryv1alpha1.BloomFilter
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &bf); err != nil {
				return err
			}
			bf.Labels = map[string]string{"changed": strconv.Itoa(patches)}
			if err := c.Update(ctx, &bf); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r := &BloomFilterReconciler{Client: k}
	result, err := r.Reconcile(t.Context(), filterRequest)
	if err != nil {
		t.Fatalf("a conflict failed the pass: %v", err)
	}
	if patches != 1 || result.RequeueAfter != time.Second {
		t.Errorf("%d status patches, requeued after %v; want one, refused, and a requeue after 1s", patches, result.RequeueAfter)
	}
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if len(bf.Status.Conditions) != 0 {
		t.Errorf("the stale status was written: %+v", bf.Status)
	}
}

// Copies of a scalable filter differ in size while it grows: status reports the largest, as it
// reports the largest count of items.
func TestBloomFilterStatusReportsTheLargestCopy(t *testing.T) {
	bf := &bloomeryv1alpha1.BloomFilter{}
	cluster := &bloomeryv1alpha1.BloomCluster{Spec: bloomeryv1alpha1.BloomClusterSpec{Replicas: new(int32(2))}}
	copyOf := func(pod string, items, size int64) podObservation {
		return podObservation{status: bloomeryv1alpha1.PodFilterStatus{Pod: pod, Present: true, Items: items, SizeBytes: size}}
	}
	(&BloomFilterReconciler{}).report(bf, cluster, []podObservation{copyOf("c-0", 300, 4096), copyOf("c-1", 200, 2048)})
	if bf.Status.Items != 300 || bf.Status.SizeBytes != 4096 {
		t.Errorf("items %d, size %d; want the largest copy's 300 and 4096", bf.Status.Items, bf.Status.SizeBytes)
	}
}

// With partitions placed on some pods only, a pod's copy holds some of them: status sums the
// copies and divides by the average number of copies of a partition. A pod that holds none adds
// nothing; when every pod holds all partitions or none, status keeps the largest copy.
func TestBloomFilterStatusSumsPartialCopies(t *testing.T) {
	cluster := &bloomeryv1alpha1.BloomCluster{Spec: bloomeryv1alpha1.BloomClusterSpec{Replicas: new(int32(5))}}
	copyOf := func(pod string, partitions, held int, items, size int64) podObservation {
		return podObservation{
			status: bloomeryv1alpha1.PodFilterStatus{Pod: pod, Present: true, Items: items, SizeBytes: size, PartitionsHeld: int32(held)},
			filter: wire.FilterStatus{Partitions: partitions},
		}
	}
	tests := []struct {
		name              string
		observed          []podObservation
		wantItems, wantSz int64
	}{
		// 4 partitions on 2 of 5 pods: 8 copies of a partition, 2 of each.
		{"some of them", []podObservation{
			copyOf("c-0", 4, 2, 100, 1000), copyOf("c-1", 4, 2, 120, 1200), copyOf("c-2", 4, 1, 50, 500),
			copyOf("c-3", 4, 3, 130, 1300), copyOf("c-4", 4, 0, 0, 0),
		}, 200, 2000},
		// Partitions of unequal sizes while one scales: the sum over 1.5 copies.
		{"rounded", []podObservation{copyOf("c-0", 2, 1, 100, 1000), copyOf("c-1", 2, 2, 201, 2001)}, 201, 2001},
		{"all or none: the largest", []podObservation{copyOf("c-0", 1, 1, 100, 1000), copyOf("c-1", 1, 1, 90, 900), copyOf("c-2", 1, 0, 0, 0)}, 100, 1000},
		{"every pod all of them", []podObservation{copyOf("c-0", 4, 4, 100, 1000), copyOf("c-1", 4, 4, 110, 900)}, 110, 1000},
	}
	for _, tt := range tests {
		bf := &bloomeryv1alpha1.BloomFilter{}
		(&BloomFilterReconciler{}).report(bf, cluster, tt.observed)
		if bf.Status.Items != tt.wantItems || bf.Status.SizeBytes != tt.wantSz {
			t.Errorf("%s: items %d, size %d; want %d and %d", tt.name, bf.Status.Items, bf.Status.SizeBytes, tt.wantItems, tt.wantSz)
		}
	}
}

// A pod's partitionsHeld is what it reports, and all of them for a data plane from before
// placement, which reports none but holds bits; a pod with no bytes and no items holds none.
func TestPartitionsHeldOf(t *testing.T) {
	tests := []struct {
		f    wire.FilterStatus
		want int
	}{
		{wire.FilterStatus{Partitions: 8, PartitionsHeld: 3, SizeBytes: 10}, 3},
		{wire.FilterStatus{Partitions: 8, PartitionsHeld: 8, SizeBytes: 10}, 8},
		{wire.FilterStatus{Partitions: 8, SizeBytes: 10}, 8}, // from before placement
		{wire.FilterStatus{Partitions: 0, SizeBytes: 10}, 1}, // from before partitions
		{wire.FilterStatus{Partitions: 8}, 0},                // holds none
		{wire.FilterStatus{Partitions: 2, PartitionsHeld: 5, SizeBytes: 10}, 2},
	}
	for _, tt := range tests {
		if got := partitionsHeldOf(tt.f); got != tt.want {
			t.Errorf("partitionsHeldOf(%+v) = %d, want %d", tt.f, got, tt.want)
		}
	}
}

// status.partitions is the largest number of partitions the pods that hold the filter report, a
// pod's 0 (one from before partitions) counting as 1; with no pod holding the filter it is unset.
func TestBloomFilterStatusReportsThePartitions(t *testing.T) {
	cluster := &bloomeryv1alpha1.BloomCluster{Spec: bloomeryv1alpha1.BloomClusterSpec{Replicas: new(int32(3))}}
	copyOf := func(pod string, present bool, partitions int) podObservation {
		return podObservation{
			status: bloomeryv1alpha1.PodFilterStatus{Pod: pod, Present: present},
			filter: wire.FilterStatus{Partitions: partitions},
		}
	}
	tests := []struct {
		name     string
		observed []podObservation
		want     int32
	}{
		{"the largest", []podObservation{copyOf("c-0", true, 4), copyOf("c-1", true, 8), copyOf("c-2", true, 4)}, 8},
		{"0 as 1", []podObservation{copyOf("c-0", true, 0), copyOf("c-1", true, 0)}, 1},
		{"only pods that hold it", []podObservation{copyOf("c-0", true, 2), copyOf("c-1", false, 16)}, 2},
		{"no pod holds it", []podObservation{copyOf("c-0", false, 4)}, 0},
		{"no pods", nil, 0},
	}
	for _, tt := range tests {
		bf := &bloomeryv1alpha1.BloomFilter{Status: bloomeryv1alpha1.BloomFilterStatus{Partitions: 32}} // a stale value
		(&BloomFilterReconciler{}).report(bf, cluster, tt.observed)
		if bf.Status.Partitions != tt.want {
			t.Errorf("%s: status.partitions %d, want %d", tt.name, bf.Status.Partitions, tt.want)
		}
	}
}

// Every call of the operator goes to the pod's internal port with the cluster's token: creates,
// status reads and deletes alike.
func TestBloomFilterCallsCarryTheToken(t *testing.T) {
	dp := startRecordingDataPlane(t)
	k := fakeFilterWorld(t, dp, interceptor.Funcs{})
	r := &BloomFilterReconciler{Client: k}
	for range 2 { // the create, then a pass that reads the status
		if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
			t.Fatal(err)
		}
	}
	deleteAndPass(t, r, k)

	served := dp.served()
	for _, want := range []string{
		"PUT " + wire.InternalPath(wire.FilterPath("f")),
		"GET " + wire.FilterStatusPath("f"),
		"DELETE " + wire.InternalPath(wire.FilterPath("f")),
	} {
		if !slices.Contains(served, want) {
			t.Errorf("no %s among the requests %q", want, served)
		}
	}
	for _, request := range served {
		if _, path, _ := strings.Cut(request, " "); !strings.HasPrefix(path, wire.InternalBasePath+"/") {
			t.Errorf("%s: the operator called a path outside the internal port's", request)
		}
	}
	if without := dp.servedWithoutToken(); len(without) > 0 {
		t.Errorf("requests without the cluster's token: %q", without)
	}
}

// deleteAndPass deletes the world's BloomFilter "f", tells r what the controller's watch of
// BloomFilters records of the delete, and runs the pass it brings.
func deleteAndPass(t *testing.T, r *BloomFilterReconciler, k client.Client) {
	t.Helper()
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(t.Context(), &bf); err != nil {
		t.Fatal(err)
	}
	r.deleted.recorder().Delete(event.DeleteEvent{Object: &bf})
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
}

// Without a token the operator may use, a BloomFilter says so and calls no pod.
func TestBloomFilterWithoutToken(t *testing.T) {
	tests := []struct {
		name    string
		funcs   interceptor.Funcs
		extra   []client.Object
		message string
	}{
		{name: "no Secret yet", funcs: interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Secret); ok {
					return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
				}
				return c.Get(ctx, key, obj, opts...)
			},
		}, message: "Secret c-internal-token does not exist yet"},
		{name: "a Secret of someone else", extra: []client.Object{&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "c-internal-token", Namespace: "ns", Labels: clusterLabels("c")},
			Data:       map[string][]byte{tokenSecretKey: []byte(worldToken)},
		}}, message: "is not this BloomCluster's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dp := startRecordingDataPlane(t)
			k := fakeFilterWorld(t, dp, tt.funcs, tt.extra...)
			result, err := (&BloomFilterReconciler{Client: k}).Reconcile(t.Context(), filterRequest)
			if err != nil || result.RequeueAfter != defaultFilterResync {
				t.Errorf("pass: %v, requeued after %v; want no error and a retry after %v", err, result.RequeueAfter, defaultFilterResync)
			}
			var bf bloomeryv1alpha1.BloomFilter
			if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(bf.Status.Conditions, ConditionReady)
			if c == nil || c.Reason != ReasonNoInternalToken || !strings.Contains(c.Message, tt.message) {
				t.Errorf("Ready condition %+v, want reason %s saying %q", c, ReasonNoInternalToken, tt.message)
			}
			if served := dp.served(); len(served) > 0 {
				t.Errorf("the pod was called without a token: %q", served)
			}
		})
	}
}

// A pod with the cluster's labels that its StatefulSet did not make gets no call, and so never
// the token; nor does one of the StatefulSet whose name is not <statefulset>-<ordinal>.
func TestBloomFilterIgnoresPodsItsStatefulSetDoesNotOwn(t *testing.T) {
	dp, intruder := startRecordingDataPlane(t), startRecordingDataPlane(t)
	otherSts := worldStatefulSetRef
	otherSts.UID = "another-uid"
	k := fakeFilterWorld(t, dp, interceptor.Funcs{},
		worldPod(t, "c-1", intruder), // labelled by hand
		worldPod(t, "c-2", intruder, otherSts),
		worldPod(t, "c-x", intruder, worldStatefulSetRef),
		worldPod(t, "c-03", intruder, worldStatefulSetRef),
	)
	if _, err := (&BloomFilterReconciler{Client: k}).Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	if served := intruder.served(); len(served) > 0 {
		t.Errorf("pods the StatefulSet does not own were called: %q", served)
	}
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if len(bf.Status.Pods) != 1 || bf.Status.Pods[0].Pod != "c-0" || !bf.Status.Pods[0].Present {
		t.Errorf("status.pods %+v, want c-0 alone, holding the filter", bf.Status.Pods)
	}
}

// replicatedWorld is the fake world with pods c-0, c-1 and c-2 of the cluster, served by dps in
// turn (which do not replicate to each other), and the cluster's membership of the pods members.
func replicatedWorld(t *testing.T, dps []*recordingDataPlane, members ...string) client.Client {
	t.Helper()
	cluster := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "cluster-uid"}}
	for _, m := range members {
		cluster.Status.Members = append(cluster.Status.Members, bloomeryv1alpha1.ClusterMember{Pod: m, URL: "http://127.0.0.1"})
	}
	return fakeFilterWorld(t, dps[0], interceptor.Funcs{}, cluster,
		worldPod(t, "c-1", dps[1], worldStatefulSetRef), worldPod(t, "c-2", dps[2], worldStatefulSetRef))
}

// The copies of a BloomFilter deleted go from the members by one delete, sent to the first that
// takes it, which replicates it; a pod outside the membership gets its own.
func TestOneDeleteServesTheMembers(t *testing.T) {
	dps := []*recordingDataPlane{startRecordingDataPlane(t), startRecordingDataPlane(t), startRecordingDataPlane(t)}
	k := replicatedWorld(t, dps, "c-0", "c-1")
	r := &BloomFilterReconciler{Client: k}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	deleteAndPass(t, r, k)
	remove := wire.InternalPath(wire.FilterPath("f"))
	for i, want := range []int{1, 0, 1} {
		if got := dps[i].servedCount(http.MethodDelete, remove); got != want {
			t.Errorf("pod c-%d was sent %d deletes, want %d: %q", i, got, want, dps[i].served())
		}
	}
}
