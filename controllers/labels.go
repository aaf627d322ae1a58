package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// Labels every child object of a BloomCluster carries; the selector of its pods is
// selectorLabels.
const (
	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
	labelManagedBy = "app.kubernetes.io/managed-by"

	appName        = "bloomery"
	componentData  = "dataplane"
	managerName    = "bloomery-operator"
	httpPortName   = "http"
	defaultAPIPort = bloomeryv1alpha1.APIPort
)

// selectorLabels select the pods of one cluster. They are part of the StatefulSet's immutable
// selector: never change them.
func selectorLabels(cluster string) map[string]string {
	return map[string]string{labelName: appName, labelInstance: cluster, labelComponent: componentData}
}

// clusterLabels are the labels of every object made for a cluster.
func clusterLabels(cluster string) map[string]string {
	l := selectorLabels(cluster)
	l[labelManagedBy] = managerName
	return l
}

// clusterOfPod names the BloomCluster a data-plane pod belongs to: the StatefulSet labels its pods
// with the cluster's name. ok is false for any other pod.
func clusterOfPod(pod client.Object) (cluster types.NamespacedName, ok bool) {
	l := pod.GetLabels()
	if l[labelName] != appName || l[labelComponent] != componentData || l[labelInstance] == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: pod.GetNamespace(), Name: l[labelInstance]}, true
}

// clusterRefIndex indexes BloomFilters by the BloomCluster they name.
const clusterRefIndex = "spec.clusterRef.name"

// IndexFields registers the field indexes the reconcilers query.
func IndexFields(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &bloomeryv1alpha1.BloomFilter{}, clusterRefIndex, func(o client.Object) []string {
		return []string{o.(*bloomeryv1alpha1.BloomFilter).Spec.ClusterRef.Name}
	})
	if err != nil {
		return fmt.Errorf("indexing BloomFilters by cluster: %w", err)
	}
	return nil
}

// clusterPods lists the pods of a cluster.
func clusterPods(ctx context.Context, c client.Reader, namespace, cluster string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels(selectorLabels(cluster))); err != nil {
		return nil, fmt.Errorf("listing pods of BloomCluster %s: %w", cluster, err)
	}
	return pods.Items, nil
}

// podAddress is how the operator reaches a pod's API: its IP and the container port named
// "http". ok is false while the pod has no IP.
func podAddress(pod *corev1.Pod) (Pod, bool) {
	if pod.Status.PodIP == "" {
		return Pod{}, false
	}
	port := defaultAPIPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == httpPortName {
				port = int(p.ContainerPort)
			}
		}
	}
	return Pod{Name: pod.Name, IP: pod.Status.PodIP, Port: port}, true
}

// podReady reports the pod's Ready condition: the data plane recovered and serves.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
