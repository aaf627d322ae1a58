package controllers

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The pure parts of report, which need no API server: the summary of the pods' observations, and
// the conditions decided from it.

func holding(pod string, items, size int64) podObservation {
	return podObservation{status: bloomeryv1alpha1.PodFilterStatus{Pod: pod, Present: true, Items: items, SizeBytes: size}}
}

func TestSummarize(t *testing.T) {
	created := func(o podObservation) podObservation { o.created = true; return o }
	observed := []podObservation{
		created(holding("c-0", 10, 100)),
		created(holding("c-1", 12, 90)),
		{status: bloomeryv1alpha1.PodFilterStatus{Pod: "c-2"}, unreachable: true},
		{status: bloomeryv1alpha1.PodFilterStatus{Pod: "c-3"}, mismatch: true},
		{status: bloomeryv1alpha1.PodFilterStatus{Pod: "c-4"}, waiting: true},
	}
	observed[0].filter.EstimatedFillRatio, observed[1].filter.EstimatedFPP = 0.5, 0.01
	s := summarize("c", 6, observed, map[string]bool{"c-1": true, "c-2": true})

	if s.cluster != "c" || s.desired != 6 || s.observed != 5 || s.present() != 2 {
		t.Errorf("cluster %q, desired %d, observed %d, present %d; want c, 6, 5, 2", s.cluster, s.desired, s.observed, s.present())
	}
	for _, tt := range []struct {
		what      string
		got, want []string
	}{
		{"unreachable", s.unreachable, []string{"c-2"}},
		{"mismatched", s.mismatched, []string{"c-3"}},
		{"waiting", s.waiting, []string{"c-4"}},
		{"created", s.created, []string{"c-0", "c-1"}},
		{"recreated", s.recreated, []string{"c-1"}}, // c-2 held it too, but was not created again
		{"not serving", s.notServing, []string{"c-4", "1 pod(s) not created yet"}},
		{"problems", s.problems(), []string{"pods not answering: c-2", "pods holding a filter of another shape: c-3"}},
	} {
		if !slices.Equal(tt.got, tt.want) {
			t.Errorf("%s = %q, want %q", tt.what, tt.got, tt.want)
		}
	}
	if len(s.pods) != 5 || s.pods[3].Pod != "c-3" {
		t.Errorf("pods %+v, want the five observed, in order", s.pods)
	}
	if s.items != 12 || s.size != 100 || s.partitions != 1 || s.fill != 0.5 || s.fpr != 0.01 {
		t.Errorf("items %d, size %d, partitions %d, fill %v, fpr %v; want the largest of each: 12, 100, 1, 0.5, 0.01",
			s.items, s.size, s.partitions, s.fill, s.fpr)
	}

	// Partial copies: the sums over the average number of copies of a partition.
	part := func(pod string, held int32, items, size int64) podObservation {
		o := holding(pod, items, size)
		o.status.PartitionsHeld, o.filter = held, wire.FilterStatus{Partitions: 4}
		return o
	}
	s = summarize("c", 2, []podObservation{part("c-0", 2, 100, 1000), part("c-1", 2, 120, 1200)}, nil)
	if s.items != 220 || s.size != 2200 || s.partitions != 4 {
		t.Errorf("partial copies: items %d, size %d, partitions %d; want 220, 2200, 4", s.items, s.size, s.partitions)
	}
	if s = summarize("c", 0, nil, nil); s.observed != 0 || s.pods != nil {
		t.Errorf("no pods: %+v", s)
	}
}

func TestFilterConditions(t *testing.T) {
	type cond struct {
		status  metav1.ConditionStatus
		reason  string
		message string
	}
	const (
		yes = metav1.ConditionTrue
		no  = metav1.ConditionFalse
	)
	tests := []struct {
		name                         string
		s                            filterSummary
		degraded, ready, progressing cond
	}{
		{
			name:        "on every pod",
			s:           filterSummary{cluster: "c", desired: 2, observed: 2},
			degraded:    cond{no, ReasonAsExpected, "Every pod that answers holds the filter"},
			ready:       cond{yes, ReasonOnAllPods, "The filter is on all 2 pods"},
			progressing: cond{no, ReasonAsExpected, ""},
		},
		{
			name:        "scaled to zero",
			s:           filterSummary{cluster: "c"},
			degraded:    cond{no, ReasonAsExpected, "Every pod that answers holds the filter"},
			ready:       cond{no, ReasonNoPods, "BloomCluster c has no pods"},
			progressing: cond{no, ReasonNoPods, "Waiting for pods"},
		},
		{
			name:        "pods not created yet",
			s:           filterSummary{cluster: "c", desired: 3},
			degraded:    cond{no, ReasonAsExpected, "Every pod that answers holds the filter"},
			ready:       cond{no, ReasonNoPods, "BloomCluster c has no pods"},
			progressing: cond{yes, ReasonNoPods, "Waiting for pods"},
		},
		{
			name:        "a pod still starting",
			s:           filterSummary{cluster: "c", desired: 3, observed: 3, waiting: []string{"c-2"}, notServing: []string{"c-2"}},
			degraded:    cond{yes, ReasonPodsNotReady, "The filter is served by 2 of 3 pods; not serving yet: c-2"},
			ready:       cond{no, ReasonCreating, "The filter is on 2 of 3 pods; waiting for pods: c-2"},
			progressing: cond{yes, ReasonCreating, "The filter is on 2 of 3 pods; waiting for pods: c-2"},
		},
		{
			name:        "no pod serves it yet",
			s:           filterSummary{cluster: "c", desired: 1, observed: 1, waiting: []string{"c-0"}, notServing: []string{"c-0"}},
			degraded:    cond{no, ReasonAsExpected, "Every pod that answers holds the filter"},
			ready:       cond{no, ReasonCreating, "The filter is on 0 of 1 pods; waiting for pods: c-0"},
			progressing: cond{yes, ReasonCreating, "The filter is on 0 of 1 pods; waiting for pods: c-0"},
		},
		{
			name:        "a pod does not answer",
			s:           filterSummary{cluster: "c", desired: 2, observed: 2, unreachable: []string{"c-1"}},
			degraded:    cond{yes, ReasonPodsUnreachable, "pods not answering: c-1"},
			ready:       cond{no, ReasonPodsUnreachable, "The filter is on 1 of 2 pods; pods not answering: c-1"},
			progressing: cond{yes, ReasonPodsUnreachable, "The filter is on 1 of 2 pods; pods not answering: c-1"},
		},
		{
			name:        "another shape wins over unreachable",
			s:           filterSummary{cluster: "c", desired: 3, observed: 3, unreachable: []string{"c-1"}, mismatched: []string{"c-2"}},
			degraded:    cond{yes, ReasonShapeMismatch, "pods not answering: c-1; pods holding a filter of another shape: c-2"},
			ready:       cond{no, ReasonPodsUnreachable, "The filter is on 1 of 3 pods; pods not answering: c-1; pods holding a filter of another shape: c-2"},
			progressing: cond{yes, ReasonPodsUnreachable, "The filter is on 1 of 3 pods; pods not answering: c-1; pods holding a filter of another shape: c-2"},
		},
		{
			name:        "another shape alone",
			s:           filterSummary{cluster: "c", desired: 2, observed: 2, mismatched: []string{"c-0"}},
			degraded:    cond{yes, ReasonShapeMismatch, "pods holding a filter of another shape: c-0"},
			ready:       cond{no, ReasonCreating, "The filter is on 1 of 2 pods; pods holding a filter of another shape: c-0"},
			progressing: cond{yes, ReasonCreating, "The filter is on 1 of 2 pods; pods holding a filter of another shape: c-0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				typ  string
				got  metav1.Condition
				want cond
			}{
				{ConditionDegraded, degradedCondition(tt.s), tt.degraded},
				{ConditionReady, readyCondition(tt.s), tt.ready},
				{ConditionProgressing, progressingCondition(tt.s), tt.progressing},
			} {
				if got := (cond{c.got.Status, c.got.Reason, c.got.Message}); c.got.Type != c.typ || got != c.want {
					t.Errorf("%s = %s %+v, want %+v", c.typ, c.got.Type, got, c.want)
				}
			}
		})
	}
}
