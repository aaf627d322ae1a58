package controllers

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
