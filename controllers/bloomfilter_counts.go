package controllers

import (
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The counts of a filter (its items, bytes, fill ratio and false positive rate, the filter's and
// each pod's) move with every write its clients make. Written at every pass, they would patch
// every busy filter at every resync, and requeue whatever watches BloomFilters. A change of the
// counts alone is therefore written only when they moved by more than countsHysteresis, and at
// most once per CountsRefresh for a filter; any other change of status writes them as they are.
const (
	// countsHysteresis is the relative change of a count that is worth a write (1%).
	countsHysteresis = 0.01
	// defaultCountsRefresh is the default of BloomFilterReconciler.CountsRefresh.
	defaultCountsRefresh = time.Minute
)

// settleCounts decides whether the counts of cur, the status a pass computed, are written: it
// puts old's counts back into cur when the counts are all that changed and they moved too
// little, or were written less than refresh ago (lastWrite). It returns whether cur holds counts
// that moved from old's on the same pods: such a write starts the next refresh period. The first
// counts of a pod (a new filter, a new pod) do not: the first writes of a new filter follow it.
func settleCounts(old, cur *bloomeryv1alpha1.BloomFilterStatus, lastWrite, now time.Time, refresh time.Duration) bool {
	kept := cur.DeepCopy()
	if !copyCounts(old, kept) {
		return false // another pod set: not counts alone, and no counts of those pods before
	}
	if !equality.Semantic.DeepEqual(old, kept) {
		return countsMoved(old, cur) // something else changed: the counts go with it
	}
	if countsMoved(old, cur) && now.Sub(lastWrite) >= refresh {
		return true
	}
	*cur = *kept
	return false
}

// copyCounts copies the counts of from into to, pod by pod; false when the two list other pods.
func copyCounts(from, to *bloomeryv1alpha1.BloomFilterStatus) bool {
	if len(from.Pods) != len(to.Pods) {
		return false
	}
	for i := range from.Pods {
		if from.Pods[i].Pod != to.Pods[i].Pod {
			return false
		}
		to.Pods[i].Items, to.Pods[i].SizeBytes = from.Pods[i].Items, from.Pods[i].SizeBytes
	}
	to.Items, to.SizeBytes = from.Items, from.SizeBytes
	to.FillRatio, to.EstimatedFalsePositiveRate = from.FillRatio, from.EstimatedFalsePositiveRate
	return true
}

// countsMoved reports whether a count moved by more than countsHysteresis, or to or from zero.
func countsMoved(old, cur *bloomeryv1alpha1.BloomFilterStatus) bool {
	if moved(float64(old.Items), float64(cur.Items)) || moved(float64(old.SizeBytes), float64(cur.SizeBytes)) ||
		moved(rate(old.FillRatio), rate(cur.FillRatio)) {
		return true
	}
	for i := range old.Pods {
		if moved(float64(old.Pods[i].Items), float64(cur.Pods[i].Items)) || moved(float64(old.Pods[i].SizeBytes), float64(cur.Pods[i].SizeBytes)) {
			return true
		}
	}
	return false
}

func moved(old, cur float64) bool {
	if old == cur {
		return false
	}
	if old == 0 || cur == 0 {
		return true
	}
	return math.Abs(cur-old) > countsHysteresis*math.Abs(old)
}

// rate reads a rate written by formatRate; "" (never written) is 0.
func rate(s string) float64 {
	x, _ := strconv.ParseFloat(s, 64)
	return x
}
