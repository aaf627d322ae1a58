package controllers

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// statusPatched is a pass's outcome once its status patch (whose error is perr) is done. The
// patch is locked to the version the pass read: a conflict means the object changed since, and
// the newer object's event brings a new pass, so it is a requeue rather than an error.
func statusPatched(ctx context.Context, kind string, result ctrl.Result, err, perr error) (ctrl.Result, error) {
	if perr == nil {
		return result, err
	}
	if apierrors.IsConflict(perr) && err == nil {
		log.FromContext(ctx).V(1).Info("Object changed since the pass read it; status requeued", "kind", kind)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, errors.Join(err, perr)
}
