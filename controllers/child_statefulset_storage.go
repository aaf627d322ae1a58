package controllers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The StatefulSet's volume claim template is immutable: it is built once, with the StatefulSet,
// and a spec that asks for other volumes later is reported, not applied.

// buildVolumeClaimTemplate is each pod's data volume. StatefulSet claim templates are immutable:
// the reconciler uses this only when it creates the StatefulSet.
func buildVolumeClaimTemplate(c *bloomeryv1alpha1.BloomCluster) corev1.PersistentVolumeClaim {
	size := resource.MustParse("1Gi")
	if c.Spec.Storage.Size != nil {
		size = c.Spec.Storage.Size.DeepCopy()
	}
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: dataVolumeName, Labels: clusterLabels(c.Name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: c.Spec.Storage.StorageClassName,
			VolumeMode:       new(corev1.PersistentVolumeFilesystem),
		},
	}
}

func retentionPolicy(p bloomeryv1alpha1.RetentionPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == bloomeryv1alpha1.Delete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

// storageNotApplied says how the spec's storage differs from the StatefulSet's claim template,
// which is immutable. Resizing the volumes (the orphan-delete-and-recreate of the StatefulSet
// plus a resize of each claim, as RabbitMQ's operator does) is not implemented yet.
func storageNotApplied(c *bloomeryv1alpha1.BloomCluster, sts *appsv1.StatefulSet) string {
	var tmpl *corev1.PersistentVolumeClaim
	for i := range sts.Spec.VolumeClaimTemplates {
		if sts.Spec.VolumeClaimTemplates[i].Name == dataVolumeName {
			tmpl = &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	if tmpl == nil {
		return fmt.Sprintf("StatefulSet %s has no %q volume claim template", sts.Name, dataVolumeName)
	}
	want := buildVolumeClaimTemplate(c)
	var diffs []string
	have, wantSize := tmpl.Spec.Resources.Requests[corev1.ResourceStorage], want.Spec.Resources.Requests[corev1.ResourceStorage]
	if have.Cmp(wantSize) != 0 {
		diffs = append(diffs, fmt.Sprintf("spec.storage.size is %s but the volumes were created with %s", wantSize.String(), have.String()))
	}
	if c.Spec.Storage.StorageClassName != nil && !equality.Semantic.DeepEqual(tmpl.Spec.StorageClassName, want.Spec.StorageClassName) {
		diffs = append(diffs, fmt.Sprintf("spec.storage.storageClassName is %q but the volumes were created with %q",
			*want.Spec.StorageClassName, deref(tmpl.Spec.StorageClassName)))
	}
	if len(diffs) == 0 {
		return ""
	}
	return strings.Join(diffs, "; ") + ": existing volumes are not changed (resizing is not supported yet)"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
