package controllers

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

func filterAt(uid types.UID, version string) *bloomeryv1alpha1.BloomFilter {
	return &bloomeryv1alpha1.BloomFilter{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: uid, ResourceVersion: version}}
}

// An object read at a version before the reconciler's last write of it is behind; at that version
// or a later one it is not, and is forgotten, so that the versions held are those of the writes
// the cache has not caught up with.
func TestOwnWritesBehind(t *testing.T) {
	var w ownWrites
	if w.behind(filterAt("a", "5")) {
		t.Error("an object never written is behind")
	}
	w.wrote(filterAt("a", "10"))
	for _, v := range []string{"9", "1", "09"} { // "09" is no API server's version: not behind
		if got, want := w.behind(filterAt("a", v)), v != "09"; got != want {
			t.Errorf("written at 10, read at %q: behind %v, want %v", v, got, want)
		}
		w.wrote(filterAt("a", "10"))
	}
	if w.behind(filterAt("b", "9")) {
		t.Error("another object is behind the write of a")
	}
	if w.behind(filterAt("a", "10")) || w.behind(filterAt("a", "9")) {
		t.Error("the cache caught up with the write, yet a read of an older version is still behind")
	}
	w.wrote(filterAt("a", "20"))
	w.forget("a")
	if w.behind(filterAt("a", "19")) {
		t.Error("a forgotten object is behind")
	}
	w.wrote(filterAt("", "20"))
	if w.behind(filterAt("", "19")) {
		t.Error("an object without a UID was recorded")
	}
}

// The cache's update to the reconciler's write passes when a pass waits for it, once; an update
// before that write, or one no pass waits for, does not.
func TestOwnWritesCaughtUpEvents(t *testing.T) {
	var w ownWrites
	p := w.caughtUpEvents()
	update := func(v string) bool {
		return p.Update(event.UpdateEvent{ObjectOld: filterAt("a", "1"), ObjectNew: filterAt("a", v)})
	}
	w.wrote(filterAt("a", "10"))
	if update("10") {
		t.Error("the update to the write passed while no pass waited for it")
	}
	if !w.behind(filterAt("a", "9")) {
		t.Fatal("a read of version 9 is not behind the write of 10")
	}
	if update("9") {
		t.Error("an update to a version before the write passed")
	}
	if !update("11") {
		t.Error("the update past the write that a pass waits for did not pass")
	}
	if update("12") || w.behind(filterAt("a", "9")) {
		t.Error("the write is still remembered once the cache caught up with it")
	}
	if p.Create(event.CreateEvent{Object: filterAt("a", "1")}) {
		t.Error("a create event passed")
	}

	// The finalizer removed: the cache is behind while its object has it, whatever its version.
	withFinalizer := filterAt("a", "40")
	withFinalizer.Finalizers = []string{filterFinalizer}
	w.removedFinalizer(withFinalizer, filterFinalizer)
	if !w.behind(withFinalizer) {
		t.Error("the object with the finalizer removed is not behind")
	}
	if p.Update(event.UpdateEvent{ObjectOld: withFinalizer, ObjectNew: withFinalizer}) {
		t.Error("an update that still has the removed finalizer passed")
	}
	if !p.Update(event.UpdateEvent{ObjectOld: withFinalizer, ObjectNew: filterAt("a", "40")}) {
		t.Error("the update without the finalizer did not pass")
	}
	w.wrote(filterAt("a", "30"))
	if p.Delete(event.DeleteEvent{Object: filterAt("a", "30")}) {
		t.Error("a delete event passed")
	}
	if w.behind(filterAt("a", "29")) {
		t.Error("an object that is gone is still remembered")
	}
}

// A pass that reads the BloomFilter as it was before the pass that last wrote it (the cache has not
// caught up) writes nothing and calls no pod: it comes back soon, and then goes on.
func TestBloomFilterPassWaitsForTheCacheToHoldItsWrites(t *testing.T) {
	dp := startRecordingDataPlane(t)
	var stale client.Object // what Get answers instead of the object, while set
	var writes int
	bf := filterAt("f-uid", "")
	bf.Namespace = "ns"
	bf.Spec = bloomeryv1alpha1.BloomFilterSpec{
		ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "c"},
		Capacity:   1000, FalsePositiveRate: "0.01", Scalable: new(true), Growth: new(int32(2)),
	}
	k := fakeFilterWorld(t, dp, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if f, ok := obj.(*bloomeryv1alpha1.BloomFilter); ok && stale != nil {
				stale.(*bloomeryv1alpha1.BloomFilter).DeepCopyInto(f)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, bf)
	var before bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &before); err != nil {
		t.Fatal(err)
	}
	r := &BloomFilterReconciler{Client: k}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	if writes != 1 {
		t.Fatalf("the first pass made %d writes, want 1 (the status; its copies carry its UID, so no finalizer)", writes)
	}
	calls := len(dp.served())

	stale, writes = &before, 0
	result, err := r.Reconcile(t.Context(), filterRequest)
	if err != nil || result.RequeueAfter != cacheLagRetry {
		t.Errorf("a pass that read the object from before the last write: %+v, %v; want a requeue after %v", result, err, cacheLagRetry)
	}
	if writes != 0 || len(dp.served()) != calls {
		t.Errorf("a pass that read the object from before the last write made %d writes and %d pod calls, want none",
			writes, len(dp.served())-calls)
	}

	stale = nil
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Errorf("the pass once the cache caught up: %v", err)
	}
	if writes != 0 {
		t.Errorf("the pass once the cache caught up made %d writes, want none: nothing changed", writes)
	}
}

// A filter's first creation on its pods records no event, one event of the API server per filter:
// Ready says it. A pod that gets it while others already hold it is recorded.
func TestBloomFilterFirstCreationRecordsNoEvent(t *testing.T) {
	dp := startRecordingDataPlane(t)
	k := fakeFilterWorld(t, dp, interceptor.Funcs{})
	recorder := events.NewFakeRecorder(10)
	r := &BloomFilterReconciler{Client: k, Recorder: recorder}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	var bf bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &bf); err != nil {
		t.Fatal(err)
	}
	if len(bf.Status.Pods) != 1 || !bf.Status.Pods[0].Present {
		t.Fatalf("the filter is not on its pod: %+v", bf.Status.Pods)
	}
	select {
	case e := <-recorder.Events:
		t.Errorf("the first creation recorded %q", e)
	default:
	}

	// The pod loses the filter, and the next pass creates it there again.
	pod := Pod{Name: "c-0", IP: "127.0.0.1", Port: int(dp.port(t)), Token: worldToken}
	if _, err := NewHTTPDataPlane(time.Second).DeleteFilter(t.Context(), pod, "f", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(recorder.Events) > 0 {
		got = append(got, <-recorder.Events)
	}
	if len(got) != 2 {
		t.Errorf("recreating the filter on a pod that held it recorded %q, want Recreated and Created", got)
	}
}

// A pass that reads a BloomFilter the reconciler already finalized, from a cache that has not yet
// learnt it went, deletes nothing from the pods and writes nothing.
func TestBloomFilterFinalizedIsNotFinalizedAgain(t *testing.T) {
	dp := startRecordingDataPlane(t)
	var stale client.Object
	var writes int
	bf := filterAt("f-uid", "")
	bf.Namespace = "ns"
	bf.Finalizers = []string{filterFinalizer}
	bf.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	bf.Spec = bloomeryv1alpha1.BloomFilterSpec{ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "c"}, Capacity: 1000, FalsePositiveRate: "0.01"}
	k := fakeFilterWorld(t, dp, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if f, ok := obj.(*bloomeryv1alpha1.BloomFilter); ok && stale != nil {
				stale.(*bloomeryv1alpha1.BloomFilter).DeepCopyInto(f)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
	}, bf)
	var before bloomeryv1alpha1.BloomFilter
	if err := k.Get(t.Context(), filterRequest.NamespacedName, &before); err != nil {
		t.Fatal(err)
	}
	r := &BloomFilterReconciler{Client: k}
	if _, err := r.Reconcile(t.Context(), filterRequest); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || !slices.Contains(dp.served(), "DELETE /internal/v1/bloomfilter/f") {
		t.Fatalf("finalizing made %d writes and called the pod %q; want the finalizer removed and the filter deleted", writes, dp.served())
	}
	calls := len(dp.served())

	stale, writes = &before, 0
	result, err := r.Reconcile(t.Context(), filterRequest)
	if err != nil || result.RequeueAfter != cacheLagRetry {
		t.Errorf("a pass that read the finalized object from before its finalizer went: %+v, %v; want a requeue after %v", result, err, cacheLagRetry)
	}
	if writes != 0 || len(dp.served()) != calls {
		t.Errorf("a pass that read the finalized object from before its finalizer went made %d writes and %d pod calls, want none",
			writes, len(dp.served())-calls)
	}
}

// A BloomCluster pass that reads the cluster as it was before the pass that last wrote its status
// writes nothing: from the status before a new epoch it would start that epoch again, and its
// status write would conflict.
func TestBloomClusterPassWaitsForTheCacheToHoldItsWrites(t *testing.T) {
	var writes int
	count := func() { writes++ }
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c-uid"}}
	k := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(c).WithStatusSubresource(c).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, k client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return k.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, k client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return k.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, k client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return k.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, k client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return k.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	var read bloomeryv1alpha1.BloomCluster
	if err := k.Get(t.Context(), client.ObjectKeyFromObject(c), &read); err != nil {
		t.Fatal(err)
	}
	version, err := strconv.Atoi(read.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	written := read.DeepCopy()
	written.ResourceVersion = strconv.Itoa(version + 1)
	r := &BloomClusterReconciler{Client: k, Scheme: testScheme, DefaultImage: testImage}
	r.own.wrote(written)
	result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err != nil || result.RequeueAfter != cacheLagRetry {
		t.Errorf("a pass that read the cluster from before the last write: %+v, %v; want a requeue after %v", result, err, cacheLagRetry)
	}
	if writes != 0 {
		t.Errorf("a pass that read the cluster from before the last write made %d writes, want none", writes)
	}
}
