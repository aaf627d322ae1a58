package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"

	"github.com/bloomery/bloomery/internal/await"
)

// limitedCluster is a cluster with the given memory limit, maxTotalBytes, maxFilterBytes and
// volume; "" leaves one out.
func limitedCluster(memory, maxTotal, maxFilter, volume string) *bloomeryv1alpha1.BloomCluster {
	c := &bloomeryv1alpha1.BloomCluster{}
	set := func(s string) *resource.Quantity {
		if s == "" {
			return nil
		}
		return new(resource.MustParse(s))
	}
	if memory != "" {
		c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)}
	}
	c.Spec.Limits.MaxTotalBytes, c.Spec.Limits.MaxFilterBytes, c.Spec.Storage.Size = set(maxTotal), set(maxFilter), set(volume)
	return c
}

func TestLimitsFitOrSayWhy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                              string
		memory, maxTotal, maxFilter, size string
		wantTotal                         int64
		wantGoMemLimit                    string // "" for none
		wantMisfits                       []string
	}{
		{"the chart's default: 1Gi of memory, the filters' 40% derived", "1Gi", "", "", "",
			429_496_729, "536870912", nil},
		{"no memory limit, no limits: nothing to check", "", "", "", "",
			0, "", nil},
		{"a filter as large as the total leaves no room for its copy", "1Gi", "512Mi", "", "2Gi",
			512 << 20, "429496729", []string{"maxTotalBytes 512Mi plus one copy of a filter (512Mi, maxFilterBytes or else maxTotalBytes) is 1Gi, " +
				"more than the 80% of the memory limit 1Gi (819.2Mi) that leaves the data plane its headroom"}},
		{"smaller filters make room for more of them", "1Gi", "512Mi", "128Mi", "2Gi",
			512 << 20, "429496729", nil},
		{"maxTotalBytes 0 is unlimited: nothing to check", "1Gi", "0", "", "",
			0, "966367641", nil},
		{"a filter larger than the derived total", "1Gi", "", "512Mi", "",
			429_496_729, "536870912", []string{"maxFilterBytes 512Mi is more than maxTotalBytes 409.6Mi (40% of the memory limit, as spec.limits leaves it out)"}},
		{"the volume cannot hold two snapshots and the log", "", "1Gi", "", "2Gi",
			1 << 30, "", []string{"spec.storage.size 2Gi is less than the 2.1Gi the data directory needs: " +
				"two snapshots of maxTotalBytes 1Gi (the last one and the next, written beside it) and the log of up to 128Mi"}},
	}
	for _, tt := range tests {
		l := limitsOf(limitedCluster(tt.memory, tt.maxTotal, tt.maxFilter, tt.size))
		if l.total != tt.wantTotal {
			t.Errorf("%s: maxTotalBytes %d, want %d", tt.name, l.total, tt.wantTotal)
		}
		if got := buildStatefulSet(limitedCluster(tt.memory, tt.maxTotal, tt.maxFilter, tt.size), testImage, "", "", ""); goMemLimitEnv(got.Spec.Template.Spec.Containers[0]) != tt.wantGoMemLimit {
			t.Errorf("%s: GOMEMLIMIT %q, want %q", tt.name, goMemLimitEnv(got.Spec.Template.Spec.Containers[0]), tt.wantGoMemLimit)
		}
		if got := l.misfits(); strings.Join(got, "\n") != strings.Join(tt.wantMisfits, "\n") {
			t.Errorf("%s: misfits\n%q\nwant\n%q", tt.name, got, tt.wantMisfits)
		}
	}
}

// goMemLimitEnv is the container's GOMEMLIMIT, "" without one.
func goMemLimitEnv(c corev1.Container) string {
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			return e.Value
		}
	}
	return ""
}

// The pod is told the derived maxTotalBytes rather than derive its own: from GOMEMLIMIT, which
// leaves out the filters' memory, it would give them less.
func TestDataPlaneConfigDerivesMaxTotalBytesFromTheMemoryLimit(t *testing.T) {
	t.Parallel()
	c := limitedCluster("1Gi", "", "", "")
	c.Name = "a"
	cfg, text := loadGeneratedConfig(t, c)
	if cfg.MaxTotalBytes != 429_496_729 || cfg.MaxFilterBytes != 0 {
		t.Errorf("maxTotalBytes, maxFilterBytes = %d, %d; want 40%% of 1Gi and unlimited", cfg.MaxTotalBytes, cfg.MaxFilterBytes)
	}
	if !strings.Contains(text, "maxTotalBytes: 429496729\n") || strings.Contains(text, "maxFilterBytes") {
		t.Errorf("config.yaml must set the derived maxTotalBytes and leave maxFilterBytes out:\n%s", text)
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1Ki", 512 << 20: "512Mi", 858_993_459: "819.2Mi", 3 << 40: "3Ti", 1536 << 20: "1.5Gi"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// waitEvent waits for a Warning event of reason about the cluster whose note holds contains.
func waitEvent(t *testing.T, ns, cluster, reason, contains string) {
	t.Helper()
	await.Until(t, 20*time.Second, reason+" event", func() (bool, string) {
		var events eventsv1.EventList
		if err := k8s.List(t.Context(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Name == cluster && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				if strings.Contains(e.Note, contains) {
					return true, ""
				}
				notes = append(notes, e.Note)
			}
		}
		return false, fmt.Sprintf("%s events: %q", reason, notes)
	})
}

// A memory limit without spec.limits: GOMEMLIMIT below it, and the filters' 40% in config.yaml.
func TestBloomClusterDerivesItsLimitsFromTheMemoryLimit(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	createBloomCluster(t, ns, "derived", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Image = testImage
		c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	})
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "derived", exists)
	// 90% of 1Gi less the filters' 409.6Mi: the bit arrays are outside the Go heap.
	if got := goMemLimitEnv(sts.Spec.Template.Spec.Containers[0]); got != "536870912" {
		t.Errorf("GOMEMLIMIT %q, want 536870912", got)
	}
	cm := waitFor(t, &corev1.ConfigMap{}, ns, "derived-config", exists)
	if !strings.Contains(cm.Data["config.yaml"], "maxTotalBytes: 429496729\n") {
		t.Errorf("config.yaml lacks the derived maxTotalBytes (40%% of 1Gi):\n%s", cm.Data["config.yaml"])
	}
	got := waitClusterCondition(t, ns, "derived", ConditionDegraded, "False/"+ReasonAsExpected, "")
	if msg := clusterCondition(got, ConditionDegraded); strings.Contains(msg, "memory limit") {
		t.Errorf("a cluster with a memory limit is warned about it: %s", msg)
	}
}

// A new cluster whose limits cannot fit gets no pods until they do, and is told why with the
// numbers: first the memory and the volume, then the volume alone.
func TestBloomClusterRefusesLimitsThatCannotFit(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "tight", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Image = testImage
		c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		c.Spec.Limits.MaxTotalBytes = new(resource.MustParse("512Mi"))
	})
	memory := "maxTotalBytes 512Mi plus one copy of a filter (512Mi, maxFilterBytes or else maxTotalBytes) is 1Gi, " +
		"more than the 80% of the memory limit 1Gi (819.2Mi)"
	volume := "spec.storage.size 1Gi is less than the 1.1Gi the data directory needs"
	got := waitClusterCondition(t, ns, "tight", ConditionDegraded, "True/"+ReasonLimitsDoNotFit, memory)
	if msg := clusterCondition(got, ConditionDegraded); !strings.Contains(msg, volume) {
		t.Errorf("the condition does not name the volume too: %s", msg)
	}
	waitEvent(t, ns, "tight", ReasonLimitsDoNotFit, memory)
	waitFor(t, &corev1.Service{}, ns, "tight", exists) // the rest of the pass goes on
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "tight"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet of a refused spec: %v, want not found", err)
	}
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "tight-config"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of a refused spec: %v, want not found", err)
	}

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("128Mi"))
	})
	got = waitClusterCondition(t, ns, "tight", ConditionDegraded, "True/"+ReasonLimitsDoNotFit, volume)
	if msg := clusterCondition(got, ConditionDegraded); strings.Contains(msg, "memory limit 1Gi") {
		t.Errorf("the memory fits now, and the condition still says it does not: %s", msg)
	}
	waitEvent(t, ns, "tight", ReasonLimitsDoNotFit, volume)

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(resource.MustParse("2Gi")) })
	waitFor(t, &appsv1.StatefulSet{}, ns, "tight", exists)
	waitClusterCondition(t, ns, "tight", ConditionDegraded, "False/"+ReasonAsExpected, "")
}

// A running cluster given limits that cannot fit keeps its pods on the last spec that did.
func TestBloomClusterDoesNotRollPodsOntoLimitsThatCannotFit(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "running", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Image = testImage
		c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	})
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "running", exists)
	cm := waitFor(t, &corev1.ConfigMap{}, ns, "running-config", exists)

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(2))
		c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("1Gi"))
	})
	waitClusterCondition(t, ns, "running", ConditionDegraded, "True/"+ReasonLimitsDoNotFit,
		"maxFilterBytes 1Gi is more than maxTotalBytes 409.6Mi (40% of the memory limit, as spec.limits leaves it out)")
	var after appsv1.StatefulSet
	var afterCM corev1.ConfigMap
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(sts), &after); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(cm), &afterCM); err != nil {
		t.Fatal(err)
	}
	if after.Generation != sts.Generation || afterCM.ResourceVersion != cm.ResourceVersion {
		t.Errorf("a refused spec changed the StatefulSet (generation %d, was %d) or the ConfigMap (version %s, was %s)",
			after.Generation, sts.Generation, afterCM.ResourceVersion, cm.ResourceVersion)
	}
}

// Without a memory limit the cluster runs, with a warning in its condition and an event.
func TestBloomClusterWithoutAMemoryLimitIsWarnedAbout(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	createBloomCluster(t, ns, "unbounded", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Image = testImage })
	warning := "The data-plane container has no memory limit (spec.resources.limits.memory): the filters get 40% of the node's memory, " +
		"and a pod may be OOM-killed"
	waitClusterCondition(t, ns, "unbounded", ConditionDegraded, "False/"+ReasonAsExpected, warning)
	waitEvent(t, ns, "unbounded", ReasonNoMemoryLimit, warning)
	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "unbounded", exists)
	if got := goMemLimitEnv(sts.Spec.Template.Spec.Containers[0]); got != "" {
		t.Errorf("GOMEMLIMIT %q without a memory limit, want none", got)
	}
}

// The chart's default BloomCluster is not refused: its limits fit its memory and its volume.
func TestChartDefaultBloomClusterFits(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "charts", "bloomery", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		BloomCluster bloomeryv1alpha1.BloomClusterSpec `json:"bloomCluster"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	c := &bloomeryv1alpha1.BloomCluster{Spec: values.BloomCluster}
	l := limitsOf(c)
	if l.memory == 0 || l.volume == 0 {
		t.Fatalf("the chart's default BloomCluster has memory limit %d and volume %d, want both", l.memory, l.volume)
	}
	if misfits := l.misfits(); len(misfits) > 0 {
		t.Errorf("the chart's default BloomCluster would be refused: %q", misfits)
	}
}
