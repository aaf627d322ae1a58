package controllers

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

func passes(p predicate.Funcs, old, cur client.Object) bool {
	return p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur})
}

// The reconcilers' own writes (status, finalizer) must not bring a pass; what a user changes must.
func TestUserIntentChanged(t *testing.T) {
	base := &bloomeryv1alpha1.BloomFilter{ObjectMeta: metav1.ObjectMeta{Name: "f", Generation: 1}}
	for _, tc := range []struct {
		name   string
		change func(*bloomeryv1alpha1.BloomFilter)
		want   bool
	}{
		{"status", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Status.Items = 7 }, false},
		{"finalizer", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Finalizers = []string{filterFinalizer} }, false},
		{"resourceVersion", func(bf *bloomeryv1alpha1.BloomFilter) { bf.ResourceVersion = "9" }, false},
		{"spec", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Generation = 2 }, true},
		{"pause annotation", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Annotations = map[string]string{PauseAnnotation: "true"} }, true},
		{"label", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Labels = map[string]string{"team": "a"} }, true},
		{"deletion", func(bf *bloomeryv1alpha1.BloomFilter) { bf.DeletionTimestamp = new(metav1.Now()) }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := passes(userIntentChanged, base, cur); got != tc.want {
			t.Errorf("%s: passes %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A cluster's status counts its filters and its replicas: none of that may requeue every filter.
// What the filters' passes read of it must.
func TestClusterChangedForFilters(t *testing.T) {
	base := &bloomeryv1alpha1.BloomCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 1},
		Spec:       bloomeryv1alpha1.BloomClusterSpec{Replicas: new(int32(3))},
		Status: bloomeryv1alpha1.BloomClusterStatus{MembershipEpoch: 4, Filters: 10,
			Placement: &bloomeryv1alpha1.ClusterPlacement{Phase: bloomeryv1alpha1.PlacementStable}},
	}
	for _, tc := range []struct {
		name   string
		change func(*bloomeryv1alpha1.BloomCluster)
		want   bool
	}{
		{"filter count", func(c *bloomeryv1alpha1.BloomCluster) { c.Status.Filters = 11 }, false},
		{"ready replicas", func(c *bloomeryv1alpha1.BloomCluster) { c.Status.ReadyReplicas = 2 }, false},
		{"conditions", func(c *bloomeryv1alpha1.BloomCluster) {
			c.Status.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue}}
		}, false},
		{"partitions moving", func(c *bloomeryv1alpha1.BloomCluster) { c.Status.Placement.PartitionsMoving = 5 }, false},
		{"an unrelated spec field", func(c *bloomeryv1alpha1.BloomCluster) { c.Generation = 2; c.Spec.Image = "x" }, false},
		{"replicas", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(4)) }, true},
		{"tls", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.TLS = &bloomeryv1alpha1.TLSSpec{SecretName: "s"} }, true},
		{"membership epoch", func(c *bloomeryv1alpha1.BloomCluster) { c.Status.MembershipEpoch = 5 }, true},
		{"placement phase", func(c *bloomeryv1alpha1.BloomCluster) { c.Status.Placement.Phase = bloomeryv1alpha1.PlacementMoving }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := passes(clusterChangedForFilters, base, cur); got != tc.want {
			t.Errorf("%s: passes %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTokenSecretChanged(t *testing.T) {
	cluster := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1"}}
	base := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tokenSecretName("c"), Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cluster, bloomeryv1alpha1.GroupVersion.WithKind("BloomCluster"))}},
		Data: map[string][]byte{tokenSecretKey: []byte("a")},
	}
	relabelled := base.DeepCopy()
	relabelled.Labels = map[string]string{"x": "y"}
	if passes(tokenSecretChanged, base, relabelled) {
		t.Error("a change of labels passes")
	}
	rotated := base.DeepCopy()
	rotated.Data[tokenSecretKey] = []byte("b")
	if !passes(tokenSecretChanged, base, rotated) {
		t.Error("a new token does not pass")
	}
	if got, ok := clusterOfTokenSecret(base); !ok || got.Name != "c" || got.Namespace != "ns" {
		t.Errorf("clusterOfTokenSecret = %v, %v; want ns/c", got, ok)
	}
}

// The creates and deletes of BloomFilters of a cluster within filterCountDelay bring one pass of
// it, after the delay; their status updates bring none.
func TestFilterCountsMergeIntoOnePass(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := t.Context()
	for i := range 100 {
		bf := &bloomeryv1alpha1.BloomFilter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("f%d", i)}}
		bf.Spec.ClusterRef.Name = "c"
		countFilters.Create(ctx, event.CreateEvent{Object: bf}, q)
		countFilters.Update(ctx, event.UpdateEvent{ObjectOld: bf, ObjectNew: bf}, q)
		countFilters.Delete(ctx, event.DeleteEvent{Object: bf}, q)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d passes queued at once, want none before %v", n, filterCountDelay)
	}
	got, _ := q.Get() // waits for the delay
	if want := (reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c"}}); got != want {
		t.Fatalf("the pass is of %v, want %v", got, want)
	}
	q.Done(got)
	if n := q.Len(); n != 0 {
		t.Errorf("%d more passes queued after the first, want the 200 events merged into one", n)
	}
}
