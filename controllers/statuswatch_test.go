package controllers

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// What a pod's poll requeues: the filters whose status a pass would write anew.
func TestChangedFilters(t *testing.T) {
	base := wire.FilterStatus{Name: "f", ExpectedInsertions: 1000, FPP: 0.01, Partitions: 1, PartitionsHeld: 1, PartitionsOwned: 1,
		Items: 1000, SizeBytes: 1 << 20, EstimatedFillRatio: 0.5}
	with := func(change func(*wire.FilterStatus)) wire.FilterStatus {
		s := base
		change(&s)
		return s
	}
	for _, tt := range []struct {
		name     string
		now      wire.FilterStatus
		wasFresh bool
		want     bool
	}{
		{"the same", base, true, false},
		{"items up by 1%", with(func(s *wire.FilterStatus) { s.Items = 1010 }), true, false},
		{"items up by 2%", with(func(s *wire.FilterStatus) { s.Items = 1020 }), true, true},
		{"items to zero", with(func(s *wire.FilterStatus) { s.Items = 0 }), true, true},
		{"a new layer of the same size", with(func(s *wire.FilterStatus) { s.Layers = 2 }), true, false},
		{"fill ratio up by a tenth", with(func(s *wire.FilterStatus) { s.EstimatedFillRatio = 0.55 }), true, true},
		{"another snapshot", with(func(s *wire.FilterStatus) { s.LastSnapshot = "2026-12-03T00:00:00Z" }), true, false},
		{"another shape", with(func(s *wire.FilterStatus) { s.FPP = 0.001 }), true, true},
		{"a partition pulled", with(func(s *wire.FilterStatus) { s.PartitionsHeld = 0 }), true, true},
		{"the same, after a failed poll", base, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := changedFilters(map[string]wire.FilterStatus{"f": base}, map[string]wire.FilterStatus{"f": tt.now}, []string{"f"}, tt.wasFresh)
			if want := tt.want; slices.Contains(got, "f") != want {
				t.Errorf("changed %v, want f changed: %v", got, want)
			}
		})
	}
	got := changedFilters(map[string]wire.FilterStatus{"gone": base}, map[string]wire.FilterStatus{"new": base}, []string{"gone", "new"}, true)
	slices.Sort(got)
	if !slices.Equal(got, []string{"gone", "new"}) {
		t.Errorf("a filter gone and one new: %v changed", got)
	}
	// An answer of changes names what it carries: the filters it does not name are as they were.
	untouched := map[string]wire.FilterStatus{"f": with(func(s *wire.FilterStatus) { s.FPP = 0.001 }), "g": base}
	if got := changedFilters(map[string]wire.FilterStatus{"f": base}, untouched, []string{"g"}, true); !slices.Equal(got, []string{"g"}) {
		t.Errorf("an answer that names g alone: %v changed, want g", got)
	}
}

// A filter a pass created on a pod is requeued by the pod's next answer only if the pod's status
// then differs from what the create answered, which the pass reported; a failed create is
// requeued by it whatever it says.
func TestACreatedFilterIsRequeuedOnlyIfItChanged(t *testing.T) {
	w := newStatusWatch(nil, time.Second, time.Minute)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-0", UID: "u"}}
	addr := Pod{Name: "c-0", IP: "192.0.2.1", Port: 8090}
	key := podKey{"ns", "c-0", "u"}
	w.status(pod, addr, "f") // watches the pod; not started, the watch polls nothing: the test answers
	w.ctx = t.Context()
	w.answered(key, addr, wire.FilterStatuses{Version: "v1"})
	requeued := func() []string {
		var out []string
		for {
			select {
			case e := <-w.requeue:
				out = append(out, e.Object.GetName())
			default:
				slices.Sort(out)
				return out
			}
		}
	}
	requeued() // the first answer's

	created := wire.FilterStatus{Name: "f", ExpectedInsertions: 1000, FPP: 0.01, Partitions: 1, PartitionsHeld: 1, PartitionsOwned: 1}
	w.createdOnPod(pod, "f", created, nil)
	w.createdOnPod(pod, "g", wire.FilterStatus{}, errors.New("refused"))
	w.answered(key, addr, wire.FilterStatuses{Version: "v2", Changes: true, Filters: []wire.FilterStatus{created}})
	if got := requeued(); !slices.Equal(got, []string{"g"}) {
		t.Errorf("after the answer that brings f as created: %v requeued, want g alone (its create failed)", got)
	}
	grown := created
	grown.PartitionsHeld = 0
	w.answered(key, addr, wire.FilterStatuses{Version: "v3", Changes: true, Filters: []wire.FilterStatus{grown}})
	if got := requeued(); !slices.Equal(got, []string{"f"}) {
		t.Errorf("after f changed on the pod: %v requeued, want f", got)
	}
}

// changingPod answers every poll at once with a new version, as a pod does while filters are
// created on it without pause, and counts the polls.
type changingPod struct {
	DataPlane
	polls atomic.Int64
}

func (d *changingPod) FilterStatuses(context.Context, Pod, string, time.Duration) (wire.FilterStatuses, error) {
	n := d.polls.Add(1)
	return wire.FilterStatuses{Version: strconv.FormatInt(n, 10)}, nil
}

// A pod whose every answer is a change is polled at most once per interval, not as fast as it
// answers: each answer costs the pod a look at all its filters.
func TestAPodIsPolledAtMostOncePerInterval(t *testing.T) {
	pod := &changingPod{}
	w := newStatusWatch(func() DataPlane { return pod }, time.Second, time.Minute)
	w.interval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = w.Start(ctx) }()
	w.status(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-0", UID: "u"}}, Pod{Name: "c-0", IP: "192.0.2.1", Port: 8090}, "f")
	await.Until(t, 10*time.Second, "the first poll", func() (bool, string) { return pod.polls.Load() > 0, "" })
	const window = time.Second
	before := pod.polls.Load()
	time.Sleep(window)
	if got, most := pod.polls.Load()-before, int64(window/w.interval)+1; got > most {
		t.Errorf("%d polls in %v of a pod that answers every one at once, want at most %d (one per %v)", got, window, most, w.interval)
	}
}

// A copy a pass expects to leave its pod by replication (a peer took its delete) is requeued by
// the pod's next answer that carries every filter, if it still lists it: the pass then deletes it
// from that pod.
func TestACopyLeftByTheReplicationIsRequeued(t *testing.T) {
	w := newStatusWatch(nil, time.Second, time.Minute)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-1", UID: "u"}}
	addr := Pod{Name: "c-1", IP: "192.0.2.1", Port: 8090}
	key := podKey{"ns", "c-1", "u"}
	w.status(pod, addr, "f")
	w.ctx = t.Context()
	held := wire.FilterStatus{Name: "f", ExpectedInsertions: 1000, FPP: 0.01, Partitions: 1, PartitionsHeld: 1, PartitionsOwned: 1}
	w.answered(key, addr, wire.FilterStatuses{Version: "v1", Filters: []wire.FilterStatus{held}})
	<-w.requeue // the first answer's

	w.answered(key, addr, wire.FilterStatuses{Version: "v1", Filters: []wire.FilterStatus{held}})
	if len(w.requeue) != 0 {
		t.Fatal("an answer that lists f unchanged requeued it")
	}
	w.deletedOnPod(pod, "f")
	w.answered(key, addr, wire.FilterStatuses{Version: "v1", Filters: []wire.FilterStatus{held}})
	if len(w.requeue) != 1 {
		t.Errorf("the answer that still lists f after its delete went to a peer requeued %d filters, want f", len(w.requeue))
	}
}
