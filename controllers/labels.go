package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	appName       = "bloomery"
	componentData = "dataplane"
	managerName   = "bloomery-operator"
)

// The data-plane container's ports, by name: the public API, the internal port of the operator
// and the peers, and the ops port of the probes and /metrics.
const (
	httpPortName     = "http"
	internalPortName = "internal"
	opsPortName      = "ops"
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

// clusterPods lists the pods of a cluster's StatefulSet (owned) and, apart, the pods that carry
// the cluster's labels without being pods of its StatefulSet (ignored). Anyone who may create
// pods in the namespace can label one so: such a pod must not become a member, which would
// give it writes and a say in check-and-set, nor be sent the cluster's token.
func clusterPods(ctx context.Context, c client.Reader, cluster *bloomeryv1alpha1.BloomCluster) (owned, ignored []corev1.Pod, err error) {
	return listClusterPods(ctx, c, cluster, client.UnsafeDisableDeepCopyOption(false))
}

// sharedClusterPods is clusterPods with the cache's own objects, not copies, which the caller must
// not change: a BloomFilter's pass reads them, with thousands of filters thousands of times a
// minute, and copying the pods and their StatefulSet was a tenth of the operator's CPU.
func sharedClusterPods(ctx context.Context, c client.Reader, cluster *bloomeryv1alpha1.BloomCluster) (owned, ignored []corev1.Pod, err error) {
	return listClusterPods(ctx, c, cluster, client.UnsafeDisableDeepCopy)
}

func listClusterPods(ctx context.Context, c client.Reader, cluster *bloomeryv1alpha1.BloomCluster,
	shared client.UnsafeDisableDeepCopyOption) (owned, ignored []corev1.Pod, err error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(cluster.Namespace), client.MatchingLabels(selectorLabels(cluster.Name)), shared); err != nil {
		return nil, nil, fmt.Errorf("listing pods of BloomCluster %s: %w", cluster.Name, err)
	}
	var sts appsv1.StatefulSet
	err = c.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: statefulSetName(cluster.Name)}, &sts, shared)
	switch {
	case apierrors.IsNotFound(err):
		return nil, pods.Items, nil // no StatefulSet: no pod is the cluster's
	case err != nil:
		return nil, nil, fmt.Errorf("getting the StatefulSet of BloomCluster %s: %w", cluster.Name, err)
	case !metav1.IsControlledBy(&sts, cluster):
		return nil, pods.Items, nil
	}
	for _, p := range pods.Items {
		if ownedPod(&p, &sts) {
			owned = append(owned, p)
		} else {
			ignored = append(ignored, p)
		}
	}
	return owned, ignored, nil
}

// ownedPod reports whether pod is one the StatefulSet controller made for sts: sts (this very
// object, by UID) is its controller and its name is <sts>-<ordinal>.
func ownedPod(pod *corev1.Pod, sts *appsv1.StatefulSet) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != sts.UID || ref.Kind != "StatefulSet" || ref.APIVersion != appsv1.SchemeGroupVersion.String() {
		return false
	}
	ordinal, ok := strings.CutPrefix(pod.Name, sts.Name+"-")
	n, err := strconv.Atoi(ordinal)
	return ok && err == nil && n >= 0 && strconv.Itoa(n) == ordinal
}

// podAddress is how the operator reaches a pod's internal port: its IP and the container port
// named "internal", with the cluster's token, and its TLS (nil: plain HTTP). ok is false while
// the pod has no IP.
func podAddress(pod *corev1.Pod, token string, tls *ClusterTLS) (Pod, bool) {
	if pod.Status.PodIP == "" {
		return Pod{}, false
	}
	port := bloomeryv1alpha1.InternalPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == internalPortName {
				port = int(p.ContainerPort)
			}
		}
	}
	return Pod{Name: pod.Name, IP: pod.Status.PodIP, Port: port, Token: token, TLS: tls}, true
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
