package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheLagRetry is how soon a pass that found the cache behind the reconciler's own last write
// tries again. The write's own event brings no pass (userIntentChanged), so the pass must come
// back by itself; the cache usually catches up within a fraction of a second.
const cacheLagRetry = 250 * time.Millisecond

// ownWrites remembers, by object UID, the resourceVersion of the reconciler's last write of each
// object until the cache has caught up with it. A pass reads the object from the cache, which
// learns of a write a moment after it: a pass that came sooner (one the pods' polls requeued
// right after a create) would redo the write from the object as it was before it (add the
// finalizer again, compute status from the old one), and the API server would refuse it as a
// conflict. When thousands of filters are created at once the cache lags by seconds, and each
// such conflict cost a write and an error's back-off.
type ownWrites struct{ versions sync.Map }

// wrote records the object as the API server returned it from the reconciler's write. An object
// without a UID (none the API server returns) is not recorded.
func (w *ownWrites) wrote(obj client.Object) {
	if obj.GetUID() != "" {
		w.versions.Store(obj.GetUID(), obj.GetResourceVersion())
	}
}

// forget drops what is known of an object that is gone.
func (w *ownWrites) forget(uid types.UID) { w.versions.Delete(uid) }

// behind reports whether obj, as the cache holds it, predates the reconciler's last write of it.
// Once the cache holds that write or a later one, the object is forgotten. Versions that are not
// the API server's comparable integers are never behind: the pass goes on as without this.
func (w *ownWrites) behind(obj client.Object) bool {
	v, ok := w.versions.Load(obj.GetUID())
	if !ok {
		return false
	}
	written, _ := v.(string)
	c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), written)
	if err != nil || c >= 0 {
		w.versions.CompareAndDelete(obj.GetUID(), written)
		return false
	}
	return true
}
