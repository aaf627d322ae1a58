package controllers

import (
	"context"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

func pdbName(cluster string) string { return cluster }

func (r *BloomClusterReconciler) reconcilePodDisruptionBudget(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	desired := buildPodDisruptionBudget(st.cluster)
	if !pdbEnabled(st.cluster) {
		return ctrl.Result{}, deleteChild(ctx, r, st.cluster, desired)
	}
	_, err := ensureChild(ctx, r, st.cluster, desired, &policyv1.PodDisruptionBudget{}, mergePodDisruptionBudget)
	return ctrl.Result{}, err
}

// pdbEnabled is the schema's default (true) when the field is absent.
func pdbEnabled(c *bloomeryv1alpha1.BloomCluster) bool {
	return c.Spec.PodDisruptionBudget.Enabled == nil || *c.Spec.PodDisruptionBudget.Enabled
}

// buildPodDisruptionBudget limits voluntary evictions (node drains) of the cluster's pods.
func buildPodDisruptionBudget(c *bloomeryv1alpha1.BloomCluster) *policyv1.PodDisruptionBudget {
	maxUnavailable := intstr.FromInt32(1)
	if m := c.Spec.PodDisruptionBudget.MaxUnavailable; m != nil {
		maxUnavailable = *m
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: childMeta(c, pdbName(c.Name)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name)},
			MaxUnavailable: &maxUnavailable,
			// A pod that is not ready serves nothing: evicting it costs no availability, and a
			// crash-looping pod must not block a node drain.
			UnhealthyPodEvictionPolicy: new(policyv1.AlwaysAllow),
		},
	}
}

// mergePodDisruptionBudget owns the whole spec: minAvailable is cleared because the budget is
// expressed as maxUnavailable, and the API server refuses both at once.
func mergePodDisruptionBudget(existing, desired *policyv1.PodDisruptionBudget) {
	existing.Spec.Selector = desired.Spec.Selector
	existing.Spec.MaxUnavailable = desired.Spec.MaxUnavailable
	existing.Spec.MinAvailable = nil
	existing.Spec.UnhealthyPodEvictionPolicy = desired.Spec.UnhealthyPodEvictionPolicy
}
