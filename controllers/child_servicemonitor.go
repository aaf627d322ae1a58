package controllers

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// serviceMonitorGVK is the Prometheus Operator's kind. It is handled as unstructured data, so the
// operator does not depend on prometheus-operator's Go module, and works without its CRDs.
var serviceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

func serviceMonitorName(cluster string) string { return cluster }

// reconcileServiceMonitor creates the ServiceMonitor when the spec asks for one and the cluster
// knows the kind; it is looked up on every pass, so installing the Prometheus Operator later is
// picked up by the next pass.
func (r *BloomClusterReconciler) reconcileServiceMonitor(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	wanted := st.cluster.Spec.Monitoring.ServiceMonitor.Enabled
	available, err := r.kindExists(serviceMonitorGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !available {
		if wanted {
			st.notApplied = append(st.notApplied, degradation{ReasonServiceMonitorUnavailable,
				"spec.monitoring.serviceMonitor.enabled is true, but the cluster has no monitoring.coreos.com/v1 " +
					"ServiceMonitor kind: install the Prometheus Operator's CRDs, or turn it off"})
		}
		return ctrl.Result{}, nil
	}
	desired := BuildServiceMonitor(st.cluster)
	if !wanted {
		return ctrl.Result{}, deleteChild(ctx, r, st.cluster, desired)
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(serviceMonitorGVK)
	_, err = ensureChild(ctx, r, st.cluster, desired, existing, mergeServiceMonitor)
	return ctrl.Result{}, err
}

// kindExists asks the REST mapper, which rediscovers a group it does not know, whether the API
// server serves the kind.
func (r *BloomClusterReconciler) kindExists(gvk schema.GroupVersionKind) (bool, error) {
	_, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return true, nil
	}
	// Also true of controller-runtime's discovery error for a group version the server does not
	// serve: its parts unwrap to NoResourceMatchError.
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return false, fmt.Errorf("discovering %s: %w", gvk.Kind, err)
}

// BuildServiceMonitor makes the Prometheus Operator scrape /metrics of every pod on its ops port,
// through the headless Service. The spec holds only JSON types (map[string]any, []any, string), as
// unstructured objects must. It is exported for the end-to-end suite's translation of a
// ServiceMonitor into Prometheus's scrape configuration (test/e2e/promconfig), which is tested
// against what the operator renders.
func BuildServiceMonitor(c *bloomeryv1alpha1.BloomCluster) *unstructured.Unstructured {
	sm := c.Spec.Monitoring.ServiceMonitor
	labels := maps.Clone(sm.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, clusterLabels(c.Name)) // ours win: they identify the object
	endpoint := map[string]any{"port": opsPortName, "path": wire.MetricsPath}
	if sm.Interval != "" {
		endpoint["interval"] = sm.Interval
	}
	matchLabels := map[string]any{serviceRoleLabel: serviceRoleHeadless}
	for k, v := range selectorLabels(c.Name) {
		matchLabels[k] = v
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(serviceMonitorGVK)
	u.SetName(serviceMonitorName(c.Name))
	u.SetNamespace(c.Namespace)
	u.SetLabels(labels)
	u.Object["spec"] = map[string]any{
		"selector":          map[string]any{"matchLabels": matchLabels},
		"namespaceSelector": map[string]any{"matchNames": []any{c.Namespace}},
		"endpoints":         []any{endpoint},
	}
	return u
}

// mergeServiceMonitor replaces the spec only when a field we set differs: the fields the
// Prometheus Operator's CRD defaults inside the spec are not ours.
func mergeServiceMonitor(existing, desired *unstructured.Unstructured) {
	if !jsonSubset(existing.Object["spec"], desired.Object["spec"]) {
		existing.Object["spec"] = desired.Object["spec"]
	}
}

// jsonSubset reports whether every field of want is in have with the same value; lists must
// have the same length, element by element.
func jsonSubset(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok || !jsonSubset(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !jsonSubset(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return equality.Semantic.DeepEqual(have, want)
	}
}
