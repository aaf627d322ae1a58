package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// Each child object of a BloomCluster has a file of its own (child_*.go) that holds, side by
// side, its builder, a pure function of the BloomCluster, and its merge, which copies the fields
// the operator owns from a built object onto the live one. A builder fills in every field the API
// server would default, so that a built object compares equal (equality.Semantic) to what the
// server stores, and a steady state sends no writes. Owner references are set here, where the
// scheme is.

func childMeta(c *bloomeryv1alpha1.BloomCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: clusterLabels(c.Name)}
}

// ensureChild creates desired when it does not exist, or else applies merge (which copies the
// fields the operator owns from desired onto a copy of the existing object), adds the cluster's
// labels and controller reference, and updates only when that changed something. It returns the
// object as the API server last returned it (existing when unchanged or when the update failed).
func ensureChild[T client.Object](ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster,
	desired, existing T, merge func(existing, desired T)) (T, error) {
	kind := r.kindOf(desired)
	key := client.ObjectKeyFromObject(desired)
	created, err := readOrCreateChild(ctx, r, cluster, kind, desired, existing)
	switch {
	case err != nil:
		return existing, err
	case created:
		return desired, nil
	}
	updated, ok := existing.DeepCopyObject().(T)
	if !ok {
		return existing, fmt.Errorf("copying %s %s: unexpected type %T", kind, key.Name, existing.DeepCopyObject())
	}
	merge(updated, desired)
	updated.SetLabels(mergeStringMaps(updated.GetLabels(), desired.GetLabels()))
	// Refuses to take over an object another controller owns: that is reported as a failure.
	if err := ctrl.SetControllerReference(cluster, updated, r.Scheme); err != nil {
		return existing, fmt.Errorf("%s %s exists and is not this BloomCluster's: %w", kind, key.Name, err)
	}
	if equality.Semantic.DeepEqual(existing, updated) {
		return existing, nil
	}
	// Update, not patch: the resourceVersion makes a concurrent change fail with a conflict
	// instead of being overwritten.
	if err := r.Client.Update(ctx, updated); err != nil {
		if !apierrors.IsConflict(err) {
			r.event(cluster, updated, corev1.EventTypeWarning, "UpdateFailed", "Update", "Updating %s %s failed: %v", kind, key.Name, err)
		}
		return existing, fmt.Errorf("updating %s %s: %w", kind, key.Name, err)
	}
	log.FromContext(ctx).Info("Updated child object of BloomCluster", "kind", kind, "name", key.Name)
	r.event(cluster, updated, corev1.EventTypeNormal, "Updated", "Update", "Updated %s %s", kind, key.Name)
	return updated, nil
}

// readOrCreateChild reads the child desired names into existing, or creates desired when there is
// none; created says which.
func readOrCreateChild[T client.Object](ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster,
	kind string, desired, existing T) (created bool, err error) {
	key := client.ObjectKeyFromObject(desired)
	err = r.Client.Get(ctx, key, existing)
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return false, fmt.Errorf("getting %s %s: %w", kind, key.Name, err)
		}
		return false, nil
	}
	err = createChild(ctx, r, cluster, desired)
	if !apierrors.IsAlreadyExists(err) {
		return err == nil, err
	}
	// The cache does not hold it: it was created a moment ago, or it lacks the label the cache
	// selects (CacheByObject). Read it past the cache: the caller's update restores the label, or
	// the owner check refuses an object that is not this cluster's.
	if err := r.apiReader().Get(ctx, key, existing); err != nil {
		return false, fmt.Errorf("getting %s %s: %w", kind, key.Name, err)
	}
	return false, nil
}

// createChild creates desired with this cluster as its controller.
func createChild(ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster, desired client.Object) error {
	kind := r.kindOf(desired)
	name := desired.GetName()
	if err := ctrl.SetControllerReference(cluster, desired, r.Scheme); err != nil {
		return fmt.Errorf("setting owner of %s %s: %w", kind, name, err)
	}
	if err := r.Client.Create(ctx, desired); err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return errNamespaceTerminating
		}
		if !apierrors.IsAlreadyExists(err) {
			r.event(cluster, desired, corev1.EventTypeWarning, "CreateFailed", "Create", "Creating %s %s failed: %v", kind, name, err)
		}
		return fmt.Errorf("creating %s %s: %w", kind, name, err)
	}
	log.FromContext(ctx).Info("Created child object of BloomCluster", "kind", kind, "name", name)
	r.event(cluster, desired, corev1.EventTypeNormal, "Created", "Create", "Created %s %s", kind, name)
	return nil
}

// deleteChild deletes the object of desired's name and kind if this cluster controls it.
func deleteChild(ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster, desired client.Object) error {
	kind := r.kindOf(desired)
	existing, ok := desired.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %s: unexpected type %T", kind, desired)
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(existing, cluster) {
		return nil
	}
	if err := r.Client.Delete(ctx, existing, client.Preconditions{UID: new(existing.GetUID())}); client.IgnoreNotFound(err) != nil {
		r.event(cluster, existing, corev1.EventTypeWarning, "DeleteFailed", "Delete", "Deleting %s %s failed: %v", kind, existing.GetName(), err)
		return fmt.Errorf("deleting %s %s: %w", kind, existing.GetName(), err)
	}
	log.FromContext(ctx).Info("Deleted child object of BloomCluster", "kind", kind, "name", existing.GetName())
	r.event(cluster, existing, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted %s %s", kind, existing.GetName())
	return nil
}

func (r *BloomClusterReconciler) kindOf(obj client.Object) string {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return gvk.Kind
}

func (r *BloomClusterReconciler) event(cluster *bloomeryv1alpha1.BloomCluster, related runtime.Object, eventType, reason, action, note string, args ...any) {
	orNoop(r.Recorder).Eventf(cluster, related, eventType, reason, action, note, args...)
}

// mergeStringMaps returns base with over's entries set over it; base's other entries stay.
func mergeStringMaps(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = make(map[string]string, len(over))
	}
	maps.Copy(out, over)
	return out
}
