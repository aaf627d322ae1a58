package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions are the operator's cache, with namespaces its default ones (none: every namespace):
// CacheByObject's limits, and no object's managedFields, which the operator never reads and which
// made up much of a cached BloomFilter, thousands of them at scale.
func CacheOptions(namespaces ...string) cache.Options {
	opts := cache.Options{ByObject: CacheByObject(), DefaultTransform: cache.TransformStripManagedFields()}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// CacheByObject limits the operator's cache, for each kind it makes or reads in the users'
// namespaces, to the objects labelled as managed by it: every child of a BloomCluster. Pods are
// cached by the name label that a cluster's selector carries, so that a pod made to look like a
// cluster's, which is never a member, is still seen and counted in status.ignoredPods. Caching
// every ConfigMap, Service or Pod of the cluster would cost memory, and hold objects the operator
// has no business with. A child that lost the label is invisible to the reconcilers' reads: ensureChild finds it
// again when its create collides. ServiceMonitors are not cached at all: they are unstructured,
// and the client reads those from the API server; nor are StorageClasses, read past the cache by
// name only when volumes grow.
func CacheByObject() map[client.Object]cache.ByObject {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{labelManagedBy: managerName})}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:             managed,
		&corev1.Service{}:               managed,
		&appsv1.StatefulSet{}:           managed,
		&policyv1.PodDisruptionBudget{}: managed,
		&networkingv1.NetworkPolicy{}:   managed,
		&corev1.ServiceAccount{}:        managed,
		&rbacv1.Role{}:                  managed,
		&rbacv1.RoleBinding{}:           managed,
		&coordinationv1.Lease{}:         managed,
		// The claims a StatefulSet makes for its pods carry its claim template's labels.
		&corev1.PersistentVolumeClaim{}: managed,
		&corev1.Pod{}:                   {Label: labels.SelectorFromSet(labels.Set{labelName: appName})},
		// Only the operator's own Secrets, the internal tokens: it keeps no copy of others.
		&corev1.Secret{}: {Label: TokenSecretSelector()},
	}
}
