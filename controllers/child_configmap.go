package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The data plane's configuration file, mounted into every pod.
const (
	configFileName  = "config.yaml"
	configMountPath = "/etc/bloomery"
	configVolume    = "config"
)

func configMapName(cluster string) string { return cluster + "-config" }

func (r *BloomClusterReconciler) reconcileConfigMap(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	// A pod that restarts must not read a configuration that cannot fit, nor one that names a
	// password file it has no Secret for.
	if st.limitsRefused || st.respRefused {
		return ctrl.Result{}, nil
	}
	configYAML, err := dataPlaneConfig(st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.configHash = configHash(configYAML)
	_, err = ensureChild(ctx, r, st.cluster, buildConfigMap(st.cluster, configYAML), &corev1.ConfigMap{}, mergeConfigMap)
	return ctrl.Result{}, err
}

// buildConfigMap is the data plane's configuration file, mounted at /etc/bloomery.
func buildConfigMap(c *bloomeryv1alpha1.BloomCluster, configYAML string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: childMeta(c, configMapName(c.Name)),
		Data:       map[string]string{configFileName: configYAML},
	}
}

// mergeConfigMap owns the whole content: anything else in it would be a file the pods never read.
func mergeConfigMap(existing, desired *corev1.ConfigMap) {
	existing.Data = desired.Data
	existing.BinaryData = nil
}
