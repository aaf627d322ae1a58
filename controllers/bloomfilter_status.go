package controllers

import (
	"fmt"
	"math"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// filterSummary is what a pass saw of a filter on the cluster's pods: the status it reports and
// what the conditions are decided from. summarize makes it and the condition functions read it,
// all without an API server, so that their tests need none.
type filterSummary struct {
	cluster  string // the BloomCluster's name
	desired  int32  // the pods the cluster asks for
	observed int32  // the pods seen
	// The pods without the filter, by why (each pod is in at most one), and the pods that do not
	// serve it, with how many are not created yet (notServing).
	unreachable, mismatched, waiting, notServing []string
	// created are the pods the pass created the filter on; recreated those of them that held it
	// at the previous pass, and lost it.
	created, recreated []string

	pods        []bloomeryv1alpha1.PodFilterStatus
	items, size int64
	partitions  int32 // 0 until a pod that holds the filter reports it
	fill, fpr   float64
}

// summarize sums up the pods' observations. wasPresent says which pods held the filter at the
// previous pass.
func summarize(cluster string, desired int32, observed []podObservation, wasPresent map[string]bool) filterSummary {
	s := filterSummary{cluster: cluster, desired: desired, observed: int32(len(observed))}
	// The sums over the pods, and of the copies of a partition they hold (partitions held over
	// partitions): with partitions placed on some pods only, the filter's items and bytes are the
	// sums over the copies.
	var sumItems, sumSize int64
	var copies float64
	var partial bool
	for _, o := range observed {
		s.pods = append(s.pods, o.status)
		switch {
		case o.mismatch:
			s.mismatched = append(s.mismatched, o.status.Pod)
		case o.unreachable:
			s.unreachable = append(s.unreachable, o.status.Pod)
		case o.waiting:
			s.waiting = append(s.waiting, o.status.Pod)
		}
		if o.created {
			s.created = append(s.created, o.status.Pod)
			if wasPresent[o.status.Pod] {
				s.recreated = append(s.recreated, o.status.Pod)
			}
		}
		if o.status.Present {
			s.items, s.size = max(s.items, o.status.Items), max(s.size, o.status.SizeBytes)
			sumItems, sumSize = sumItems+o.status.Items, sumSize+o.status.SizeBytes
			held, all := o.status.PartitionsHeld, int32(partitionsOf(o.filter))
			copies += float64(held) / float64(all)
			partial = partial || (held > 0 && held < all)
			s.partitions = max(s.partitions, int32(partitionsOf(o.filter)))
			s.fill, s.fpr = max(s.fill, o.filter.EstimatedFillRatio), max(s.fpr, o.filter.EstimatedFPP)
		}
	}
	if partial && copies > 0 {
		s.items, s.size = int64(math.Round(float64(sumItems)/copies)), int64(math.Round(float64(sumSize)/copies))
	}
	s.notServing = notServing(observed, desired)
	return s
}

// present is how many pods serve the filter.
func (s filterSummary) present() int32 {
	return s.observed - int32(len(s.unreachable)+len(s.mismatched)+len(s.waiting))
}

// problems are the pods that need a look, by why.
func (s filterSummary) problems() []string {
	var problems []string
	if len(s.unreachable) > 0 {
		problems = append(problems, "pods not answering: "+strings.Join(s.unreachable, ", "))
	}
	if len(s.mismatched) > 0 {
		problems = append(problems, "pods holding a filter of another shape: "+strings.Join(s.mismatched, ", "))
	}
	return problems
}

// ready says whether every pod the cluster asks for serves the filter.
func (s filterSummary) ready() bool {
	return s.desired > 0 && s.present() == s.desired && s.observed == s.desired
}

// degradedCondition is Degraded: true while a pod holds another shape, does not answer, or (while
// others serve it) does not serve the filter yet.
func degradedCondition(s filterSummary) metav1.Condition {
	c := metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue}
	present := s.present()
	switch {
	case len(s.mismatched) > 0:
		c.Reason, c.Message = ReasonShapeMismatch, strings.Join(s.problems(), "; ")
	case len(s.unreachable) > 0:
		c.Reason, c.Message = ReasonPodsUnreachable, strings.Join(s.problems(), "; ")
	case present > 0 && present < s.desired:
		// Served, with less redundancy than asked for: a pod was deleted, restarted or is
		// catching up.
		c.Reason = ReasonPodsNotReady
		c.Message = fmt.Sprintf("The filter is served by %d of %d pods; not serving yet: %s", present, s.desired, strings.Join(s.notServing, ", "))
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonAsExpected, "Every pod that answers holds the filter"
	}
	return c
}

// readyCondition is Ready: true once the filter is on every pod the cluster asks for.
func readyCondition(s filterSummary) metav1.Condition {
	c := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case s.ready():
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonOnAllPods, fmt.Sprintf("The filter is on all %d pods", s.desired)
	case s.desired == 0 || s.observed == 0:
		c.Reason, c.Message = ReasonNoPods, fmt.Sprintf("BloomCluster %s has no pods", s.cluster)
	default:
		c.Reason, c.Message = s.progress()
	}
	return c
}

// progressingCondition is Progressing: true while the filter is on its way to pods that lack it.
func progressingCondition(s filterSummary) metav1.Condition {
	c := metav1.Condition{Type: ConditionProgressing}
	switch {
	case s.ready():
		c.Status, c.Reason = metav1.ConditionFalse, ReasonAsExpected
	case s.desired == 0 || s.observed == 0:
		c.Status, c.Reason, c.Message = boolStatus(s.desired > 0), ReasonNoPods, "Waiting for pods"
	default:
		c.Status = metav1.ConditionTrue
		c.Reason, c.Message = s.progress()
	}
	return c
}

// progress is the reason and message of Ready and Progressing while the filter is on some of the
// pods: how many, and what holds the others back.
func (s filterSummary) progress() (reason, message string) {
	message = fmt.Sprintf("The filter is on %d of %d pods", s.present(), s.desired)
	if problems := s.problems(); len(problems) > 0 {
		message += "; " + strings.Join(problems, "; ")
	}
	if len(s.waiting) > 0 {
		message += "; waiting for pods: " + strings.Join(s.waiting, ", ")
	}
	reason = ReasonCreating
	if len(s.unreachable) > 0 {
		reason = ReasonPodsUnreachable
	}
	return reason, message
}
