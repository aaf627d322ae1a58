package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"

	"github.com/bloomery/bloomery/internal/await"
)

// envtest runs no StatefulSet controller and no garbage collector: the tests check the objects
// the reconciler writes, set StatefulSet status themselves, and check owner references rather
// than cascading deletion.

const testImage = "registry.example/bloomery:v1"

// startClusterReconciler runs only the BloomCluster reconciler, in namespace ns.
func startClusterReconciler(t *testing.T, ns string, resync time.Duration) *writeCounter {
	t.Helper()
	return startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomClusterReconciler{
			Client:       mgr.GetClient(),
			Scheme:       mgr.GetScheme(),
			Recorder:     mgr.GetEventRecorder("bloomcluster"),
			DefaultImage: testImage,
			Resync:       resync,
		}).SetupWithManager(mgr)
	})
}

func createBloomCluster(t *testing.T, ns, name string, mutate func(*bloomeryv1alpha1.BloomCluster)) *bloomeryv1alpha1.BloomCluster {
	t.Helper()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if mutate != nil {
		mutate(c)
	}
	if err := k8s.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// modify reads obj afresh, applies mutate and writes it, retrying on conflicts with the reconciler.
func modify[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return k8s.Update(t.Context(), obj)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", obj.GetName(), err)
	}
}

// setStatefulSetStatus plays the StatefulSet controller.
func setStatefulSetStatus(t *testing.T, ns, name string, mutate func(*appsv1.StatefulSet)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sts appsv1.StatefulSet
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &sts); err != nil {
			return err
		}
		mutate(&sts)
		return k8s.Status().Update(t.Context(), &sts)
	})
	if err != nil {
		t.Fatalf("updating the status of StatefulSet %s: %v", name, err)
	}
}

// waitFor polls the object named ns/name into obj until check passes.
func waitFor[T client.Object](t *testing.T, obj T, ns, name string, check func(T) (bool, string)) T {
	t.Helper()
	what := fmt.Sprintf("%T %s/%s", obj, ns, name)
	await.Until(t, 20*time.Second, what, func() (bool, string) {
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
			return false, err.Error()
		}
		return check(obj)
	})
	return obj
}

func exists[T client.Object](T) (bool, string) { return true, "" }

// clusterCondition is "Status/Reason: message", for matching and for failure messages.
func clusterCondition(c *bloomeryv1alpha1.BloomCluster, typ string) string {
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond == nil {
		return "no " + typ + " condition"
	}
	if cond.ObservedGeneration != c.Generation {
		return fmt.Sprintf("%s of generation %d, not %d", typ, cond.ObservedGeneration, c.Generation)
	}
	return fmt.Sprintf("%s/%s: %s", cond.Status, cond.Reason, cond.Message)
}

// waitClusterCondition waits until condition typ, for the current generation, starts with want
// ("True/AllReplicasReady") and holds contains in its message.
func waitClusterCondition(t *testing.T, ns, name, typ, want, contains string) *bloomeryv1alpha1.BloomCluster {
	t.Helper()
	return waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, name, func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		got := clusterCondition(c, typ)
		return strings.HasPrefix(got, want+":") && strings.Contains(got, contains) && c.Status.ObservedGeneration == c.Generation, got
	})
}

func checkOwnedBy(t *testing.T, obj client.Object, cluster *bloomeryv1alpha1.BloomCluster) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != cluster.UID || ref.Kind != "BloomCluster" || ref.APIVersion != bloomeryv1alpha1.GroupVersion.String() ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("%T %s: controller reference %+v, want BloomCluster %s (uid %s)", obj, obj.GetName(), ref, cluster.Name, cluster.UID)
	}
	for k, v := range clusterLabels(cluster.Name) {
		if obj.GetLabels()[k] != v {
			t.Errorf("%T %s: label %s=%q, want %q", obj, obj.GetName(), k, obj.GetLabels()[k], v)
		}
	}
}

func TestBloomClusterCreatesItsChildren(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "alpha", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(3))
		c.Spec.Image = testImage
		c.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
		c.Spec.Storage.Size = new(resource.MustParse("2Gi"))
		c.Spec.Storage.StorageClassName = new("fast")
		c.Spec.Storage.WhenDeleted = bloomeryv1alpha1.Delete
		c.Spec.Persistence.LogSync = bloomeryv1alpha1.LogSyncAlways
		c.Spec.Limits.MaxTotalBytes = new(resource.MustParse("512Mi"))
		c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("128Mi")) // a copy of one fits beside the 512Mi
		c.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		c.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "bloom", Effect: corev1.TaintEffectNoSchedule}}
		c.Spec.PriorityClassName = "high"
		c.Spec.Affinity = userAffinity()
		c.Spec.TopologySpreadConstraints = userSpread()
	})

	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "alpha", exists)
	cm := waitFor(t, &corev1.ConfigMap{}, ns, "alpha-config", exists)
	headless := waitFor(t, &corev1.Service{}, ns, "alpha-headless", exists)
	clientSvc := waitFor(t, &corev1.Service{}, ns, "alpha", exists)
	pdb := waitFor(t, &policyv1.PodDisruptionBudget{}, ns, "alpha", exists)
	secret := waitFor(t, &corev1.Secret{}, ns, "alpha-internal-token", exists)
	policy := waitFor(t, &networkingv1.NetworkPolicy{}, ns, "alpha", exists)
	for _, obj := range []client.Object{sts, cm, headless, clientSvc, pdb, secret, policy} {
		checkOwnedBy(t, obj, cluster)
	}

	// Services: peers, the StatefulSet and Prometheus use the headless one, on the internal and
	// ops ports; applications the other, on the API's alone.
	port := func(name string, number int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: number, TargetPort: intstr.FromString(name)}
	}
	wantPort := port("http", 8080)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses ||
		!slices.Equal(headless.Spec.Ports, []corev1.ServicePort{port("internal", 8090), port("ops", 9090)}) {
		t.Errorf("headless Service: clusterIP %q, publishNotReadyAddresses %v, ports %+v", headless.Spec.ClusterIP,
			headless.Spec.PublishNotReadyAddresses, headless.Spec.Ports)
	}
	if clientSvc.Spec.ClusterIP == corev1.ClusterIPNone || clientSvc.Spec.PublishNotReadyAddresses ||
		!slices.Equal(clientSvc.Spec.Ports, []corev1.ServicePort{wantPort, port("resp", 6379)}) {
		t.Errorf("client Service: clusterIP %q, publishNotReadyAddresses %v, ports %+v", clientSvc.Spec.ClusterIP,
			clientSvc.Spec.PublishNotReadyAddresses, clientSvc.Spec.Ports)
	}
	for _, svc := range []*corev1.Service{headless, clientSvc} {
		if !mapsEqual(svc.Spec.Selector, selectorLabels("alpha")) {
			t.Errorf("Service %s selects %v, want the pods' labels %v", svc.Name, svc.Spec.Selector, selectorLabels("alpha"))
		}
	}

	// StatefulSet.
	spec := sts.Spec
	if spec.Selector == nil || !mapsEqual(spec.Selector.MatchLabels, selectorLabels("alpha")) {
		t.Errorf("selector %v, want %v", spec.Selector, selectorLabels("alpha"))
	}
	if spec.ServiceName != "alpha-headless" || spec.PodManagementPolicy != appsv1.ParallelPodManagement ||
		spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || *spec.Replicas != 3 {
		t.Errorf("serviceName %q, podManagementPolicy %q, updateStrategy %q, replicas %d", spec.ServiceName,
			spec.PodManagementPolicy, spec.UpdateStrategy.Type, *spec.Replicas)
	}
	if p := spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType ||
		p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("persistentVolumeClaimRetentionPolicy %+v, want Delete when deleted, Retain when scaled", p)
	}
	if len(spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates %+v, want one", spec.VolumeClaimTemplates)
	}
	claim := spec.VolumeClaimTemplates[0]
	if size := claim.Spec.Resources.Requests[corev1.ResourceStorage]; claim.Name != "data" || size.String() != "2Gi" ||
		claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "fast" ||
		!slices.Equal(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("volume claim template %s: %s of class %v, access %v", claim.Name, size.String(), claim.Spec.StorageClassName, claim.Spec.AccessModes)
	}

	pod := spec.Template.Spec
	if !mapsEqual(spec.Template.Labels, clusterLabels("alpha")) {
		t.Errorf("pod labels %v, want %v", spec.Template.Labels, clusterLabels("alpha"))
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers %+v, want one", pod.Containers)
	}
	ctr := pod.Containers[0]
	if ctr.Name != "dataplane" || ctr.Image != testImage ||
		strings.Join(ctr.Args, " ") != "dataplane -p 8080 --internal-port 8090 --ops-port 9090 "+
			"--internal-token-file /var/run/secrets/bloomery/token -c /etc/bloomery/config.yaml --data-dir /data" {
		t.Errorf("container %s: image %s, args %q", ctr.Name, ctr.Image, ctr.Args)
	}
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if len(ctr.Ports) != 4 || ports["http"] != 8080 || ports["internal"] != 8090 || ports["ops"] != 9090 || ports["resp"] != 6379 {
		t.Errorf("container ports %+v, want http 8080, internal 8090, ops 9090 and resp 6379", ctr.Ports)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("downward API env %v, want POD_NAME and POD_NAMESPACE", env)
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["data"] != "/data" || mounts["config"] != "/etc/bloomery" || mounts["internal-token"] != "/var/run/secrets/bloomery" {
		t.Errorf("volume mounts %v, want data at /data, config at /etc/bloomery and internal-token at /var/run/secrets/bloomery", mounts)
	}
	if len(pod.Volumes) != 2 || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != "alpha-config" {
		t.Errorf("volumes %+v, want the config from ConfigMap alpha-config and the token", pod.Volumes)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromString("ops") {
			t.Errorf("%s probe %+v, want GET %s on port ops", name, p, path)
		}
	}
	probe("readiness", ctr.ReadinessProbe, "/readyz")
	probe("liveness", ctr.LivenessProbe, "/healthz")
	probe("startup", ctr.StartupProbe, "/healthz")
	if ctr.StartupProbe != nil && ctr.StartupProbe.FailureThreshold*ctr.StartupProbe.PeriodSeconds < 600 {
		t.Errorf("the startup probe allows %d s for recovery, want at least 10 minutes",
			ctr.StartupProbe.FailureThreshold*ctr.StartupProbe.PeriodSeconds)
	}
	if mem := ctr.Resources.Limits[corev1.ResourceMemory]; mem.String() != "1Gi" {
		t.Errorf("memory limit %s, want 1Gi", mem.String())
	}

	psc, csc := pod.SecurityContext, ctr.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.FSGroup == nil || *psc.FSGroup != 65532 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v, want non-root 65532, fsGroup 65532, seccomp RuntimeDefault", psc)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.ReadOnlyRootFilesystem == nil ||
		!*csc.ReadOnlyRootFilesystem || csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v, want no privilege escalation, read-only root, all capabilities dropped", csc)
	}
	// 60 s floor plus 1 s per 64 MiB of maxTotalBytes (smaller than the memory limit).
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 68 {
		t.Errorf("terminationGracePeriodSeconds %v, want 68", pod.TerminationGracePeriodSeconds)
	}
	if pod.NodeSelector["disk"] != "ssd" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.PriorityClassName != "high" {
		t.Errorf("scheduling: nodeSelector %v, tolerations %+v, priorityClassName %q", pod.NodeSelector, pod.Tolerations, pod.PriorityClassName)
	}
	// The spec's affinity and spread, as they are: no default is merged in.
	if !equality.Semantic.DeepEqual(pod.Affinity, userAffinity()) || !equality.Semantic.DeepEqual(pod.TopologySpreadConstraints, userSpread()) {
		t.Errorf("scheduling: affinity %+v, topologySpreadConstraints %+v; want the spec's", pod.Affinity, pod.TopologySpreadConstraints)
	}

	// The configuration and the hash that rolls the pods when it changes.
	config := cm.Data["config.yaml"]
	for _, line := range []string{"logSync: always\n", "maxTotalBytes: 536870912\n", "defaultValidSecondsAfterCreate: 0\n",
		"logFormat: json\n", "allowRecoverFromCorruptedPersistentFile: true\n", "  - periodInSeconds: 300\n    updatesMoreThan: 100\n",
		"writeConsistency: quorum\n", "awaitMembership: true\n", "respPort: 6379\n", "homeLeaseSeconds: 10\n"} {
		if !strings.Contains(config, line) {
			t.Errorf("config.yaml lacks %q:\n%s", line, config)
		}
	}
	if got := spec.Template.Annotations[configHashAnnotation]; got != configHash(config) {
		t.Errorf("pod template annotation %s = %q, want the hash of config.yaml %q", configHashAnnotation, got, configHash(config))
	}

	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.Selector == nil ||
		!mapsEqual(pdb.Spec.Selector.MatchLabels, selectorLabels("alpha")) {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, selector %v", pdb.Spec.MaxUnavailable, pdb.Spec.Selector)
	}

	// An event for each child created, on the BloomCluster.
	await.Until(t, 20*time.Second, "events of the created children", func() (bool, string) {
		var events eventsv1.EventList
		if err := k8s.List(t.Context(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var created []string
		for _, e := range events.Items {
			if e.Regarding.Name == "alpha" && e.Regarding.Kind == "BloomCluster" && e.Reason == "Created" {
				created = append(created, e.Note)
			}
		}
		// The Secret, the ServiceAccount, a Lease per pod (3), the Role and its binding, the
		// ConfigMap, two Services, the NetworkPolicy, the StatefulSet, the PodDisruptionBudget.
		return len(created) == 13, fmt.Sprintf("Created events: %q", created)
	})

	got := waitClusterCondition(t, ns, "alpha", ConditionReady, "False/ReplicasNotReady", "0 of 3")
	if want := "http://alpha." + ns + ".svc:8080"; got.Status.Endpoint != want {
		t.Errorf("status.endpoint %q, want %q", got.Status.Endpoint, want)
	}
	for _, typ := range []string{ConditionProgressing, ConditionDegraded} {
		if c := clusterCondition(got, typ); !strings.HasPrefix(c, map[string]string{ConditionProgressing: "True/RollingOut", ConditionDegraded: "False/AsExpected"}[typ]) {
			t.Errorf("%s condition: %s", typ, c)
		}
	}
}

// userAffinity and userSpread are scheduling a user might give, unlike the operator's defaults.
func userAffinity() *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight:     10,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}},
		}},
	}}
}

func userSpread() []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew: 2, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bloom"}},
	}}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestBloomClusterSpecChangeUpdatesChildren(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "beta", nil)
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "beta", exists)
	oldHash := sts.Spec.Template.Annotations[configHashAnnotation]

	// kubectl rollout restart adds an annotation to the pod template, and a user a label.
	const restartedAt = "kubectl.kubernetes.io/restartedAt"
	modify(t, sts, func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations[restartedAt] = "2026-01-01T00:00:00Z"
		s.Spec.Template.Labels["team"] = "search"
	})

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(3))
		c.Spec.Persistence.LogSync = bloomeryv1alpha1.LogSyncNo
		c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
		c.Spec.PodDisruptionBudget.MaxUnavailable = new(intstr.FromInt32(2))
		c.Spec.Storage.Size = new(resource.MustParse("5Gi"))
	})
	sts = waitFor(t, &appsv1.StatefulSet{}, ns, "beta", func(s *appsv1.StatefulSet) (bool, string) {
		mem := s.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
		return *s.Spec.Replicas == 3 && mem.String() == "2Gi", fmt.Sprintf("replicas %d, memory limit %s", *s.Spec.Replicas, mem.String())
	})
	cm := waitFor(t, &corev1.ConfigMap{}, ns, "beta-config", func(cm *corev1.ConfigMap) (bool, string) {
		return strings.Contains(cm.Data["config.yaml"], "logSync: \"no\"\n"), cm.Data["config.yaml"]
	})
	newHash := sts.Spec.Template.Annotations[configHashAnnotation]
	if newHash == oldHash || newHash != configHash(cm.Data["config.yaml"]) {
		t.Errorf("config hash %q after the change (before %q), want the new config's %q", newHash, oldHash, configHash(cm.Data["config.yaml"]))
	}
	if sts.Spec.Template.Annotations[restartedAt] == "" || sts.Spec.Template.Labels["team"] != "search" {
		t.Errorf("the user's pod-template annotation and label must survive: annotations %v, labels %v",
			sts.Spec.Template.Annotations, sts.Spec.Template.Labels)
	}
	// Grace period follows the new memory limit: 60 s + 2 GiB / 64 MiB/s.
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 92 {
		t.Errorf("terminationGracePeriodSeconds %v, want 92", g)
	}
	waitFor(t, &policyv1.PodDisruptionBudget{}, ns, "beta", func(p *policyv1.PodDisruptionBudget) (bool, string) {
		return *p.Spec.MaxUnavailable == intstr.FromInt32(2), p.Spec.MaxUnavailable.String()
	})

	// The volume claim template is immutable: the StatefulSet is made anew with the new size (it
	// has no claims to grow yet), and with the pod template it had, user's additions included.
	playGarbageCollector(t, ns, "beta")
	recreated := waitFor(t, &appsv1.StatefulSet{}, ns, "beta", func(s *appsv1.StatefulSet) (bool, string) {
		return s.UID != sts.UID && templateSize(s) == "5Gi", fmt.Sprintf("uid %s, template size %s", s.UID, templateSize(s))
	})
	if !equality.Semantic.DeepEqual(recreated.Spec.Template, sts.Spec.Template) {
		t.Errorf("the pod template changed when the StatefulSet was made anew:\nbefore %+v\nafter  %+v", sts.Spec.Template, recreated.Spec.Template)
	}
	waitClusterCondition(t, ns, "beta", ConditionDegraded, "False/AsExpected", "")

	// A child changed by hand is put back.
	headless := waitFor(t, &corev1.Service{}, ns, "beta-headless", exists)
	modify(t, headless, func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = false })
	waitFor(t, &corev1.Service{}, ns, "beta-headless", func(s *corev1.Service) (bool, string) {
		return s.Spec.PublishNotReadyAddresses, "publishNotReadyAddresses is still false"
	})

	// Turning the PodDisruptionBudget off deletes it.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.PodDisruptionBudget.Enabled = new(false) })
	await.Until(t, 20*time.Second, "PodDisruptionBudget deleted", func() (bool, string) {
		err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "beta"}, &policyv1.PodDisruptionBudget{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func TestBloomClusterStatusFollowsTheStatefulSet(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "gamma", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })
	waitFor(t, &appsv1.StatefulSet{}, ns, "gamma", exists)
	waitClusterCondition(t, ns, "gamma", ConditionProgressing, "True/RollingOut", "has not yet observed generation")

	rolledOut := func(ready int32) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) {
			s.Status = appsv1.StatefulSetStatus{
				ObservedGeneration: s.Generation, Replicas: 2, ReadyReplicas: ready, AvailableReplicas: ready,
				CurrentReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "gamma-1", UpdateRevision: "gamma-1",
			}
		}
	}
	setStatefulSetStatus(t, ns, "gamma", rolledOut(1))
	got := waitClusterCondition(t, ns, "gamma", ConditionReady, "False/ReplicasNotReady", "1 of 2 replicas are ready")
	if got.Status.Replicas != 2 || got.Status.ReadyReplicas != 1 {
		t.Errorf("status replicas %d, readyReplicas %d; want 2, 1", got.Status.Replicas, got.Status.ReadyReplicas)
	}
	waitClusterCondition(t, ns, "gamma", ConditionProgressing, "False/UpToDate", "")

	setStatefulSetStatus(t, ns, "gamma", rolledOut(2))
	waitClusterCondition(t, ns, "gamma", ConditionReady, "True/AllReplicasReady", "2 of 2")

	// A rollout: one pod runs the new revision.
	setStatefulSetStatus(t, ns, "gamma", func(s *appsv1.StatefulSet) {
		s.Status.UpdateRevision, s.Status.UpdatedReplicas = "gamma-2", 1
	})
	waitClusterCondition(t, ns, "gamma", ConditionProgressing, "True/RollingOut", "1 of 2 pods run the latest revision")

	// status.filters counts the BloomFilters that name the cluster, as they come and go.
	for _, f := range []struct{ name, cluster string }{{"one", "gamma"}, {"two", "gamma"}, {"elsewhere", "other"}} {
		bf := validFilter(ns, f.name)
		bf.Spec.ClusterRef.Name = f.cluster
		if err := k8s.Create(t.Context(), bf); err != nil {
			t.Fatal(err)
		}
	}
	filters := func(want int32) {
		t.Helper()
		waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "gamma", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
			return c.Status.Filters == want, fmt.Sprintf("status.filters %d, want %d", c.Status.Filters, want)
		})
	}
	filters(2)
	if err := k8s.Delete(t.Context(), validFilter(ns, "one")); err != nil {
		t.Fatal(err)
	}
	filters(1)

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(0)) })
	waitClusterCondition(t, ns, "gamma", ConditionReady, "False/ScaledToZero", "")
}

func TestBloomClusterPauseStopsChildWrites(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "delta", nil)
	waitFor(t, &appsv1.StatefulSet{}, ns, "delta", exists)

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Annotations = map[string]string{PauseAnnotation: "true"}
		c.Spec.Replicas = new(int32(4))
	})
	// The pass that reports the pause for the new generation is the one that left the children
	// alone. status.observedGeneration stays behind: the operator has not acted on this spec.
	paused := waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "delta", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		got := clusterCondition(c, ConditionProgressing)
		return strings.HasPrefix(got, "False/"+ReasonPaused+":"), got
	})
	if paused.Status.ObservedGeneration == paused.Generation {
		t.Errorf("status.observedGeneration %d of a paused cluster claims the new spec was acted on", paused.Status.ObservedGeneration)
	}
	var sts appsv1.StatefulSet
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "delta"}, &sts); err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 1 {
		t.Errorf("a paused cluster's StatefulSet was changed: replicas %d, want 1", *sts.Spec.Replicas)
	}

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { delete(c.Annotations, PauseAnnotation) })
	waitFor(t, &appsv1.StatefulSet{}, ns, "delta", func(s *appsv1.StatefulSet) (bool, string) {
		return *s.Spec.Replicas == 4, fmt.Sprintf("replicas %d", *s.Spec.Replicas)
	})
}

func TestBloomClusterWithoutImageIsDegraded(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomClusterReconciler{}).SetupWithManager(mgr) // no default image; the rest from the manager
	})
	createBloomCluster(t, ns, "epsilon", nil)
	waitClusterCondition(t, ns, "epsilon", ConditionDegraded, "True/"+ReasonChildObjectFailure, "no default data-plane image")
	// The steps before the StatefulSet ran.
	waitFor(t, &corev1.Service{}, ns, "epsilon-headless", exists)
}

// clusterReconciles is how many passes the bloomcluster controllers of this process have made.
// Only the sequential tests, which run alone, may rely on it.
func clusterReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "bloomcluster" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// waitPasses waits until the controller made n more passes.
func waitPasses(t *testing.T, n float64) {
	t.Helper()
	start := clusterReconciles(t)
	await.Until(t, 30*time.Second, fmt.Sprintf("%v reconcile passes", n), func() (bool, string) {
		done := clusterReconciles(t) - start
		return done >= n, fmt.Sprintf("%v passes", done)
	})
}

// Not parallel: it counts the passes of every bloomcluster controller in the process.
func TestBloomClusterSteadyStateSendsNoWrites(t *testing.T) {
	ns := newNamespace(t)
	writes := startClusterReconciler(t, ns, 100*time.Millisecond)
	// Every field that reaches the StatefulSet is set, so that any server default the builder
	// misses shows up as a write.
	cluster := createBloomCluster(t, ns, "steady", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(3))
		c.Spec.Image = "registry.example/bloomery" // no tag: pull policy Always
		c.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceMemory: resource.MustParse("1.5Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2048Mi")},
		}
		c.Spec.Storage.Size = new(resource.MustParse("2Gi")) // two snapshots of 40% of 2Gi and the log
		c.Spec.Storage.StorageClassName = new("standard")
		c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("100M"))
		c.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		c.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		c.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels("steady")},
					TopologyKey:   "kubernetes.io/hostname",
				},
			}},
		}}
		c.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels("steady")},
		}}
		c.Spec.PriorityClassName = "high"
		c.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	})
	waitClusterCondition(t, ns, "steady", ConditionReady, "False/ReplicasNotReady", "")
	waitPasses(t, 3) // let the passes that raced with the cache's catching up finish

	before := writes.Load()
	waitPasses(t, 10)
	// An event of the BloomCluster (a label change) brings a pass of its own.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Labels = map[string]string{"touched": "yes"} })
	waitPasses(t, 10)
	if after := writes.Load(); after != before {
		var sts appsv1.StatefulSet
		_ = k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "steady"}, &sts)
		t.Errorf("an unchanged BloomCluster was written to %d times in 20 passes; StatefulSet generation %d",
			after-before, sts.Generation)
	}
}

// Not parallel: it counts the passes of every bloomcluster controller in the process.
func TestBloomClusterSchedulingAndResourceDefaults(t *testing.T) {
	ns := newNamespace(t)
	writes := startClusterReconciler(t, ns, 100*time.Millisecond)
	// Limits alone, and no scheduling.
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	createBloomCluster(t, ns, "plain", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Resources.Limits = limits
	})
	// An empty affinity and an empty list opt out of the defaults. The typed client drops the
	// empty list (omitempty), as kubectl does not: written as YAML.
	optOut := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: bloomery.io/v1alpha1
kind: BloomCluster
metadata: {name: optout, namespace: `+ns+`}
spec:
  affinity: {}
  topologySpreadConstraints: []
`), &optOut.Object); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), optOut); err != nil {
		t.Fatal(err)
	}

	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "plain", exists)
	pod := sts.Spec.Template.Spec
	if !equality.Semantic.DeepEqual(pod.Affinity, podAffinity("plain", nil)) ||
		!equality.Semantic.DeepEqual(pod.TopologySpreadConstraints, topologySpreadConstraints("plain", nil)) {
		t.Errorf("scheduling without a spec: affinity %+v, topologySpreadConstraints %+v; want the defaults", pod.Affinity, pod.TopologySpreadConstraints)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 ||
		len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("anti-affinity %+v, want one preferred term and none required", a)
	}
	// The template keeps the spec's resources: the API server does not default a template's requests.
	if r := pod.Containers[0].Resources; r.Requests != nil || !equality.Semantic.DeepEqual(r.Limits, limits) {
		t.Errorf("template resources %+v, want the spec's limits and no requests", r)
	}
	opted := waitFor(t, &appsv1.StatefulSet{}, ns, "optout", exists).Spec.Template.Spec
	if (opted.Affinity != nil && opted.Affinity.PodAntiAffinity != nil) || len(opted.TopologySpreadConstraints) != 0 {
		t.Errorf("scheduling of an empty affinity and list: affinity %+v, topologySpreadConstraints %+v; want none", opted.Affinity, opted.TopologySpreadConstraints)
	}

	// A pod of the template, as the StatefulSet controller would make it: the API server gives it
	// requests equal to its limits, cpu and memory alike.
	podOf := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain-0", Namespace: ns}, Spec: *pod.DeepCopy()}
	// The claim's volume, which the StatefulSet controller adds.
	podOf.Spec.Volumes = append(podOf.Spec.Volumes, corev1.Volume{Name: dataVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if err := k8s.Create(t.Context(), podOf); err != nil {
		t.Fatal(err)
	}
	if r := podOf.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(r.Requests, limits) {
		t.Errorf("requests of the admitted pod %v, want its limits %v", r.Requests, limits)
	}
	// Per resource: a cpu request of its own leaves the memory request to the limit.
	podOf = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain-1", Namespace: ns}, Spec: *podOf.Spec.DeepCopy()}
	podOf.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if err := k8s.Create(t.Context(), podOf); err != nil {
		t.Fatal(err)
	}
	want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: limits[corev1.ResourceMemory]}
	if r := podOf.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(r.Requests, want) {
		t.Errorf("requests of the admitted pod %v, want %v", r.Requests, want)
	}

	// A StatefulSet of an operator without the defaults gets them, once.
	modify(t, sts, func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Affinity, s.Spec.Template.Spec.TopologySpreadConstraints = nil, nil
	})
	waitFor(t, &appsv1.StatefulSet{}, ns, "plain", func(s *appsv1.StatefulSet) (bool, string) {
		p := s.Spec.Template.Spec
		return p.Affinity != nil && len(p.TopologySpreadConstraints) == 1, fmt.Sprintf("affinity %+v, topologySpreadConstraints %+v", p.Affinity, p.TopologySpreadConstraints)
	})

	// Stable: passes after the first send no writes, and the template does not change.
	waitClusterCondition(t, ns, "plain", ConditionReady, "False/ReplicasNotReady", "")
	waitClusterCondition(t, ns, "optout", ConditionReady, "False/ReplicasNotReady", "")
	waitPasses(t, 3)
	before := writes.Load()
	versions := map[string]string{}
	for _, name := range []string{"plain", "optout"} {
		versions[name] = waitFor(t, &appsv1.StatefulSet{}, ns, name, exists).ResourceVersion
	}
	waitPasses(t, 10)
	if after := writes.Load(); after != before {
		t.Errorf("unchanged BloomClusters were written to %d times in 10 passes", after-before)
	}
	for name, rv := range versions {
		if s := waitFor(t, &appsv1.StatefulSet{}, ns, name, exists); s.ResourceVersion != rv {
			t.Errorf("StatefulSet %s: resourceVersion %s, then %s (generation %d)", name, rv, s.ResourceVersion, s.Generation)
		}
	}
}

// Not parallel: it installs the ServiceMonitor CRD, which the whole API server then serves.
func TestBloomClusterServiceMonitorDiscoveredAtRunTime(t *testing.T) {
	ns := newNamespace(t)
	writes := startClusterReconciler(t, ns, 100*time.Millisecond)
	cluster := createBloomCluster(t, ns, "watched", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Monitoring.ServiceMonitor = bloomeryv1alpha1.ServiceMonitorSpec{Enabled: true, Interval: "15s", Labels: map[string]string{"release": "prom"}}
	})

	// Without the kind: no failure, the rest of the cluster exists, and the status says why.
	waitClusterCondition(t, ns, "watched", ConditionDegraded, "True/"+ReasonServiceMonitorUnavailable, "monitoring.coreos.com/v1")
	waitFor(t, &appsv1.StatefulSet{}, ns, "watched", exists)

	// The Prometheus Operator's own CRD (test/crds), so that what the operator writes must pass its
	// schema, and survive it: fields the schema does not know would be dropped.
	crds := envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "test", "crds", "monitoring.coreos.com_servicemonitors.yaml")}}
	if _, err := envtest.InstallCRDs(restConfig, crds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := envtest.UninstallCRDs(restConfig, crds); err != nil {
			t.Errorf("uninstalling the ServiceMonitor CRD: %v", err)
		}
	})

	sm := &unstructured.Unstructured{}
	sm.SetGroupVersionKind(serviceMonitorGVK)
	waitFor(t, sm, ns, "watched", exists)
	checkOwnedBy(t, sm, cluster)
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v, want the spec's release=prom", sm.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("endpoints %v, want one", endpoints)
	}
	ep, _ := endpoints[0].(map[string]any)
	if ep["port"] != "ops" || ep["path"] != "/metrics" || ep["interval"] != "15s" {
		t.Errorf("endpoint %v, want port ops, path /metrics, interval 15s", ep)
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if selector[serviceRoleLabel] != serviceRoleHeadless || selector[labelInstance] != "watched" {
		t.Errorf("selector %v, want the headless Service of the cluster", selector)
	}
	waitClusterCondition(t, ns, "watched", ConditionDegraded, "False/AsExpected", "")

	// What the API server stored is not a difference to write back.
	waitPasses(t, 3)
	before := writes.Load()
	waitPasses(t, 10)
	if after := writes.Load(); after != before {
		t.Errorf("%d writes in 10 passes of an unchanged cluster with a ServiceMonitor", after-before)
	}

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Monitoring.ServiceMonitor.Enabled = false })
	await.Until(t, 20*time.Second, "ServiceMonitor deleted", func() (bool, string) {
		err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "watched"}, sm)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// The samples in config/samples are meant to be applied as they are: the API server accepts them,
// and the sample cluster gets its data plane without a complaint.
func TestSamplesApplyAsTheyAre(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "bloomery_*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("samples: %v, %v", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &obj.Object); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		obj.SetNamespace(ns)
		if err := k8s.Create(t.Context(), obj); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	waitFor(t, &appsv1.StatefulSet{}, ns, "example", func(s *appsv1.StatefulSet) (bool, string) {
		return *s.Spec.Replicas == 3, fmt.Sprintf("replicas %d, want the sample's 3", *s.Spec.Replicas)
	})
	waitClusterCondition(t, ns, "example", ConditionDegraded, "False/AsExpected", "")
	waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "example", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		return c.Status.Filters == 1, fmt.Sprintf("status.filters %d, want the sample filter", c.Status.Filters)
	})
}

// kubectl scale bloomcluster works through the scale subresource, whose selector picks the pods.
func TestBloomClusterScaleSubresource(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "scaled", nil)
	waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "scaled", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		return c.Status.Selector != "", "status.selector " + c.Status.Selector
	})

	scale := &autoscalingv1.Scale{}
	if err := k8s.SubResource("scale").Get(t.Context(), cluster, scale); err != nil {
		t.Fatal(err)
	}
	selector, err := labels.Parse(scale.Status.Selector)
	if err != nil || !selector.Matches(labels.Set(selectorLabels("scaled"))) || selector.Matches(labels.Set(selectorLabels("other"))) {
		t.Fatalf("scale selector %q (%v) does not select exactly the cluster's pods", scale.Status.Selector, err)
	}
	if scale.Spec.Replicas != 1 {
		t.Fatalf("scale spec.replicas = %d, want the default 1", scale.Spec.Replicas)
	}
	scale.Spec.Replicas = 4
	if err := k8s.SubResource("scale").Update(t.Context(), cluster, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &appsv1.StatefulSet{}, ns, "scaled", func(s *appsv1.StatefulSet) (bool, string) {
		return *s.Spec.Replicas == 4, fmt.Sprintf("replicas %d", *s.Spec.Replicas)
	})
}
