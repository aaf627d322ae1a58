package controllers

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// Requeues follow meaning: an event passes a controller's predicate only when it changes what a
// pass of the objects it requeues would do. Without them the operator's work grows with the
// number of filters rather than with changes: each status patch of a filter requeued it once more,
// and each change of a cluster's status (which counts its filters) requeued every filter of it.

// userIntentChanged passes the updates of an object that someone other than its reconciler made:
// its spec (the generation; the API server also raises it when it sets deletionTimestamp), its
// labels or annotations (the pause annotation), and its deletion. The reconciler's own writes, a
// status patch or a finalizer added, change none of these, so they bring no second pass.
var userIntentChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		old, cur := e.ObjectOld, e.ObjectNew
		return old.GetGeneration() != cur.GetGeneration() ||
			!maps.Equal(old.GetAnnotations(), cur.GetAnnotations()) ||
			!maps.Equal(old.GetLabels(), cur.GetLabels()) ||
			old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
	},
}

// filtersFacts is what a pass of a filter reads of its BloomCluster: how many pods serve it, how
// they are called, and the membership and placement their per-pod partitions follow. Every other
// field of the cluster (its filter count, its replicas' counts, which pod events already bring,
// its conditions) changes nothing a filter reports.
type filtersFacts struct {
	replicas  int32
	tlsSecret string
	epoch     int64
	phase     bloomeryv1alpha1.PlacementPhase
	rf        int32
}

func filtersFactsOf(c *bloomeryv1alpha1.BloomCluster) filtersFacts {
	f := filtersFacts{replicas: c.DesiredReplicas(), epoch: c.Status.MembershipEpoch}
	if c.Spec.TLS != nil {
		f.tlsSecret = c.Spec.TLS.SecretName
	}
	if p := c.Status.Placement; p != nil {
		f.phase, f.rf = p.Phase, p.ReplicationFactor
	}
	return f
}

// clusterChangedForFilters passes the BloomCluster events that its filters must see: a cluster
// created or deleted, and an update of what filtersFacts holds.
var clusterChangedForFilters = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*bloomeryv1alpha1.BloomCluster)
		cur, okNew := e.ObjectNew.(*bloomeryv1alpha1.BloomCluster)
		if !okOld || !okNew {
			return true
		}
		return filtersFactsOf(old) != filtersFactsOf(cur)
	},
}

// tokenSecretChanged passes the events of the clusters' internal token Secrets (the only Secrets
// the cache holds) that change the token: its creation, its deletion (to rotate it) and a change
// of its data. Filters wait for the token of a new cluster; this event, not a periodic pass, is
// what lets them go on.
var tokenSecretChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Secret)
		cur, okNew := e.ObjectNew.(*corev1.Secret)
		if !okOld || !okNew {
			return true
		}
		return string(old.Data[tokenSecretKey]) != string(cur.Data[tokenSecretKey]) || !ownerEqual(old, cur)
	},
}

func ownerEqual(a, b client.Object) bool {
	ra, rb := metav1.GetControllerOf(a), metav1.GetControllerOf(b)
	return (ra == nil) == (rb == nil) && (ra == nil || ra.UID == rb.UID)
}

// clusterOfTokenSecret names the BloomCluster whose token a Secret holds: its controller.
func clusterOfTokenSecret(o client.Object) (types.NamespacedName, bool) {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "BloomCluster" || ref.APIVersion != bloomeryv1alpha1.GroupVersion.String() {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}, true
}
