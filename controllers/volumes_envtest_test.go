package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

func gi(s string) resource.Quantity { return resource.MustParse(s) }

func TestPlanVolumes(t *testing.T) {
	t.Parallel()
	grown := func(name, size string) claimInfo {
		return claimInfo{name: name, requested: gi(size), bound: true, class: "fast", expandable: true}
	}
	fixed := func(name, size string) claimInfo {
		return claimInfo{name: name, requested: gi(size), bound: true, class: "slow"}
	}
	pending := func(name, size string) claimInfo { return claimInfo{name: name, requested: gi(size)} }
	for _, c := range []struct {
		name           string
		want, template string
		claims         []claimInfo
		grow           []string
		recreate       bool
		refusal        string // reason
		message        []string
	}{
		{name: "no change", want: "1Gi", template: "1Gi", claims: []claimInfo{grown("data-c-0", "1Gi")}},
		{name: "growth", want: "3Gi", template: "1Gi", claims: []claimInfo{grown("data-c-0", "1Gi"), grown("data-c-1", "1Gi")},
			grow: []string{"data-c-0", "data-c-1"}, recreate: true},
		{name: "no claims yet", want: "3Gi", template: "1Gi", recreate: true},
		{name: "a claim already grown by hand", want: "3Gi", template: "1Gi",
			claims: []claimInfo{fixed("data-c-0", "5Gi"), grown("data-c-1", "1Gi")}, grow: []string{"data-c-1"}, recreate: true},
		{name: "template made anew, a claim left to grow", want: "3Gi", template: "3Gi",
			claims: []claimInfo{grown("data-c-0", "3Gi"), grown("data-c-1", "1Gi")}, grow: []string{"data-c-1"}},
		{name: "class without expansion", want: "3Gi", template: "1Gi", claims: []claimInfo{grown("data-c-0", "1Gi"), fixed("data-c-1", "1Gi")},
			refusal: ReasonVolumeExpansionNotAllowed,
			message: []string{"spec.storage.size is 3Gi", "1 of 2 volumes", `data-c-1 (1Gi): StorageClass "slow" does not allow volume expansion`}},
		{name: "a pending claim, grown once bound", want: "3Gi", template: "1Gi", claims: []claimInfo{grown("data-c-0", "1Gi"), pending("data-c-1", "1Gi")},
			grow: []string{"data-c-0"}, recreate: true},
		{name: "no class", want: "3Gi", template: "1Gi", claims: []claimInfo{{name: "data-c-0", requested: gi("1Gi"), bound: true, why: "it has no StorageClass"}},
			refusal: ReasonVolumeExpansionNotAllowed, message: []string{"data-c-0 (1Gi): it has no StorageClass"}},
		{name: "shrink", want: "1Gi", template: "2Gi", claims: []claimInfo{grown("data-c-0", "2Gi")},
			refusal: ReasonVolumeShrinkRefused, message: []string{"spec.storage.size is 1Gi but the volumes were created with 2Gi", "cannot shrink"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planVolumes(gi(c.want), gi(c.template), c.claims)
			if c.refusal != "" {
				if plan.refusal == nil || plan.refusal.reason != c.refusal {
					t.Fatalf("plan %+v, want the refusal %s", plan, c.refusal)
				}
				for _, m := range c.message {
					if !strings.Contains(plan.refusal.message, m) {
						t.Errorf("message %q lacks %q", plan.refusal.message, m)
					}
				}
				if len(plan.grow) != 0 || plan.recreate {
					t.Errorf("a refusal grows %v and recreates %v, want nothing", plan.grow, plan.recreate)
				}
				return
			}
			if plan.refusal != nil || !slices.Equal(plan.grow, c.grow) || plan.recreate != c.recreate {
				t.Errorf("plan grows %v, recreates %v, refuses %+v; want %v, %v, nothing", plan.grow, plan.recreate, plan.refusal, c.grow, c.recreate)
			}
		})
	}
}

func TestDefaultClass(t *testing.T) {
	t.Parallel()
	class := func(name string, dflt bool, age time.Duration) storagev1.StorageClass {
		sc := storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))}}
		if dflt {
			sc.Annotations = map[string]string{defaultClassAnnotation: "true"}
		}
		return sc
	}
	for want, list := range map[string][]storagev1.StorageClass{
		"":         {class("a", false, 0)},
		"standard": {class("a", false, 0), class("standard", true, time.Hour)},
		"newer":    {class("older", true, time.Hour), class("newer", true, time.Minute), class("plain", false, 0)},
	} {
		if got := defaultClass(list); got != want {
			t.Errorf("defaultClass = %q, want %q", got, want)
		}
	}
}

func TestResizingCountsBoundClaimsBelowTheirRequest(t *testing.T) {
	t.Parallel()
	claim := func(phase corev1.PersistentVolumeClaimPhase, requested, capacity string) corev1.PersistentVolumeClaim {
		pvc := corev1.PersistentVolumeClaim{
			Spec:   corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: gi(requested)}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
		}
		if capacity != "" {
			pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: gi(capacity)}
		}
		return pvc
	}
	pvcs := []corev1.PersistentVolumeClaim{
		claim(corev1.ClaimBound, "3Gi", "1Gi"),    // growing
		claim(corev1.ClaimBound, "3Gi", "3Gi"),    // grown
		claim(corev1.ClaimBound, "3Gi", "4Gi"),    // the driver rounded up
		claim(corev1.ClaimPending, "3Gi", ""),     // not provisioned yet
		claim(corev1.ClaimBound, "3000Mi", "3Gi"), // another unit
	}
	if n := resizing(pvcs); n != 1 {
		t.Errorf("resizing = %d, want 1", n)
	}
}

// createStorageClass makes a StorageClass of the test's own (they are cluster-wide).
func createStorageClass(t *testing.T, name string, expandable bool) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/csi", AllowVolumeExpansion: new(expandable)}
	if err := k8s.Create(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(t.Context(), sc) })
}

// createClaim makes a claim as the StatefulSet controller would from its template, pending until a
// provisioner binds it (setClaimCapacity).
func createClaim(t *testing.T, ns, name, cluster, size, class string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: clusterLabels(cluster)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: gi(size)}},
			StorageClassName: &class,
			VolumeName:       "pv-" + ns + "-" + name,
		},
	}
	if err := k8s.Create(t.Context(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// setClaimCapacity plays the provisioner, the storage driver and the kubelet: the claim is bound,
// with the capacity size.
func setClaimCapacity(t *testing.T, ns, name, size string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pvc corev1.PersistentVolumeClaim
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
			return err
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: gi(size)}
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		return k8s.Status().Update(t.Context(), &pvc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func claimSize(pvc *corev1.PersistentVolumeClaim) string {
	q := claimRequest(pvc)
	return q.String()
}

func templateSize(sts *appsv1.StatefulSet) string {
	if tmpl := dataClaimTemplate(sts); tmpl != nil {
		q := claimRequest(tmpl)
		return q.String()
	}
	return "none"
}

// playGarbageCollector does what the garbage collector does with a StatefulSet deleted with the
// orphan policy: it takes the owner reference off its pods, then its finalizer off it.
func playGarbageCollector(t *testing.T, ns, name string) {
	t.Helper()
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, name, func(s *appsv1.StatefulSet) (bool, string) {
		return !s.DeletionTimestamp.IsZero(), "not deleted"
	})
	var pods corev1.PodList
	if err := k8s.List(t.Context(), &pods); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Namespace == ns && metav1.IsControlledBy(pod, sts) {
			modify(t, pod, func(p *corev1.Pod) { p.OwnerReferences = nil })
		}
	}
	modify(t, sts, func(s *appsv1.StatefulSet) { controllerutil.RemoveFinalizer(s, metav1.FinalizerOrphanDependents) })
}

// A larger size grows each claim whose class allows it, and the StatefulSet is made anew with the
// new claim template and the very pod template it had, so that it adopts its pods without a roll.
func TestVolumesGrowWhenTheirClassAllowsIt(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	class := ns + "-expandable"
	createStorageClass(t, class, true)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "grow", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(2))
		c.Spec.Storage.StorageClassName = &class
	})
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "grow", exists)
	modify(t, sts, func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-01-01T00:00:00Z"
	})
	for i := range 2 {
		createClaim(t, ns, fmt.Sprintf("data-grow-%d", i), "grow", "1Gi", class)
		setClaimCapacity(t, ns, fmt.Sprintf("data-grow-%d", i), "1Gi")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("grow-%d", i), Namespace: ns, Labels: selectorLabels("grow"),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: testImage}}},
		}
		if err := k8s.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	// The claim of a third pod, not bound yet: the API server takes no new request of it.
	createClaim(t, ns, "data-grow-2", "grow", "1Gi", class)
	before := waitFor(t, &appsv1.StatefulSet{}, ns, "grow", exists)
	waitClusterCondition(t, ns, "grow", ConditionDegraded, "False/AsExpected", "")

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(gi("3Gi")) })
	for i := range 2 {
		waitFor(t, &corev1.PersistentVolumeClaim{}, ns, fmt.Sprintf("data-grow-%d", i), func(pvc *corev1.PersistentVolumeClaim) (bool, string) {
			return claimSize(pvc) == "3Gi", "requests " + claimSize(pvc)
		})
	}
	playGarbageCollector(t, ns, "grow")
	after := waitFor(t, &appsv1.StatefulSet{}, ns, "grow", func(s *appsv1.StatefulSet) (bool, string) {
		return s.UID != before.UID && templateSize(s) == "3Gi", fmt.Sprintf("uid %s, template size %s", s.UID, templateSize(s))
	})
	checkOwnedBy(t, after, cluster)
	if !equality.Semantic.DeepEqual(after.Spec.Template, before.Spec.Template) {
		t.Errorf("the pod template changed when the StatefulSet was made anew, which rolls the pods:\nbefore %+v\nafter  %+v",
			before.Spec.Template, after.Spec.Template)
	}
	if !equality.Semantic.DeepEqual(after.Spec.Selector, before.Spec.Selector) || after.Spec.ServiceName != before.Spec.ServiceName {
		t.Errorf("selector %v and service %q, want the former %v and %q", after.Spec.Selector, after.Spec.ServiceName, before.Spec.Selector, before.Spec.ServiceName)
	}
	for i := range 2 { // the orphaned pods run on, for the new StatefulSet to adopt
		waitFor(t, &corev1.Pod{}, ns, fmt.Sprintf("grow-%d", i), func(p *corev1.Pod) (bool, string) {
			return p.DeletionTimestamp.IsZero(), "pod deleted"
		})
	}

	waitClusterCondition(t, ns, "grow", ConditionVolumesResizing, "True/"+ReasonVolumesResizing, "2 of 3 volumes")
	if pvc := waitFor(t, &corev1.PersistentVolumeClaim{}, ns, "data-grow-2", exists); claimSize(pvc) != "1Gi" {
		t.Errorf("the pending claim requests %s, want the 1Gi it asked for", claimSize(pvc))
	}
	// It binds at its size, and is grown in turn.
	setClaimCapacity(t, ns, "data-grow-2", "1Gi")
	waitFor(t, &corev1.PersistentVolumeClaim{}, ns, "data-grow-2", func(pvc *corev1.PersistentVolumeClaim) (bool, string) {
		return claimSize(pvc) == "3Gi", "requests " + claimSize(pvc)
	})
	waitClusterCondition(t, ns, "grow", ConditionVolumesResizing, "True/"+ReasonVolumesResizing, "3 of 3 volumes")

	// The driver grows one volume after the other.
	for i, left := range []string{"2 of 3", "1 of 3"} {
		setClaimCapacity(t, ns, fmt.Sprintf("data-grow-%d", i), "3Gi")
		waitClusterCondition(t, ns, "grow", ConditionVolumesResizing, "True/"+ReasonVolumesResizing, left+" volumes")
	}
	setClaimCapacity(t, ns, "data-grow-2", "3Gi")
	waitClusterCondition(t, ns, "grow", ConditionVolumesResizing, "False/"+ReasonVolumesAtSize, "")
	waitClusterCondition(t, ns, "grow", ConditionDegraded, "False/AsExpected", "")
}

// A class without expansion, or a smaller size, leaves the claims and the StatefulSet as they are,
// and says why.
func TestVolumesThatCannotChangeAreLeftAsTheyAre(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	class := ns + "-fixed"
	createStorageClass(t, class, false)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "fixed", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Storage.StorageClassName = &class
		c.Spec.Storage.Size = new(gi("2Gi"))
	})
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "fixed", exists)
	createClaim(t, ns, "data-fixed-0", "fixed", "2Gi", class)
	setClaimCapacity(t, ns, "data-fixed-0", "2Gi")
	waitClusterCondition(t, ns, "fixed", ConditionDegraded, "False/AsExpected", "")

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(gi("5Gi")) })
	waitClusterCondition(t, ns, "fixed", ConditionDegraded, "True/"+ReasonVolumeExpansionNotAllowed,
		fmt.Sprintf(`spec.storage.size is 5Gi but 1 of 1 volumes cannot grow from their size: data-fixed-0 (2Gi): StorageClass %q does not allow volume expansion`, class))
	waitEvent(t, ns, "fixed", ReasonVolumeExpansionNotAllowed, class)
	checkVolumesUntouched(t, ns, "fixed", sts.UID, "2Gi")

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(gi("1Gi")) })
	waitClusterCondition(t, ns, "fixed", ConditionDegraded, "True/"+ReasonVolumeShrinkRefused,
		"spec.storage.size is 1Gi but the volumes were created with 2Gi: volumes cannot shrink")
	waitEvent(t, ns, "fixed", ReasonVolumeShrinkRefused, "2Gi")
	checkVolumesUntouched(t, ns, "fixed", sts.UID, "2Gi")

	if c := waitClusterCondition(t, ns, "fixed", ConditionDegraded, "True/"+ReasonVolumeShrinkRefused, ""); clusterCondition(c, ConditionVolumesResizing) != "no VolumesResizing condition" {
		t.Errorf("VolumesResizing of a cluster whose volumes never grew: %s", clusterCondition(c, ConditionVolumesResizing))
	}
}

// checkVolumesUntouched checks, a few passes later, that the StatefulSet and its claim are the ones
// the cluster had.
func checkVolumesUntouched(t *testing.T, ns, cluster string, uid types.UID, size string) {
	t.Helper()
	time.Sleep(time.Second)
	var sts appsv1.StatefulSet
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: cluster}, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.UID != uid || !sts.DeletionTimestamp.IsZero() || templateSize(&sts) != size {
		t.Errorf("StatefulSet uid %s (was %s), deleted %v, template size %s; want it untouched with %s",
			sts.UID, uid, !sts.DeletionTimestamp.IsZero(), templateSize(&sts), size)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "data-" + cluster + "-0"}, &pvc); err != nil {
		t.Fatal(err)
	}
	if claimSize(&pvc) != size {
		t.Errorf("claim requests %s, want the %s it had", claimSize(&pvc), size)
	}
}

// A volume that the storage driver grows at once, before the operator's cache shows the larger
// request, is still reported: it was grown, so the cluster says when it reached its size.
func TestVolumesGrownAtOnceAreReportedAtSize(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	class := ns + "-expandable"
	createStorageClass(t, class, true)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "quick", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(1))
		c.Spec.Storage.StorageClassName = &class
	})
	waitFor(t, &appsv1.StatefulSet{}, ns, "quick", exists)
	createClaim(t, ns, "data-quick-0", "quick", "1Gi", class)
	setClaimCapacity(t, ns, "data-quick-0", "1Gi")
	waitClusterCondition(t, ns, "quick", ConditionDegraded, "False/AsExpected", "")

	// The driver: every claim's capacity follows its request as soon as it is seen.
	driver, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		for driver.Err() == nil {
			var pvc corev1.PersistentVolumeClaim
			if err := k8s.Get(driver, types.NamespacedName{Namespace: ns, Name: "data-quick-0"}, &pvc); err == nil {
				if want, have := claimRequest(&pvc), pvc.Status.Capacity[corev1.ResourceStorage]; want.Cmp(have) > 0 {
					pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
					_ = k8s.Status().Update(driver, &pvc) // a conflict is tried again on the next turn
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(gi("2Gi")) })
	playGarbageCollector(t, ns, "quick")
	waitClusterCondition(t, ns, "quick", ConditionVolumesResizing, "False/"+ReasonVolumesAtSize, "")
}
