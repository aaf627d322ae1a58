package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The schema, defaults and CEL rules of both CRDs, as the real API server applies them: every
// rule rejects a manifest that breaks it with the message the markers give.

func validFilter(ns, name string) *bloomeryv1alpha1.BloomFilter {
	return &bloomeryv1alpha1.BloomFilter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: bloomeryv1alpha1.BloomFilterSpec{
			ClusterRef:        bloomeryv1alpha1.ClusterReference{Name: "c"},
			Capacity:          1000,
			FalsePositiveRate: "0.01",
		},
	}
}

// expectRejected checks that err is the API server's refusal and names the rule's message.
func expectRejected(t *testing.T, what string, err error, message string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want rejected with %q", what, message)
	case !strings.Contains(err.Error(), message):
		t.Errorf("%s: rejected with %q, want the message %q", what, err, message)
	}
}

func TestBloomFilterSchemaRejectsInvalidManifests(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	tests := []struct {
		name    string
		mutate  func(*bloomeryv1alpha1.BloomFilter)
		message string
	}{
		{"FPR of 1.5", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.FalsePositiveRate = "1.5" }, `spec.falsePositiveRate in body should match`},
		{"FPR of 0", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.FalsePositiveRate = "0" }, `spec.falsePositiveRate in body should match`},
		{"FPR not a number", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.FalsePositiveRate = "1e-3" }, `spec.falsePositiveRate in body should match`},
		{"capacity 0", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Capacity = 0 }, `spec.capacity in body should be greater than or equal to 1`},
		{"growth 0", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Growth = new(int32(0)) }, `spec.growth in body should be greater than or equal to 1`},
		{"growth 17", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Growth = new(int32(17)) }, `spec.growth in body should be less than or equal to 16`},
		{"partitions 0", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Partitions = new(int32(0)) }, `spec.partitions in body should be greater than or equal to 1`},
		{"partitions 1025", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Partitions = new(int32(1025)) },
			`spec.partitions in body should be less than or equal to 1024`},
		{"both expiries", func(f *bloomeryv1alpha1.BloomFilter) {
			f.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterCreate: &metav1.Duration{Duration: time.Hour}, AfterAccess: &metav1.Duration{Duration: time.Hour}}
		}, "give exactly one of afterCreate and afterAccess"},
		{"neither expiry", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{} }, "give exactly one of afterCreate and afterAccess"},
		{"the name list", func(f *bloomeryv1alpha1.BloomFilter) { f.Name = "list" }, "list is reserved by the data plane's API"},
		{"deletionPolicy Keep", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.DeletionPolicy = "Keep" }, `spec.deletionPolicy: Unsupported value: "Keep"`},
		{"no clusterRef name", func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.ClusterRef.Name = "" }, `spec.clusterRef.name in body should be at least 1 chars long`},
	}
	for i, tt := range tests {
		f := validFilter(ns, fmt.Sprintf("invalid-%d", i))
		tt.mutate(f)
		expectRejected(t, tt.name, k8s.Create(t.Context(), f), tt.message)
	}

	// The limits of the rules are themselves valid.
	for _, partitions := range []int32{1, 1024} {
		f := validFilter(ns, fmt.Sprintf("partitions-%d", partitions))
		f.Spec.Partitions = new(partitions)
		if err := k8s.Create(t.Context(), f); err != nil {
			t.Errorf("partitions %d must be valid: %v", partitions, err)
		}
	}
}

func TestBloomFilterDefaults(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	f := validFilter(ns, "defaults")
	if err := k8s.Create(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	var got bloomeryv1alpha1.BloomFilter
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(f), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Scalable == nil || !*got.Spec.Scalable {
		t.Errorf("scalable = %v, want the default true", got.Spec.Scalable)
	}
	if got.Spec.Growth == nil || *got.Spec.Growth != 2 {
		t.Errorf("growth = %v, want the default 2", got.Spec.Growth)
	}
	if got.Spec.DeletionPolicy != bloomeryv1alpha1.Delete {
		t.Errorf("deletionPolicy = %q, want the default Delete", got.Spec.DeletionPolicy)
	}
	if got.Spec.Expiry != nil {
		t.Errorf("expiry = %+v, want none", got.Spec.Expiry)
	}
	if got.Spec.Partitions != nil {
		t.Errorf("partitions = %d, want none: the data plane chooses", *got.Spec.Partitions)
	}
}

func TestBloomFilterShapeIsImmutable(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	// The filter is created with an expiry, with partitions, or with neither.
	const plain, expiry, partitions = 0, 1, 2
	tests := []struct {
		name    string
		with    int // plain, expiry or partitions
		mutate  func(*bloomeryv1alpha1.BloomFilter)
		message string
	}{
		{"clusterRef", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.ClusterRef.Name = "other" }, "clusterRef is immutable"},
		{"capacity", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Capacity = 2000 }, "capacity is immutable"},
		{"falsePositiveRate", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.FalsePositiveRate = "0.02" }, "falsePositiveRate is immutable"},
		{"scalable", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Scalable = new(false) }, "scalable is immutable"},
		{"growth", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Growth = new(int32(4)) }, "growth is immutable"},
		{"expiry changed", expiry, func(f *bloomeryv1alpha1.BloomFilter) {
			f.Spec.Expiry.AfterCreate = &metav1.Duration{Duration: 2 * time.Hour}
		}, "expiry is immutable"},
		{"expiry added", plain, func(f *bloomeryv1alpha1.BloomFilter) {
			f.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterCreate: &metav1.Duration{Duration: time.Hour}}
		}, "expiry cannot be added or removed"},
		{"expiry removed", expiry, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Expiry = nil }, "expiry cannot be added or removed"},
		{"partitions changed", partitions, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Partitions = new(int32(8)) }, "partitions is immutable"},
		{"partitions added", plain, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Partitions = new(int32(4)) }, "partitions cannot be added or removed"},
		{"partitions removed", partitions, func(f *bloomeryv1alpha1.BloomFilter) { f.Spec.Partitions = nil }, "partitions cannot be added or removed"},
	}
	for i, tt := range tests {
		f := validFilter(ns, fmt.Sprintf("immutable-%d", i))
		switch tt.with {
		case expiry:
			f.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterCreate: &metav1.Duration{Duration: time.Hour}}
		case partitions:
			f.Spec.Partitions = new(int32(4))
		}
		if err := k8s.Create(t.Context(), f); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		tt.mutate(f)
		expectRejected(t, tt.name, k8s.Update(t.Context(), f), tt.message)
	}

	// What is not shape may change.
	f := validFilter(ns, "mutable")
	if err := k8s.Create(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	f.Spec.DeletionPolicy = bloomeryv1alpha1.Retain
	if err := k8s.Update(t.Context(), f); err != nil {
		t.Errorf("deletionPolicy must be changeable: %v", err)
	}
}

func validCluster(ns, name string) *bloomeryv1alpha1.BloomCluster {
	return &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

func TestBloomClusterSchemaRejectsInvalidManifests(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	tests := []struct {
		name    string
		mutate  func(*bloomeryv1alpha1.BloomCluster)
		message string
	}{
		{"65 replicas", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(65)) }, "spec.replicas in body should be less than or equal to 64"},
		{"-1 replicas", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(-1)) }, "spec.replicas in body should be greater than or equal to 0"},
		{"logSync Sometimes", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Persistence.LogSync = "Sometimes" },
			`spec.persistence.logSync: Unsupported value: "Sometimes"`},
		{"interval in words", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Monitoring.ServiceMonitor.Interval = "30 seconds" },
			"spec.monitoring.serviceMonitor.interval in body should match"},
		{"interval without unit", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Monitoring.ServiceMonitor.Interval = "30" },
			"spec.monitoring.serviceMonitor.interval in body should match"},
		{"whenDeleted Orphan", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.WhenDeleted = "Orphan" }, `spec.storage.whenDeleted: Unsupported value: "Orphan"`},
		{"writeConsistency Most", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replication.WriteConsistency = "Most" },
			`spec.replication.writeConsistency: Unsupported value: "Most"`},
		{"imagePullPolicy Sometimes", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.ImagePullPolicy = "Sometimes" }, `spec.imagePullPolicy: Unsupported value: "Sometimes"`},
		{"snapshot trigger period 0", func(c *bloomeryv1alpha1.BloomCluster) {
			c.Spec.Persistence.SnapshotTriggers = []bloomeryv1alpha1.SnapshotTrigger{{PeriodSeconds: 0, UpdatesMoreThan: 1}}
		}, "spec.persistence.snapshotTriggers[0].periodSeconds in body should be greater than or equal to 1"},
		{"negative maxTotalBytes", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Limits.MaxTotalBytes = new(resource.MustParse("-1Gi")) },
			"maxTotalBytes must not be negative"},
		{"negative maxFilterBytes", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("-1")) },
			"maxFilterBytes must not be negative"},
		{"maxFilterBytes above maxTotalBytes", func(c *bloomeryv1alpha1.BloomCluster) {
			c.Spec.Limits.MaxTotalBytes, c.Spec.Limits.MaxFilterBytes = new(resource.MustParse("1Gi")), new(resource.MustParse("1025Mi"))
		}, "maxFilterBytes must not be more than maxTotalBytes"},
		{"storage size 0", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Storage.Size = new(resource.MustParse("0")) }, "size must be greater than 0"},
		{"a client peer that selects nothing", func(c *bloomeryv1alpha1.BloomCluster) {
			c.Spec.NetworkPolicy.ClientsFrom = []networkingv1.NetworkPolicyPeer{{}}
		}, "each peer must set podSelector, namespaceSelector or ipBlock"},
		{"a metrics peer that selects nothing", func(c *bloomeryv1alpha1.BloomCluster) {
			c.Spec.NetworkPolicy.MetricsFrom = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}, {}}
		}, "each peer must set podSelector, namespaceSelector or ipBlock"},
		{"a name that starts with a digit", func(c *bloomeryv1alpha1.BloomCluster) { c.Name = "1cluster" },
			"name must start with a lowercase letter"},
		{"a name too long for the pods' labels", func(c *bloomeryv1alpha1.BloomCluster) { c.Name = "c" + strings.Repeat("x", 52) },
			"name must be at most 52 characters"},
	}
	for i, tt := range tests {
		c := validCluster(ns, fmt.Sprintf("invalid-%d", i))
		tt.mutate(c)
		expectRejected(t, tt.name, k8s.Create(t.Context(), c), tt.message)
	}

	// The limits of the rules are themselves valid.
	edge := validCluster(ns, "c"+strings.Repeat("x", 51))
	edge.Spec.Replicas = new(int32(64))
	edge.Spec.Limits.MaxTotalBytes = new(resource.MustParse("0"))
	edge.Spec.Limits.MaxFilterBytes = new(resource.MustParse("1Ti")) // maxTotalBytes 0 is no limit
	edge.Spec.Monitoring.ServiceMonitor.Interval = "1m30s"
	if err := k8s.Create(t.Context(), edge); err != nil {
		t.Errorf("a 52-character name, 64 replicas, maxTotalBytes 0 with any maxFilterBytes and interval 1m30s must be valid: %v", err)
	}
	equal := validCluster(ns, "equal-limits")
	equal.Spec.Limits.MaxTotalBytes, equal.Spec.Limits.MaxFilterBytes = new(resource.MustParse("1Gi")), new(resource.MustParse("1024Mi"))
	if err := k8s.Create(t.Context(), equal); err != nil {
		t.Errorf("maxFilterBytes equal to maxTotalBytes must be valid: %v", err)
	}
}

func TestBloomClusterDefaults(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	c := validCluster(ns, "defaults")
	if err := k8s.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	var got bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	check := func(field string, ok bool, value any) {
		t.Helper()
		if !ok {
			t.Errorf("%s defaulted to %v", field, value)
		}
	}
	check("replicas", s.Replicas != nil && *s.Replicas == 1, s.Replicas)
	check("storage.size", s.Storage.Size != nil && s.Storage.Size.Cmp(resource.MustParse("1Gi")) == 0, s.Storage.Size)
	check("storage.whenDeleted", s.Storage.WhenDeleted == bloomeryv1alpha1.Retain, s.Storage.WhenDeleted)
	check("storage.whenScaled", s.Storage.WhenScaled == bloomeryv1alpha1.Retain, s.Storage.WhenScaled)
	check("persistence.logSync", s.Persistence.LogSync == bloomeryv1alpha1.LogSyncEverySecond, s.Persistence.LogSync)
	check("persistence.snapshotTriggers", len(s.Persistence.SnapshotTriggers) == 1 &&
		s.Persistence.SnapshotTriggers[0] == bloomeryv1alpha1.SnapshotTrigger{PeriodSeconds: 300, UpdatesMoreThan: 100}, s.Persistence.SnapshotTriggers)
	check("persistence.allowRecoveryFromCorruptSnapshot", s.Persistence.AllowRecoveryFromCorruptSnapshot != nil && *s.Persistence.AllowRecoveryFromCorruptSnapshot,
		s.Persistence.AllowRecoveryFromCorruptSnapshot)
	check("podDisruptionBudget.enabled", s.PodDisruptionBudget.Enabled != nil && *s.PodDisruptionBudget.Enabled, s.PodDisruptionBudget.Enabled)
	check("podDisruptionBudget.maxUnavailable", s.PodDisruptionBudget.MaxUnavailable != nil && *s.PodDisruptionBudget.MaxUnavailable == intstr.FromInt32(1),
		s.PodDisruptionBudget.MaxUnavailable)
	check("monitoring.serviceMonitor.enabled", !s.Monitoring.ServiceMonitor.Enabled, s.Monitoring.ServiceMonitor.Enabled)
	check("monitoring.serviceMonitor.interval", s.Monitoring.ServiceMonitor.Interval == "30s", s.Monitoring.ServiceMonitor.Interval)
	check("replication.writeConsistency", s.Replication.WriteConsistency == bloomeryv1alpha1.ConsistencyQuorum, s.Replication.WriteConsistency)
	check("networkPolicy.enabled", s.NetworkPolicy.Enabled != nil && *s.NetworkPolicy.Enabled, s.NetworkPolicy.Enabled)

	// Replicas may change; the status subresource keeps spec writes out of status.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c bloomeryv1alpha1.BloomCluster
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "defaults"}, &c); err != nil {
			return err
		}
		c.Spec.Replicas = new(int32(0))
		c.Status.Filters = 7
		return k8s.Update(t.Context(), &c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), &got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 0 || got.Status.Filters != 0 {
		t.Errorf("after an update of spec and status: replicas %d (want 0), status.filters %d (want 0: status is a subresource)",
			*got.Spec.Replicas, got.Status.Filters)
	}
}

// spec.replication.factor is at least 1 and at most replicas, the defaulted replicas (1) included;
// a cluster scaled to 0 keeps its factor.
func TestBloomClusterReplicationFactorValidation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	withFactor := func(name string, replicas *int32, factor int32) *bloomeryv1alpha1.BloomCluster {
		c := validCluster(ns, name)
		c.Spec.Replicas = replicas
		c.Spec.Replication.Factor = new(factor)
		return c
	}
	expectRejected(t, "factor 0", k8s.Create(t.Context(), withFactor("factor-zero", new(int32(3)), 0)),
		"spec.replication.factor in body should be greater than or equal to 1")
	expectRejected(t, "factor above replicas", k8s.Create(t.Context(), withFactor("factor-above", new(int32(2)), 3)),
		"replication.factor must not be more than replicas")
	expectRejected(t, "factor above the default replicas", k8s.Create(t.Context(), withFactor("factor-default", nil, 2)),
		"replication.factor must not be more than replicas")

	for _, c := range []*bloomeryv1alpha1.BloomCluster{
		withFactor("factor-equal", new(int32(3)), 3),
		withFactor("factor-below", new(int32(5)), 2),
		withFactor("factor-one", nil, 1),
		withFactor("factor-stopped", new(int32(0)), 2),
	} {
		if err := k8s.Create(t.Context(), c); err != nil {
			t.Errorf("%s (replicas %v, factor %d) must be valid: %v", c.Name, c.Spec.Replicas, *c.Spec.Replication.Factor, err)
		}
	}

	// A scale below the factor is refused, through the spec as through the scale subresource.
	c := getCluster(t, ns, "factor-below")
	c.Spec.Replicas = new(int32(1))
	expectRejected(t, "replicas below factor", k8s.Update(t.Context(), c), "replication.factor must not be more than replicas")
	scale := &autoscalingv1.Scale{}
	if err := k8s.SubResource("scale").Get(t.Context(), getCluster(t, ns, "factor-below"), scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 1
	expectRejected(t, "scale below factor", k8s.SubResource("scale").Update(t.Context(), getCluster(t, ns, "factor-below"), client.WithSubResourceBody(scale)),
		"replication.factor must not be more than replicas")
}
