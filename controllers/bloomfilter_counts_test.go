package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

func countsStatus(items int64, fill string) *bloomeryv1alpha1.BloomFilterStatus {
	return &bloomeryv1alpha1.BloomFilterStatus{
		Items: items, SizeBytes: 4096, FillRatio: fill, EstimatedFalsePositiveRate: "0.001",
		Pods: []bloomeryv1alpha1.PodFilterStatus{{Pod: "c-0", Present: true, Items: items, SizeBytes: 4096}},
	}
}

// The counts of a busy filter are written when they moved by more than the hysteresis, at most
// once per refresh; anything else that changes writes them as they are.
func TestSettleCounts(t *testing.T) {
	now := time.Now()
	refresh := time.Minute
	long, recent := now.Add(-2*refresh), now.Add(-refresh/2)
	for _, tc := range []struct {
		name      string
		old, cur  *bloomeryv1alpha1.BloomFilterStatus
		lastWrite time.Time
		written   bool  // settleCounts's answer: counts moved on the same pods were written
		items     int64 // the items cur holds afterwards
	}{
		{"unchanged", countsStatus(1000, "0.1"), countsStatus(1000, "0.1"), long, false, 1000},
		{"within the hysteresis", countsStatus(1000, "0.1"), countsStatus(1005, "0.1005"), long, false, 1000},
		{"beyond it, refresh passed", countsStatus(1000, "0.1"), countsStatus(1100, "0.11"), long, true, 1100},
		{"beyond it, written recently", countsStatus(1000, "0.1"), countsStatus(1100, "0.11"), recent, false, 1000},
		{"fill ratio alone beyond it", countsStatus(1000, "0.1"), countsStatus(1000, "0.2"), long, true, 1000},
		{"from zero", countsStatus(0, "0"), countsStatus(1, "0.0001"), long, true, 1},
		{"with a condition that changed", countsStatus(1000, "0.1"), func() *bloomeryv1alpha1.BloomFilterStatus {
			s := countsStatus(1001, "0.1")
			s.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse}}
			return s
		}(), recent, false, 1001},
		{"with a condition that changed, counts beyond it", countsStatus(1000, "0.1"), func() *bloomeryv1alpha1.BloomFilterStatus {
			s := countsStatus(1100, "0.1")
			s.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse}}
			return s
		}(), recent, true, 1100},
		{"with another pod", countsStatus(1000, "0.1"), func() *bloomeryv1alpha1.BloomFilterStatus {
			s := countsStatus(1001, "0.1")
			s.Pods = append(s.Pods, bloomeryv1alpha1.PodFilterStatus{Pod: "c-1"})
			return s
		}(), recent, false, 1001},
	} {
		cur := tc.cur.DeepCopy()
		written := settleCounts(tc.old, cur, tc.lastWrite, now, refresh)
		if written != tc.written || cur.Items != tc.items || cur.Pods[0].Items != tc.items {
			t.Errorf("%s: written %v, items %d (pod %d); want %v, %d", tc.name, written, cur.Items, cur.Pods[0].Items, tc.written, tc.items)
		}
	}
}
