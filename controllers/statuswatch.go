package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Pods tell, the operator listens: the statuses of a pod's filters come from one long poll per pod
// (wire.FilterStatusesPath), not from a call per filter and pass. A pod answers the poll when a
// filter appears, goes or changes its shape or partitions there, with what changed, and otherwise
// once per wait with every filter's counts; the watch requeues the BloomFilters whose status on
// that pod changed, and the passes read the pod's statuses from it instead of calling the pod. So
// the calls to a pod follow what changes on it and the wait, not the number of filters. A pod
// whose poll fails is called by the passes again, as before, until its poll answers.

const (
	// statusesRetry and statusesRetryMax bound the back-off between failed polls of a pod.
	statusesRetry    = time.Second
	statusesRetryMax = 30 * time.Second
	// statusesInterval is the least time between the starts of two polls of a pod. A pod answers
	// at once when its filters changed since the version the poll holds: while thousands are
	// created or deleted that is every answer, and each cost the pod a look at all its filters,
	// most of its CPU (10,000 filters on three pods). The pod looks once a second in any case.
	statusesInterval = time.Second
)

// statusWatch long-polls the statuses of every pod that a pass of a filter asked it about.
type statusWatch struct {
	dataPlane func() DataPlane
	// wait is how long a pod holds a poll without a change: one request per pod and wait, which
	// also brings its counts.
	wait time.Duration
	// idle is how long a pod's poll goes on after the last pass that read it: a pod that no
	// filter's pass reads any more (its cluster has no filters, or it is gone) stops being polled.
	idle time.Duration
	// interval is the least time between the starts of two polls of a pod (statusesInterval).
	interval time.Duration
	// requeue receives the BloomFilters to pass again, the source of the filter controller.
	requeue chan event.GenericEvent

	mu   sync.Mutex
	ctx  context.Context // the manager's, once started; nil before
	pods map[podKey]*podPoll
}

// podKey names a pod: a pod recreated under its name is another pod.
type podKey struct {
	namespace, name string
	uid             types.UID
}

// podPoll is the poll of one pod, guarded by statusWatch.mu.
type podPoll struct {
	addr     Pod       // how to call it, as the last pass that read it found it
	cluster  string    // the BloomCluster it serves
	lastRead time.Time // when a pass last read it
	// fresh is set while the last poll answered: statuses is then what the pod holds, at most a
	// second behind a change (the pod's own polling of its filters) plus the time to answer.
	fresh bool
	// version and statuses are the pod's as of its last answer, which may have carried only what
	// changed since the version before.
	version  string
	statuses map[string]wire.FilterStatus
	// requeued holds each filter's status as it was when the watch last requeued its BloomFilter:
	// the counts' moves are measured from it.
	requeued map[string]wire.FilterStatus
	// readDirect names the filters whose status passes took from the pod itself (while the poll
	// was not fresh, or from a create): the next answer requeues them, since the pod may have
	// changed them since without changing its version as the poll last saw it.
	readDirect map[string]struct{}
}

func newStatusWatch(dataPlane func() DataPlane, wait, idle time.Duration) *statusWatch {
	return &statusWatch{dataPlane: dataPlane, wait: wait, idle: idle, interval: statusesInterval, requeue: make(chan event.GenericEvent, 1024), pods: map[podKey]*podPoll{}}
}

// Start runs the polls until ctx ends (manager.Runnable): those of the pods that passes asked for
// before, and from then on each as soon as a pass asks for its pod.
func (w *statusWatch) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	for key := range w.pods {
		go w.poll(ctx, key)
	}
	w.mu.Unlock()
	<-ctx.Done()
	return nil
}

// status answers the status of the filter name on pod, called at addr, and whether the pod holds
// it, when the pod's poll is fresh; it starts polling the pod if no one does. When the poll is not
// fresh the caller reads the pod itself, and the poll's next fresh answer requeues the filter,
// since it may differ from what the pod answered the caller.
func (w *statusWatch) status(pod *corev1.Pod, addr Pod, name string) (st wire.FilterStatus, held, fresh bool) {
	if w == nil {
		return wire.FilterStatus{}, false, false
	}
	key := podKey{pod.Namespace, pod.Name, pod.UID}
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pods[key]
	if !ok {
		for other := range w.pods {
			if other.namespace == key.namespace && other.name == key.name {
				delete(w.pods, other) // the pod it replaced: its poll ends
			}
		}
		cluster, _ := clusterOfPod(pod)
		p = &podPoll{addr: addr, cluster: cluster.Name, requeued: map[string]wire.FilterStatus{}, readDirect: map[string]struct{}{}}
		w.pods[key] = p
		if w.ctx != nil {
			go w.poll(w.ctx, key)
		}
	}
	p.lastRead = time.Now()
	if !sameTarget(p.addr, addr) {
		// Another address or token: what the poll holds may be of the pod as it was.
		p.fresh = false
	}
	p.addr = addr // the TLS configuration of the latest pass
	if !p.fresh {
		p.readDirect[name] = struct{}{}
		return wire.FilterStatus{}, false, false
	}
	st, held = p.statuses[name]
	return st, held, true
}

// heldCopy is a pod's copy of a filter, as the pod's poll last saw it.
type heldCopy struct {
	pod     Pod
	cluster string
	status  wire.FilterStatus
}

// holders are the copies of the filter name on the pods of namespace whose polls are fresh.
func (w *statusWatch) holders(namespace, name string) []heldCopy {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []heldCopy
	for key, p := range w.pods {
		if st, held := p.statuses[name]; key.namespace == namespace && p.fresh && held {
			out = append(out, heldCopy{pod: p.addr, cluster: p.cluster, status: st})
		}
	}
	return out
}

// createdOnPod tells the watch that a pass created the filter name on pod, which answered st, or
// failed with err: what the pass reports of it came from the pod, not from the poll. The poll's
// next answer requeues the filter only if the pod's status then differs from st, as for a status
// the watch requeued the filter for: with thousands of filters created at once, requeueing each
// created one anyway was a third of the passes. After a failure it requeues it.
func (w *statusWatch) createdOnPod(pod *corev1.Pod, name string, st wire.FilterStatus, err error) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pods[podKey{pod.Namespace, pod.Name, pod.UID}]
	switch {
	case !ok:
	case err != nil:
		p.readDirect[name] = struct{}{}
	default:
		p.requeued[name] = st
	}
}

// deletedOnPod tells the watch that the filter name is to leave pod by replication from a peer
// that took its delete: if the pod's answers still list it, the next that carries every filter
// requeues it, as for a status that changed since the watch last requeued it.
func (w *statusWatch) deletedOnPod(pod *corev1.Pod, name string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pods[podKey{pod.Namespace, pod.Name, pod.UID}]; ok {
		delete(p.requeued, name)
	}
}

// poll long-polls one pod until no pass has read it for idle, or ctx ends.
func (w *statusWatch) poll(ctx context.Context, key podKey) {
	logger := log.FromContext(ctx).WithValues("namespace", key.namespace, "pod", key.name)
	retry := statusesRetry
	for ctx.Err() == nil {
		w.mu.Lock()
		p, ok := w.pods[key]
		if !ok || time.Since(p.lastRead) > w.idle {
			delete(w.pods, key)
			w.mu.Unlock()
			return
		}
		addr, version := p.addr, p.version
		w.mu.Unlock()

		started := time.Now()
		got, err := w.dataPlane().FilterStatuses(ctx, addr, version, w.wait)
		if ctx.Err() != nil {
			return // the operator stops: a poll cut short is no failure of the pod
		}
		if err != nil {
			if w.failed(key, addr) {
				logger.Info("Polling the pod's filter statuses failed; filters' passes call it until a poll answers", "error", err.Error())
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			retry = min(2*retry, statusesRetryMax)
			continue
		}
		retry = statusesRetry
		w.answered(key, addr, got)
		select {
		case <-ctx.Done():
		case <-time.After(w.interval - time.Since(started)):
		}
	}
}

// failed marks the pod's statuses stale and, when they were fresh, requeues the filters they
// held, so that their passes call the pod and report what it answers. It reports whether they
// were fresh.
func (w *statusWatch) failed(key podKey, addr Pod) bool {
	w.mu.Lock()
	p, ok := w.pods[key]
	if !ok {
		w.mu.Unlock()
		return false
	}
	wasFresh := p.fresh && sameTarget(p.addr, addr)
	var held []string
	if wasFresh {
		p.fresh = false
		for name := range p.statuses {
			held = append(held, name)
		}
	}
	w.mu.Unlock()
	for _, name := range held {
		w.requeueFilter(key.namespace, name)
	}
	return wasFresh
}

// answered takes a poll's answer, unless the pod's address changed meanwhile, and requeues the
// filters whose status on the pod changed.
func (w *statusWatch) answered(key podKey, addr Pod, got wire.FilterStatuses) {
	w.mu.Lock()
	p, ok := w.pods[key]
	if !ok || !sameTarget(p.addr, addr) {
		w.mu.Unlock()
		return
	}
	// The names whose status may have changed: those the answer carries, or every one.
	var touched []string
	if got.Changes && p.statuses != nil {
		for _, f := range got.Filters {
			p.statuses[f.Name] = f
			touched = append(touched, f.Name)
		}
		for _, name := range got.Removed {
			delete(p.statuses, name)
			touched = append(touched, name)
		}
	} else {
		p.statuses = make(map[string]wire.FilterStatus, len(got.Filters))
		for _, f := range got.Filters {
			p.statuses[f.Name] = f
			touched = append(touched, f.Name)
		}
		for name := range p.requeued {
			if _, ok := p.statuses[name]; !ok {
				touched = append(touched, name)
			}
		}
	}
	changed := changedFilters(p.requeued, p.statuses, touched, p.fresh)
	if len(p.readDirect) > 0 {
		named := make(map[string]bool, len(changed))
		for _, name := range changed {
			named[name] = true
		}
		for name := range p.readDirect {
			if !named[name] {
				changed = append(changed, name)
			}
		}
	}
	clear(p.readDirect)
	for _, name := range changed {
		if st, ok := p.statuses[name]; ok {
			p.requeued[name] = st
		} else {
			delete(p.requeued, name)
		}
	}
	p.version, p.fresh = got.Version, true
	w.mu.Unlock()
	for _, name := range changed {
		w.requeueFilter(key.namespace, name)
	}
}

// sameTarget reports whether a and b call the same pod with the same token.
func sameTarget(a, b Pod) bool { return a.baseURL() == b.baseURL() && a.Token == b.Token }

// changedFilters names the filters among touched whose status differs from the one last requeued
// for: present or not, another shape or partitions, or counts moved by more than countsHysteresis
// (the filters' passes write no smaller move). A first answer after a failure requeues every
// filter the pod holds, since the passes meanwhile reported what the pod answered them.
func changedFilters(requeued, now map[string]wire.FilterStatus, touched []string, wasFresh bool) []string {
	var out []string
	if !wasFresh {
		for name := range now {
			out = append(out, name)
		}
	}
	for _, name := range touched {
		st, held := now[name]
		before, was := requeued[name]
		switch {
		case !wasFresh && held: // already named
		case held != was, held && statusMoved(before, st):
			out = append(out, name)
		}
	}
	return out
}

// statusMoved reports whether a pass would write a change from before to now.
func statusMoved(before, now wire.FilterStatus) bool {
	counts := func(s wire.FilterStatus) wire.FilterStatus {
		s.Items, s.SizeBytes, s.Layers, s.EstimatedFillRatio, s.EstimatedFPP, s.LastSnapshot = 0, 0, 0, 0, 0, ""
		return s
	}
	return counts(before) != counts(now) ||
		moved(float64(before.Items), float64(now.Items)) || moved(float64(before.SizeBytes), float64(now.SizeBytes)) ||
		moved(before.EstimatedFillRatio, now.EstimatedFillRatio)
}

func (w *statusWatch) requeueFilter(namespace, name string) {
	bf := &bloomeryv1alpha1.BloomFilter{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	select {
	case w.requeue <- event.GenericEvent{Object: bf}:
	case <-w.ctx.Done():
	}
}
