package controllers

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// A pass that read the cluster before its previous status patch reached the cache conflicts on
// its own write: its status, the newest, is written at once rather than retried a second later.
// A status it did not see (a newer membership epoch) is never overwritten.
func TestClusterStatusPatchOutlivesAStaleRead(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	r := &BloomClusterReconciler{Client: k8s}

	stale := getCluster(t, ns, "c")
	patchClusterStatus(t, ns, "c", func(s *bloomeryv1alpha1.BloomClusterStatus) { s.Filters, s.MembershipEpoch = 5, 2 })
	pass := stale.DeepCopy()
	pass.Status.Filters, pass.Status.MembershipEpoch = 6, 2
	if err := r.patchStatus(t.Context(), stale, pass); err != nil {
		t.Fatalf("a pass's status after a stale read: %v", err)
	}
	if got := getCluster(t, ns, "c").Status.Filters; got != 6 {
		t.Errorf("status.filters %d, want the pass's 6", got)
	}

	stale = getCluster(t, ns, "c")
	patchClusterStatus(t, ns, "c", func(s *bloomeryv1alpha1.BloomClusterStatus) { s.MembershipEpoch = 3 })
	pass = stale.DeepCopy()
	pass.Status.Filters = 7
	if err := r.patchStatus(t.Context(), stale, pass); !apierrors.IsConflict(err) {
		t.Errorf("a pass older than the epoch the cluster holds: %v, want a conflict", err)
	}
	if got := getCluster(t, ns, "c").Status; got.MembershipEpoch != 3 || got.Filters != 6 {
		t.Errorf("epoch %d and filters %d, want 3 and 6 kept", got.MembershipEpoch, got.Filters)
	}
}
