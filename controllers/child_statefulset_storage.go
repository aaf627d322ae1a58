package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// Volumes grow, as the RabbitMQ and Redis operators grow theirs. A StatefulSet's claim template is
// immutable, so a larger spec.storage.size is applied in two moves: each existing claim of the
// StatefulSet is patched to the new size (the storage driver then expands the volume, and the
// filesystem with it), and the StatefulSet is deleted with the orphan propagation policy, which
// leaves its pods and claims running, to be created again with the new template. Its pod template
// is the one it had, so the new StatefulSet adopts the running pods without rolling them.
//
// Growth needs every claim's StorageClass to allow expansion; volumes never shrink. Either refusal
// leaves the claims and the StatefulSet as they are, and makes the cluster Degraded.

// defaultClassAnnotation marks the cluster's default StorageClass.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// buildVolumeClaimTemplate is each pod's data volume. StatefulSet claim templates are immutable:
// the reconciler uses this when it creates the StatefulSet, and again when it makes it anew to
// grow its volumes.
func buildVolumeClaimTemplate(c *bloomeryv1alpha1.BloomCluster) corev1.PersistentVolumeClaim {
	size := wantedStorage(c)
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

// wantedStorage is spec.storage.size, or the CRD's default.
func wantedStorage(c *bloomeryv1alpha1.BloomCluster) resource.Quantity {
	if c.Spec.Storage.Size != nil {
		return c.Spec.Storage.Size.DeepCopy()
	}
	return resource.MustParse("1Gi")
}

func retentionPolicy(p bloomeryv1alpha1.RetentionPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == bloomeryv1alpha1.Delete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

// dataClaimTemplate is the StatefulSet's claim template of the data volume; nil without one.
func dataClaimTemplate(sts *appsv1.StatefulSet) *corev1.PersistentVolumeClaim {
	for i := range sts.Spec.VolumeClaimTemplates {
		if sts.Spec.VolumeClaimTemplates[i].Name == dataVolumeName {
			return &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	return nil
}

func claimRequest(pvc *corev1.PersistentVolumeClaim) resource.Quantity {
	return pvc.Spec.Resources.Requests[corev1.ResourceStorage]
}

// storageNotApplied says how the spec's storage class differs from the StatefulSet's claim
// template. A class is not changed: the claims keep theirs (a size is grown, by growVolumes).
func storageNotApplied(c *bloomeryv1alpha1.BloomCluster, sts *appsv1.StatefulSet) string {
	tmpl := dataClaimTemplate(sts)
	if tmpl == nil {
		return fmt.Sprintf("StatefulSet %s has no %q volume claim template", sts.Name, dataVolumeName)
	}
	want := buildVolumeClaimTemplate(c)
	if c.Spec.Storage.StorageClassName != nil && !equality.Semantic.DeepEqual(tmpl.Spec.StorageClassName, want.Spec.StorageClassName) {
		return fmt.Sprintf("spec.storage.storageClassName is %q but the volumes were created with %q: existing volumes keep their class",
			*want.Spec.StorageClassName, deref(tmpl.Spec.StorageClassName))
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// claimInfo is what planVolumes needs to know of one claim of the StatefulSet.
type claimInfo struct {
	name      string
	requested resource.Quantity
	// bound: the API server takes a new request only of a bound claim. One still pending is
	// provisioned at the size it asks for, and grown by a pass after it binds.
	bound bool
	// class is the claim's StorageClass, resolved to the default one when the claim names none;
	// "" when it has none.
	class string
	// expandable is the class's allowVolumeExpansion; why says why not when it is false and the
	// class does not simply forbid it (no class, or a class that cannot be read).
	expandable bool
	why        string
}

// volumePlan is what a pass does to the volumes.
type volumePlan struct {
	grow     []string // the claims to patch to the wanted size
	recreate bool     // the claim template's size differs: the StatefulSet is made anew
	refusal  *degradation
}

// planVolumes decides how to bring the claims and the template, of size template, to want.
// Nothing shrinks; a bound claim below want is grown only when every such claim's class allows
// it, and the StatefulSet is made anew only when every such claim is grown (or none needs it).
func planVolumes(want, template resource.Quantity, claims []claimInfo) volumePlan {
	if want.Cmp(template) < 0 {
		return volumePlan{refusal: &degradation{ReasonVolumeShrinkRefused, fmt.Sprintf(
			"spec.storage.size is %s but the volumes were created with %s: volumes cannot shrink, "+
				"so the volumes and the StatefulSet are left as they are (set the size back to %s or more)",
			want.String(), template.String(), template.String())}}
	}
	var plan volumePlan
	var refused []string
	for _, c := range claims {
		if c.requested.Cmp(want) >= 0 || !c.bound {
			continue
		}
		if !c.expandable {
			why := c.why
			if why == "" {
				why = fmt.Sprintf("StorageClass %q does not allow volume expansion", c.class)
			}
			refused = append(refused, fmt.Sprintf("%s (%s): %s", c.name, c.requested.String(), why))
			continue
		}
		plan.grow = append(plan.grow, c.name)
	}
	if len(refused) > 0 {
		return volumePlan{refusal: &degradation{ReasonVolumeExpansionNotAllowed, fmt.Sprintf(
			"spec.storage.size is %s but %d of %d volumes cannot grow from their size: %s. "+
				"The volumes and the StatefulSet are left as they are (a StorageClass must set allowVolumeExpansion: true)",
			want.String(), len(refused), len(claims), strings.Join(refused, "; "))}}
	}
	plan.recreate = want.Cmp(template) != 0
	return plan
}

// dataClaims lists the claims the StatefulSet made for its pods, of any ordinal (those of pods
// removed by a scale-down too, which a scale-up mounts again): data-<statefulset>-<ordinal>.
func (r *BloomClusterReconciler) dataClaims(ctx context.Context, c *bloomeryv1alpha1.BloomCluster) ([]corev1.PersistentVolumeClaim, error) {
	var list corev1.PersistentVolumeClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c.Name))); err != nil {
		return nil, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	prefix := dataVolumeName + "-" + statefulSetName(c.Name) + "-"
	var claims []corev1.PersistentVolumeClaim
	for _, pvc := range list.Items {
		ordinal, ok := strings.CutPrefix(pvc.Name, prefix)
		if _, err := strconv.ParseUint(ordinal, 10, 32); ok && err == nil {
			claims = append(claims, pvc)
		}
	}
	slices.SortFunc(claims, func(a, b corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	return claims, nil
}

// classes reads StorageClasses past the cache (they are few, and read only when volumes grow):
// by name, and the default one for claims that name none.
type classes struct {
	r       client.Reader
	byName  map[string]*storagev1.StorageClass
	errs    map[string]error
	dflt    *string
	dfltErr error
}

func (cs *classes) get(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	if sc, ok := cs.byName[name]; ok {
		return sc, cs.errs[name]
	}
	var sc storagev1.StorageClass
	err := cs.r.Get(ctx, client.ObjectKey{Name: name}, &sc)
	cs.byName[name], cs.errs[name] = &sc, err
	return &sc, err
}

// defaultClass names the cluster's default StorageClass: the newest of those annotated as
// default, as the API server's admission picks it; "" when there is none.
func defaultClass(list []storagev1.StorageClass) string {
	var best *storagev1.StorageClass
	for i := range list {
		sc := &list[i]
		if sc.Annotations[defaultClassAnnotation] != "true" {
			continue
		}
		if best == nil || sc.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(sc.CreationTimestamp.Equal(&best.CreationTimestamp) && sc.Name < best.Name) {
			best = sc
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

func (cs *classes) defaultName(ctx context.Context) (string, error) {
	if cs.dflt == nil {
		var list storagev1.StorageClassList
		cs.dfltErr = cs.r.List(ctx, &list)
		cs.dflt = new(defaultClass(list.Items))
	}
	return *cs.dflt, cs.dfltErr
}

// info resolves what planVolumes needs of a claim.
func (cs *classes) info(ctx context.Context, pvc *corev1.PersistentVolumeClaim) claimInfo {
	ci := claimInfo{name: pvc.Name, requested: claimRequest(pvc)}
	name := pvc.Spec.StorageClassName
	if name == nil {
		dflt, err := cs.defaultName(ctx)
		switch {
		case err != nil:
			ci.why = "its StorageClass is the default one, and the StorageClasses cannot be listed: " + err.Error()
			return ci
		case dflt == "":
			ci.why = "it names no StorageClass and the cluster has no default one"
			return ci
		}
		name = &dflt
	}
	ci.class = *name
	if ci.class == "" {
		ci.why = "it has no StorageClass (storageClassName is empty)"
		return ci
	}
	sc, err := cs.get(ctx, ci.class)
	switch {
	case apierrors.IsNotFound(err):
		ci.why = fmt.Sprintf("StorageClass %q does not exist", ci.class)
	case err != nil:
		ci.why = fmt.Sprintf("StorageClass %q cannot be read: %v", ci.class, err)
	default:
		ci.expandable = sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
	}
	return ci
}

// growVolumes brings the volumes to spec.storage.size when the StatefulSet's claim template has
// another size. It returns true when it deleted the StatefulSet (orphaning its pods), which the
// next pass makes anew.
func (r *BloomClusterReconciler) growVolumes(ctx context.Context, st *clusterState, sts *appsv1.StatefulSet) (bool, error) {
	c := st.cluster
	tmpl := dataClaimTemplate(sts)
	if tmpl == nil {
		return false, nil
	}
	want, template := wantedStorage(c), claimRequest(tmpl)
	pvcs, err := r.dataClaims(ctx, c)
	if err != nil {
		return false, err
	}
	// A claim to grow: the template's size changed, or a claim was still pending when it did.
	toGrow := func(pvc *corev1.PersistentVolumeClaim) bool {
		requested := claimRequest(pvc)
		return pvc.Status.Phase == corev1.ClaimBound && requested.Cmp(want) < 0
	}
	if want.Cmp(template) == 0 && !slices.ContainsFunc(pvcs, func(pvc corev1.PersistentVolumeClaim) bool { return toGrow(&pvc) }) {
		return false, nil
	}
	cs := &classes{r: r.apiReader(), byName: map[string]*storagev1.StorageClass{}, errs: map[string]error{}}
	infos := make([]claimInfo, len(pvcs))
	for i := range pvcs {
		if toGrow(&pvcs[i]) { // a class is read only for a claim to grow
			infos[i] = cs.info(ctx, &pvcs[i])
			infos[i].bound = true
		} else {
			infos[i] = claimInfo{name: pvcs[i].Name, requested: claimRequest(&pvcs[i])}
		}
	}
	plan := planVolumes(want, template, infos)
	if plan.refusal != nil {
		st.notApplied = append(st.notApplied, *plan.refusal)
		r.event(c, sts, corev1.EventTypeWarning, plan.refusal.reason, "GrowVolumes", "%s", plan.refusal.message)
		return false, nil
	}
	for i := range pvcs {
		if !slices.Contains(plan.grow, pvcs[i].Name) {
			continue
		}
		pvc := &pvcs[i]
		patch := client.MergeFromWithOptions(pvc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		from := claimRequest(pvc)
		pvc.Spec.Resources.Requests = pvc.Spec.Resources.Requests.DeepCopy()
		if pvc.Spec.Resources.Requests == nil {
			pvc.Spec.Resources.Requests = corev1.ResourceList{}
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			if !apierrors.IsConflict(err) {
				r.event(c, pvc, corev1.EventTypeWarning, "UpdateFailed", "Update",
					"Growing PersistentVolumeClaim %s to %s failed: %v", pvc.Name, want.String(), err)
			}
			return false, fmt.Errorf("growing PersistentVolumeClaim %s: %w", pvc.Name, err)
		}
		log.FromContext(ctx).Info("Grew PersistentVolumeClaim of BloomCluster", "name", pvc.Name, "from", from.String(), "to", want.String())
		r.event(c, pvc, corev1.EventTypeNormal, "VolumeGrown", "Update", "Grew PersistentVolumeClaim %s from %s to %s", pvc.Name, from.String(), want.String())
		st.grownClaims = pvcs
	}
	if !plan.recreate {
		return false, nil
	}
	// The pod template, with the labels and annotations others added to it (`kubectl rollout
	// restart`), is kept for the StatefulSet made anew: the same template adopts the pods as they run.
	r.orphanedTemplates.Store(c.UID, sts.Spec.Template.DeepCopy())
	// Orphan: the pods, their claims and the revisions stay; the StatefulSet made anew adopts them.
	// The preconditions delete only the StatefulSet this pass read and updated.
	err = r.Client.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationOrphan),
		client.Preconditions{UID: new(sts.UID), ResourceVersion: new(sts.ResourceVersion)})
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			r.event(c, sts, corev1.EventTypeWarning, "DeleteFailed", "Delete", "Deleting StatefulSet %s (orphaning its pods) failed: %v", sts.Name, err)
		}
		return false, fmt.Errorf("deleting StatefulSet %s to change its volume claim template: %w", sts.Name, err)
	}
	log.FromContext(ctx).Info("Deleted StatefulSet of BloomCluster, orphaning its pods, to make it anew", "name", sts.Name, "size", want.String())
	r.event(c, sts, corev1.EventTypeNormal, "Deleted", "Delete",
		"Deleted StatefulSet %s, orphaning its pods, to make it anew with volumes of %s", sts.Name, want.String())
	return true, nil
}

// resizing counts the bound claims whose capacity is still below their request: the storage
// driver, or the kubelet for the filesystem, has not finished growing them.
func resizing(pvcs []corev1.PersistentVolumeClaim) (n int) {
	for i := range pvcs {
		pvc := &pvcs[i]
		if pvc.Status.Phase != corev1.ClaimBound {
			continue
		}
		capacity, requested := pvc.Status.Capacity[corev1.ResourceStorage], claimRequest(pvc)
		if capacity.Cmp(requested) < 0 {
			n++
		}
	}
	return n
}

// reportResizing sets the VolumesResizing condition from the claims.
func (r *BloomClusterReconciler) reportResizing(ctx context.Context, st *clusterState) error {
	c := st.cluster
	pvcs := st.grownClaims
	if pvcs == nil {
		var err error
		if pvcs, err = r.dataClaims(ctx, c); err != nil {
			return err
		}
	}
	n := resizing(pvcs)
	if n == 0 {
		// No condition for a cluster whose volumes never grew.
		if cond := meta.FindStatusCondition(c.Status.Conditions, ConditionVolumesResizing); cond != nil {
			setCondition(&c.Status.Conditions, c.Generation, ConditionVolumesResizing, metav1.ConditionFalse, ReasonVolumesAtSize,
				"Every volume has the capacity it requests")
		}
		return nil
	}
	setCondition(&c.Status.Conditions, c.Generation, ConditionVolumesResizing, metav1.ConditionTrue, ReasonVolumesResizing,
		fmt.Sprintf("%d of %d volumes are growing to the size they request", n, len(pvcs)))
	return nil
}
