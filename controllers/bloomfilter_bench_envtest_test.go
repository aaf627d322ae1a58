package controllers

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"

	"github.com/bloomery/bloomery/internal/await"
)

// BenchmarkFiveHundredFiltersReady creates 500 BloomFilters on a cluster of three pods and
// reports how long they took to become Ready and how many reconciles it took:
//
//	go test -run '^$' -bench FiveHundred -benchtime 1x ./controllers
func BenchmarkFiveHundredFiltersReady(b *testing.B) {
	const filters = 500
	for b.Loop() {
		ns := newNamespace(b)
		createCluster(b, ns, "c", 3)
		for i := range 3 {
			addPod(b, ns, "c", fmt.Sprintf("c-%d", i))
		}
		startFilterReconciler(b, ns)
		before := reconciles(b)
		start := time.Now()
		for i := range filters {
			createBloomFilter(b, ns, fmt.Sprintf("f-%03d", i), "c")
		}
		await.Until(b, 5*time.Minute, "500 filters Ready", func() (bool, string) {
			var list bloomeryv1alpha1.BloomFilterList
			if err := k8s.List(b.Context(), &list); err != nil {
				return false, err.Error()
			}
			ready := 0
			for _, bf := range list.Items {
				if bf.Namespace == ns && meta.IsStatusConditionTrue(bf.Status.Conditions, ConditionReady) {
					ready++
				}
			}
			return ready == filters, fmt.Sprintf("%d of %d ready", ready, filters)
		})
		elapsed := time.Since(start)
		b.ReportMetric(elapsed.Seconds(), "s-to-ready")
		b.ReportMetric(reconciles(b)-before, "reconciles")
	}
}

// reconciles reads controller-runtime's count of BloomFilter reconciles.
func reconciles(tb testing.TB) float64 {
	tb.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "controller") == "bloomfilter" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
