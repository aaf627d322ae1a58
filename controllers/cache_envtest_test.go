package controllers

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The operator's cache holds only the objects labelled as its own (CacheByObject). A child whose
// label was taken off is outside it: the next pass's create collides, the read past the cache
// finds the child, and the update puts the label back.
func TestChildThatLostItsLabelIsFoundAgain(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, time.Second)
	createBloomCluster(t, ns, "lost", nil)
	cm := waitFor(t, &corev1.ConfigMap{}, ns, "lost-config", exists)
	modify(t, cm, func(cm *corev1.ConfigMap) {
		delete(cm.Labels, labelManagedBy)
		cm.Data[configFileName] = "edited by hand\n"
	})
	waitFor(t, &corev1.ConfigMap{}, ns, "lost-config", func(cm *corev1.ConfigMap) (bool, string) {
		return cm.Labels[labelManagedBy] == managerName && cm.Data[configFileName] != "edited by hand\n",
			fmt.Sprintf("labels %v, config.yaml %q", cm.Labels, cm.Data[configFileName])
	})
	waitClusterCondition(t, ns, "lost", ConditionDegraded, "False/AsExpected", "")
}

// The claims a StatefulSet makes from its claim template carry the template's labels: the cache,
// which lists them to grow the volumes, must select them.
func TestCacheSelectsTheClaimsOfTheClaimTemplate(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	tmpl := buildVolumeClaimTemplate(c)
	for obj, by := range CacheByObject() {
		if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			if by.Label == nil || !by.Label.Matches(labels.Set(tmpl.Labels)) {
				t.Errorf("the cache selects claims by %v, which the claim template's labels %v do not match", by.Label, tmpl.Labels)
			}
			return
		}
	}
	t.Error("the cache has no selector for PersistentVolumeClaims: it would hold every claim of the watched namespaces")
}
