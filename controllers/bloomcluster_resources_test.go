package controllers

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/config"
)

// These tests cover the pure builders. What the API server does with the objects (defaults,
// no writes in a steady state) is tested against envtest in bloomcluster_controller_envtest_test.go.

// loadGeneratedConfig writes config.yaml as the pod sees it and reads it with the data plane's own
// loader, so that a key the data plane does not know fails here and not in a crash-looping pod.
func loadGeneratedConfig(t *testing.T, c *bloomeryv1alpha1.BloomCluster) (config.Config, string) {
	t.Helper()
	text, err := dataPlaneConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), configFileName)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("the data plane refuses the generated config: %v\n%s", err, text)
	}
	// The pod's flags: --data-dir and --internal-token-file, and its downward API environment.
	cfg.DataDir, cfg.InternalTokenFile = dataMountPath, tokenMountPath+"/"+tokenSecretKey
	cfg.PodName, cfg.PodNamespace = c.Name+"-0", cmp.Or(c.Namespace, "default")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the generated config is invalid: %v\n%s", err, text)
	}
	return cfg, text
}

func TestDataPlaneConfigIsReadByTheDataPlane(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "ns"},
		Spec: bloomeryv1alpha1.BloomClusterSpec{
			Persistence: bloomeryv1alpha1.PersistenceSpec{
				LogSync:                          bloomeryv1alpha1.LogSyncAlways,
				SnapshotTriggers:                 []bloomeryv1alpha1.SnapshotTrigger{{PeriodSeconds: 60, UpdatesMoreThan: 1}, {PeriodSeconds: 900, UpdatesMoreThan: 1000}},
				AllowRecoveryFromCorruptSnapshot: new(false),
			},
			Limits: bloomeryv1alpha1.LimitsSpec{
				MaxFilterBytes: new(resource.MustParse("64Mi")),
				MaxTotalBytes:  new(resource.MustParse("1G")),
			},
		},
	}
	cfg, text := loadGeneratedConfig(t, c)
	if cfg.LogSync != "always" {
		t.Errorf("logSync = %q, want always", cfg.LogSync)
	}
	want := []config.TriggerPersistenceCriterion{{Period: time.Minute, UpdatesMoreThan: 1}, {Period: 15 * time.Minute, UpdatesMoreThan: 1000}}
	if len(cfg.TriggerPersistenceCriteria) != 2 || cfg.TriggerPersistenceCriteria[0] != want[0] || cfg.TriggerPersistenceCriteria[1] != want[1] {
		t.Errorf("triggerPersistenceCriteria = %+v, want %+v", cfg.TriggerPersistenceCriteria, want)
	}
	if cfg.AllowRecoverFromCorruptedPersistentFile {
		t.Error("allowRecoverFromCorruptedPersistentFile = true, want false")
	}
	if cfg.MaxFilterBytes != 64<<20 || cfg.MaxTotalBytes != 1e9 {
		t.Errorf("maxFilterBytes, maxTotalBytes = %d, %d; want %d, %d", cfg.MaxFilterBytes, cfg.MaxTotalBytes, 64<<20, int64(1e9))
	}
	if cfg.DefaultValidAfterCreate != 0 || cfg.LogFormat != "json" {
		t.Errorf("defaultValidSecondsAfterCreate, logFormat = %v, %q; want 0, json", cfg.DefaultValidAfterCreate, cfg.LogFormat)
	}
	if !strings.Contains(text, "maxTotalBytes: 1000000000\n") {
		t.Errorf("maxTotalBytes is not written as an integer count of bytes:\n%s", text)
	}
	// Left out of the spec, the API's default lease; 0 is written too, so that it turns leases off.
	if cfg.HomeLease != bloomeryv1alpha1.DefaultHomeLeaseSeconds*time.Second {
		t.Errorf("homeLeaseSeconds = %v, want the default %ds", cfg.HomeLease, bloomeryv1alpha1.DefaultHomeLeaseSeconds)
	}
	c.Spec.Replication.HomeLeaseSeconds = new(int32(0))
	if cfg, text := loadGeneratedConfig(t, c); cfg.HomeLease != 0 || !strings.Contains(text, "homeLeaseSeconds: 0\n") {
		t.Errorf("with spec.replication.homeLeaseSeconds 0: homeLeaseSeconds = %v, want 0 written:\n%s", cfg.HomeLease, text)
	}
}

func TestDataPlaneConfigDefaultsAndEnums(t *testing.T) {
	t.Parallel()
	for policy, want := range map[bloomeryv1alpha1.LogSyncPolicy]config.LogSync{
		"":                                  "everysec",
		bloomeryv1alpha1.LogSyncEverySecond: "everysec",
		bloomeryv1alpha1.LogSyncAlways:      "always",
		bloomeryv1alpha1.LogSyncNo:          "no",
	} {
		c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
		c.Spec.Persistence.LogSync = policy
		cfg, _ := loadGeneratedConfig(t, c)
		if cfg.LogSync != want {
			t.Errorf("logSync %q: data plane got %q, want %q", policy, cfg.LogSync, want)
		}
		if !cfg.AllowRecoverFromCorruptedPersistentFile {
			t.Error("allowRecoverFromCorruptedPersistentFile absent from the spec must stay true")
		}
		if cfg.MaxFilterBytes != 0 || cfg.MaxTotalBytes != 0 {
			t.Errorf("limits absent from the spec must mean none, got %d, %d", cfg.MaxFilterBytes, cfg.MaxTotalBytes)
		}
	}

	off := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	off.Spec.Persistence.SnapshotTriggers = []bloomeryv1alpha1.SnapshotTrigger{}
	if cfg, _ := loadGeneratedConfig(t, off); len(cfg.TriggerPersistenceCriteria) != 0 {
		t.Errorf("an empty snapshotTriggers list must turn periodic snapshots off, got %+v", cfg.TriggerPersistenceCriteria)
	}
}

// The data plane replicates writes with the cluster's consistency, and reports ready only once
// the operator told it its peers and it caught up from them.
func TestDataPlaneConfigReplication(t *testing.T) {
	t.Parallel()
	for consistency, want := range map[bloomeryv1alpha1.Consistency]string{
		"":                                 "quorum", // a spec built in code, or by an older API server
		bloomeryv1alpha1.ConsistencyOne:    "one",
		bloomeryv1alpha1.ConsistencyQuorum: "quorum",
		bloomeryv1alpha1.ConsistencyAll:    "all",
	} {
		c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
		c.Spec.Replication.WriteConsistency = consistency
		_, text := loadGeneratedConfig(t, c)
		for _, line := range []string{"writeConsistency: " + want + "\n", "awaitMembership: true\n"} {
			if !strings.Contains(text, line) {
				t.Errorf("writeConsistency %q: config.yaml lacks %q:\n%s", consistency, line, text)
			}
		}
	}
}

func TestDataPlaneConfigIsDeterministic(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n"}}
	c.Spec.Limits.MaxTotalBytes = new(resource.MustParse("2Gi"))
	first, err := dataPlaneConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map iteration order differs from run to run
		again, err := dataPlaneConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Fatalf("config.yaml differs between two renderings:\n%s\n---\n%s", first, again)
		}
	}
	c.Spec.Persistence.LogSync = bloomeryv1alpha1.LogSyncNo
	changed, err := dataPlaneConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if configHash(changed) == configHash(first) {
		t.Error("a changed configuration must change the hash that rolls the pods")
	}
}

func TestTerminationGracePeriodGrowsWithTheData(t *testing.T) {
	t.Parallel()
	cluster := func(maxTotal, memLimit string) *bloomeryv1alpha1.BloomCluster {
		c := &bloomeryv1alpha1.BloomCluster{}
		if maxTotal != "" {
			c.Spec.Limits.MaxTotalBytes = new(resource.MustParse(maxTotal))
		}
		if memLimit != "" {
			c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memLimit)}
		}
		return c
	}
	tests := []struct {
		name             string
		maxTotal, memory string
		want             int64 // 5 s drain + 15 s HTTP shutdown + 40 s + 1 s per 64 MiB
	}{
		{"no bound: the floor", "", "", 60},
		{"small data", "64Mi", "", 61},
		{"8 GiB of filters", "8Gi", "", 188},
		{"the memory limit bounds the data", "", "4Gi", 124},
		{"the smaller bound wins", "8Gi", "1Gi", 76},
	}
	for _, tt := range tests {
		if got := terminationGracePeriodSeconds(cluster(tt.maxTotal, tt.memory)); got != tt.want {
			t.Errorf("%s: %d s, want %d", tt.name, got, tt.want)
		}
	}
}

func TestDefaultPullPolicyFollowsTheAPIServer(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]corev1.PullPolicy{
		"bloomery":                           corev1.PullAlways,
		"bloomery:latest":                    corev1.PullAlways,
		"registry:5000/bloomery":             corev1.PullAlways,
		"registry:5000/bloomery:v1.2.3":      corev1.PullIfNotPresent,
		"ghcr.io/bloomery/bloomery:v1":       corev1.PullIfNotPresent,
		"ghcr.io/bloomery/bloomery@sha256:0": corev1.PullIfNotPresent,
	} {
		if got := defaultPullPolicy(image); got != want {
			t.Errorf("%s: %s, want %s", image, got, want)
		}
	}
}

func TestJSONSubset(t *testing.T) {
	t.Parallel()
	have := map[string]any{"a": "x", "b": []any{map[string]any{"c": "y", "defaulted": true}}, "extra": int64(1)}
	if !jsonSubset(have, map[string]any{"a": "x", "b": []any{map[string]any{"c": "y"}}}) {
		t.Error("fields the server added must not count as a difference")
	}
	if jsonSubset(have, map[string]any{"a": "z"}) {
		t.Error("a changed value is a difference")
	}
	if jsonSubset(have, map[string]any{"b": []any{map[string]any{"c": "y"}, map[string]any{}}}) {
		t.Error("a list of another length is a difference")
	}
	if jsonSubset(have, map[string]any{"missing": "x"}) {
		t.Error("a missing field is a difference")
	}
}

// scheduling is the pod template's affinity and topology spread constraints of c.
func scheduling(c *bloomeryv1alpha1.BloomCluster) (*corev1.Affinity, []corev1.TopologySpreadConstraint) {
	pod := buildStatefulSet(c, testImage, "config", "token", "").Spec.Template.Spec
	return pod.Affinity, pod.TopologySpreadConstraints
}

func TestSchedulingDefaultsWhenTheSpecSetsNone(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "ns"}}
	affinity, spread := scheduling(c)
	selector := &metav1.LabelSelector{MatchLabels: selectorLabels("alpha")}

	// Preferred, never required: a one-node cluster still runs every replica.
	wantAffinity := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight:          100,
			PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: selector, TopologyKey: "kubernetes.io/hostname"},
		}},
	}}
	if !equality.Semantic.DeepEqual(affinity, wantAffinity) {
		t.Errorf("affinity = %+v, want %+v", affinity, wantAffinity)
	}
	wantSpread := []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector,
	}}
	if !equality.Semantic.DeepEqual(spread, wantSpread) {
		t.Errorf("topologySpreadConstraints = %+v, want %+v", spread, wantSpread)
	}
	// The selector is the StatefulSet's own: the pods of this cluster, and of no other.
	sts := buildStatefulSet(c, testImage, "config", "token", "")
	if !mapsEqual(affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels) ||
		!mapsEqual(spread[0].LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("the defaults select %v and %v, not the StatefulSet's %v", affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels,
			spread[0].LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels)
	}

	// Two builds are equal and share nothing: a later change to one cannot reach the other.
	again, againSpread := scheduling(c)
	if !equality.Semantic.DeepEqual(affinity, again) || !equality.Semantic.DeepEqual(spread, againSpread) {
		t.Error("two builds of one spec differ")
	}
	again.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels[labelInstance] = "other"
	if affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels[labelInstance] != "alpha" {
		t.Error("two builds share their label selector")
	}
}

func TestSchedulingOfTheSpecIsKeptAsItIs(t *testing.T) {
	t.Parallel()
	nodeAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}},
		}}},
	}}
	hostSpread := []corev1.TopologySpreadConstraint{{
		MaxSkew: 2, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	}}
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		spread   []corev1.TopologySpreadConstraint
	}{
		// Not merged: a node affinity of the user's gets no anti-affinity beside it.
		{"given", nodeAffinity, hostSpread},
		// Empty but set: the way to have none.
		{"empty", &corev1.Affinity{}, []corev1.TopologySpreadConstraint{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "ns"}}
			c.Spec.Affinity, c.Spec.TopologySpreadConstraints = tc.affinity.DeepCopy(), slices.Clone(tc.spread)
			affinity, spread := scheduling(c)
			if !equality.Semantic.DeepEqual(affinity, tc.affinity) || affinity.PodAntiAffinity != nil {
				t.Errorf("affinity = %+v, want the spec's %+v", affinity, tc.affinity)
			}
			if spread == nil || !equality.Semantic.DeepEqual(spread, tc.spread) {
				t.Errorf("topologySpreadConstraints = %+v, want the spec's %+v", spread, tc.spread)
			}
		})
	}
}

// Kubernetes copies a container's limits into the requests it leaves out when it admits a pod, not
// in a pod template: the template keeps the spec's resources as they are, so that it compares equal
// to what the API server stores (envtest checks the pod's side).
func TestResourcesOfTheSpecAreKeptAsTheyAre(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "ns"}}
	c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	got := buildStatefulSet(c, testImage, "config", "token", "").Spec.Template.Spec.Containers[0].Resources
	if got.Requests != nil || !equality.Semantic.DeepEqual(got.Limits, c.Spec.Resources.Limits) {
		t.Errorf("resources = %+v, want the spec's limits and no requests", got)
	}
}
