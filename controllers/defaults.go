package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// What a reconciler's settings left at their zero value mean, so that a reconciler built in a
// test or by hand, without SetupWithManager, runs as in production rather than panicking or never
// requeueing.
const (
	// defaultResync is the period of passes without events: a pod that lost a filter or forgot its
	// membership, and a drifted ServiceMonitor (not watched: its kind may not exist), send none.
	defaultResync = 30 * time.Second
	// defaultFilterResync is the period of a BloomFilter's passes without events: a safety net,
	// since the pods' polls (statuswatch.go) requeue a filter whose status changed on a pod.
	defaultFilterResync = 10 * time.Minute
	// defaultDeleteGiveUp is how long a BloomFilter's deletion retries pods that do not answer.
	defaultDeleteGiveUp = 2 * time.Minute
	// defaultPodParallelism bounds the concurrent calls to the pods of one pass.
	defaultPodParallelism = 8
)

// positiveOr is v, or def when v is zero or negative.
func positiveOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// defaultDataPlane is shared by every reconciler given none, so that they share its connections.
var defaultDataPlane = sync.OnceValue(func() DataPlane { return NewHTTPDataPlane(DefaultPodTimeout) })

// dataPlaneOr is d, or the shared HTTP data plane when d is nil.
func dataPlaneOr(d DataPlane) DataPlane {
	if d == nil {
		return defaultDataPlane()
	}
	return d
}

// orNoop is rec, or a recorder that drops every event when rec is nil.
func orNoop(rec recorder.EventRecorder) recorder.EventRecorder {
	if rec == nil {
		return noopRecorder{}
	}
	return rec
}

type noopRecorder struct{}

func (noopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

func (noopRecorder) AnnotatedEventf(runtime.Object, runtime.Object, map[string]string, string, string, string, string, ...any) {
}
