package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// repeatedConflicts is how many status writes of one object in a row must meet a conflict before
// it is logged at info: one now and then is the ordinary race with another writer, a run of them
// an object that keeps changing under its passes.
const repeatedConflicts = 3

// conflictRuns counts, by kind, namespace and name, the status writes in a row that met a
// conflict; a write that lands ends the run.
var conflictRuns sync.Map

// statusPatched is a pass's outcome once its status patch (whose error is perr) is done. The
// patch is locked to the version the pass read: a conflict means the object changed since, and
// the newer object's event brings a new pass, so it is a requeue rather than an error.
func statusPatched(ctx context.Context, kind string, obj client.Object, result ctrl.Result, err, perr error) (ctrl.Result, error) {
	key := kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
	if perr == nil {
		conflictRuns.Delete(key)
		return result, err
	}
	if apierrors.IsConflict(perr) && err == nil {
		run := 1
		if v, ok := conflictRuns.Load(key); ok {
			run += v.(int)
		}
		conflictRuns.Store(key, run)
		logger := log.FromContext(ctx)
		if run < repeatedConflicts {
			logger = logger.V(1)
		}
		logger.Info("Object changed since the pass read it; status requeued", "kind", kind, "conflictsInARow", run)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, errors.Join(err, perr)
}
