package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// cacheLagRetry is when a pass that found the cache behind the reconciler's own last write comes
// back if the event of the cache catching up (ownWrites.caughtUp) did not bring it sooner: it may
// have come between the pass's read and its look at what it wrote.
const cacheLagRetry = 5 * time.Second

// ownWrites remembers, by object UID, the resourceVersion of the reconciler's last write of each
// object until the cache has caught up with it. A pass reads the object from the cache, which
// learns of a write a moment after it: a pass that came sooner (one the pods' polls requeued
// right after a create) would redo the write from the object as it was before it (add the
// finalizer again, compute status from the old one), and the API server would refuse it as a
// conflict. When thousands of filters are created at once the cache lags by seconds, and each
// such conflict cost a write and an error's back-off. Such a pass waits instead, and the event of
// the write, which userIntentChanged would drop, brings it back.
type ownWrites struct {
	mu       sync.Mutex
	versions map[types.UID]ownWrite
}

type ownWrite struct {
	version string
	// finalizer, when set, is the finalizer the write removed from an object being deleted, after
	// which the object goes: the cache is behind while its object still has the finalizer. (The
	// version of the answer to that write proved no guide: passes that read the object with the
	// finalizer from the cache went on as if it were not behind.)
	finalizer string
	waiting   bool // a pass found the cache behind it
}

// stale reports whether obj, as the cache holds it, predates the write. Versions that are not the
// API server's comparable integers are never stale: the pass goes on as without this.
func (own ownWrite) stale(obj client.Object) bool {
	if own.finalizer != "" {
		return controllerutil.ContainsFinalizer(obj, own.finalizer)
	}
	c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), own.version)
	return err == nil && c < 0
}

// wrote records the object as the API server returned it from the reconciler's write. An object
// without a UID (none the API server returns) is not recorded.
func (w *ownWrites) wrote(obj client.Object) {
	if obj.GetUID() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[types.UID]ownWrite{}
	}
	w.versions[obj.GetUID()] = ownWrite{version: obj.GetResourceVersion()}
}

// removedFinalizer records the reconciler's write that removed finalizer from obj, which is being
// deleted.
func (w *ownWrites) removedFinalizer(obj client.Object, finalizer string) {
	if obj.GetUID() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[types.UID]ownWrite{}
	}
	w.versions[obj.GetUID()] = ownWrite{finalizer: finalizer}
}

// forget drops what is known of an object that is gone.
func (w *ownWrites) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.versions, uid)
}

// behind reports whether obj, as the cache holds it, predates the reconciler's last write of it;
// caughtUp then passes the event of the cache catching up. Once the cache holds that write or a
// later one, the object is forgotten.
func (w *ownWrites) behind(obj client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	own, ok := w.versions[obj.GetUID()]
	if !ok {
		return false
	}
	if !own.stale(obj) {
		delete(w.versions, obj.GetUID())
		return false
	}
	own.waiting = true
	w.versions[obj.GetUID()] = own
	return true
}

// caughtUp reports whether obj, as the cache now holds it, is the reconciler's last write of it or
// a later version, and a pass waits for it.
func (w *ownWrites) caughtUp(obj client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	own, ok := w.versions[obj.GetUID()]
	if !ok || !own.waiting || own.stale(obj) {
		return false
	}
	delete(w.versions, obj.GetUID())
	return true
}

// caughtUpEvents passes the updates that bring the cache up to a write a pass waits for, and
// forgets the objects that are gone: the last write of a finalized object (the finalizer removed)
// is often followed by no update, only by its deletion. It passes no deletion itself, so it must
// come first where predicates are or'ed.
func (w *ownWrites) caughtUpEvents() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(e event.DeleteEvent) bool {
			if e.Object != nil {
				w.forget(e.Object.GetUID())
			}
			return false
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectNew != nil && w.caughtUp(e.ObjectNew)
		},
	}
}
