package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/lease"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/tick/ticktest"
)

// startLeaseReconciler runs the BloomCluster reconciler in ns with a short resync and clock as
// its clock.
func startLeaseReconciler(t *testing.T, ns string, clock *ticktest.Clock) {
	t.Helper()
	startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomClusterReconciler{
			Client:         mgr.GetClient(),
			Scheme:         mgr.GetScheme(),
			Recorder:       mgr.GetEventRecorder("bloomcluster"),
			DefaultImage:   testImage,
			Resync:         100 * time.Millisecond,
			DataPlane:      NewHTTPDataPlane(2 * time.Second),
			PodParallelism: 2,
			Clock:          clock.Now,
		}).SetupWithManager(mgr)
	})
}

// podRenewer is what the data plane of p runs, against the API server as cfg: its epoch is the
// one its data plane holds (0 while it does not answer).
func podRenewer(t *testing.T, cfg *rest.Config, ns string, p *fakePod) *lease.Renewer {
	t.Helper()
	c, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lease.New(lease.Options{
		Leases: c.Leases(ns), Name: p.name, Namespace: ns, Duration: bloomeryv1alpha1.DefaultHomeLeaseSeconds * time.Second,
		Epoch: func() uint64 {
			m, err := p.internal.Membership(context.Background())
			if err != nil {
				return 0
			}
			return m.Epoch
		},
	})
}

func waitLease(t *testing.T, ns, name string, check func(*coordinationv1.Lease) (bool, string)) *coordinationv1.Lease {
	t.Helper()
	return waitFor(t, &coordinationv1.Lease{}, ns, name, check)
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// The operator makes a Lease per pod of the StatefulSet, with no holder, and the Role that lets
// the cluster's ServiceAccount, which the pods run as with a token, get and update those alone;
// the names follow spec.replicas, and homeLeaseSeconds 0 takes it all away.
func TestHomeLeasesAndTheirRoleFollowTheReplicas(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startLeaseReconciler(t, ns, ticktest.NewClock(time.Now()))
	cluster := createBloomCluster(t, ns, "hl", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })

	for _, name := range []string{"hl-0", "hl-1"} {
		l := waitLease(t, ns, name, exists)
		checkOwnedBy(t, l, cluster)
		if holderOf(l) != "" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != bloomeryv1alpha1.DefaultHomeLeaseSeconds {
			t.Errorf("Lease %s: holder %q, duration %v; want none and %ds", name, holderOf(l), l.Spec.LeaseDurationSeconds, bloomeryv1alpha1.DefaultHomeLeaseSeconds)
		}
	}
	roleNames := func(names ...string) func(*rbacv1.Role) (bool, string) {
		return func(r *rbacv1.Role) (bool, string) {
			want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: names}}
			return fmt.Sprint(r.Rules) == fmt.Sprint(want), fmt.Sprintf("rules %+v", r.Rules)
		}
	}
	checkOwnedBy(t, waitFor(t, &rbacv1.Role{}, ns, "hl-home-lease", roleNames("hl-0", "hl-1")), cluster)
	binding := waitFor(t, &rbacv1.RoleBinding{}, ns, "hl-home-lease", exists)
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "hl", Namespace: ns}}; !slices.Equal(binding.Subjects, want) || binding.RoleRef.Name != "hl-home-lease" {
		t.Errorf("RoleBinding: subjects %+v, role %s; want %+v, hl-home-lease", binding.Subjects, binding.RoleRef.Name, want)
	}
	checkOwnedBy(t, waitFor(t, &corev1.ServiceAccount{}, ns, "hl", exists), cluster)
	waitFor(t, &appsv1.StatefulSet{}, ns, "hl", func(sts *appsv1.StatefulSet) (bool, string) {
		spec := sts.Spec.Template.Spec
		return spec.ServiceAccountName == "hl" && spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken,
			fmt.Sprintf("serviceAccountName %q, automount %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	})

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(3)) })
	waitLease(t, ns, "hl-2", exists)
	waitFor(t, &rbacv1.Role{}, ns, "hl-home-lease", roleNames("hl-0", "hl-1", "hl-2"))

	// No leases: no Lease, no Role (one without names would grant every Lease), and no token.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replication.HomeLeaseSeconds = new(int32(0)) })
	waitFor(t, &appsv1.StatefulSet{}, ns, "hl", func(sts *appsv1.StatefulSet) (bool, string) {
		a := sts.Spec.Template.Spec.AutomountServiceAccountToken
		return a != nil && !*a, fmt.Sprintf("automount %v", a)
	})
	waitDeleted(t, &coordinationv1.Lease{}, ns, "hl-0")
	waitDeleted(t, &coordinationv1.Lease{}, ns, "hl-2")
	waitDeleted(t, &rbacv1.Role{}, ns, "hl-home-lease")
	waitDeleted(t, &rbacv1.RoleBinding{}, ns, "hl-home-lease")
}

// The data pods' ServiceAccount may renew the Leases of its cluster's pods, and nothing else: not
// another cluster's, not another Lease of the namespace, not create, list or delete.
func TestDataPodsMayRenewOnlyTheirOwnLeases(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startLeaseReconciler(t, ns, ticktest.NewClock(time.Now()))
	createBloomCluster(t, ns, "own", nil)
	createBloomCluster(t, ns, "other", nil)
	waitLease(t, ns, "own-0", exists)
	waitLease(t, ns, "other-0", exists)
	waitFor(t, &rbacv1.RoleBinding{}, ns, "own-home-lease", exists)
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}}
	if err := k8s.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}

	sa := "system:serviceaccount:" + ns + ":own"
	user, err := testEnv.AddUser(envtest.User{Name: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}, restConfig)
	if err != nil {
		t.Fatal(err)
	}
	// What the data plane does, with the ServiceAccount's identity: its renewal goes through.
	self := &fakePod{name: "own-0"}
	r := podRenewer(t, user.Config(), ns, self)
	if err := r.Renew(t.Context()); err != nil {
		t.Fatalf("renewing own-0 as %s: %v", sa, err)
	}
	if !r.Held() {
		t.Error("own-0 not held after its renewal")
	}
	if l := waitLease(t, ns, "own-0", exists); holderOf(l) != "own-0" {
		t.Errorf("own-0's holder %q, want own-0", holderOf(l))
	}
	// Another cluster's pod's Lease, and a Lease of no pod: refused by the API server.
	for _, name := range []string{"other-0", "unrelated"} {
		err := podRenewer(t, user.Config(), ns, &fakePod{name: name}).Renew(t.Context())
		if !apierrors.IsForbidden(errors.Unwrap(err)) {
			t.Errorf("renewing %s as %s: %v, want forbidden", name, sa, err)
		}
	}
	for _, c := range []struct{ verb, name string }{{"create", ""}, {"list", ""}, {"watch", ""}, {"delete", "own-0"}, {"patch", "own-0"}} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: c.verb, Group: "coordination.k8s.io", Resource: "leases", Name: c.name},
		}}
		if err := k8s.Create(t.Context(), review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed {
			t.Errorf("%s leases %s as the data pods' ServiceAccount: allowed, want denied", c.verb, c.name)
		}
	}
}

// A pod that stops renewing its lease (paused, or cut off) loses it once it has gone unrenewed
// for the duration plus the drift bound on the operator's clock, and not a moment before: the
// operator revokes it, naming the epoch it then starts without the pod, which stays an owner.
// Back, the pod is a member again in a later epoch, and takes its lease back.
//
// Not parallel: it counts the passes of every bloomcluster controller in the process.
func TestLapsedHomeLeaseMovesTheHome(t *testing.T) {
	ns := newNamespace(t)
	clock := ticktest.NewClock(time.Now())
	startLeaseReconciler(t, ns, clock)
	createBloomCluster(t, ns, "lapse", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })
	p0, p1 := addPod(t, ns, "lapse", "lapse-0"), addPod(t, ns, "lapse", "lapse-1")
	waitLease(t, ns, "lapse-0", exists)
	waitLease(t, ns, "lapse-1", exists)
	r0, r1 := podRenewer(t, restConfig, ns, p0), podRenewer(t, restConfig, ns, p1)
	for _, r := range []*lease.Renewer{r0, r1} {
		if err := r.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	first := waitMembership(t, ns, "lapse", p0, p1)
	// The operator has seen both renewals once its cache holds them; from then its clock runs.
	for _, name := range []string{"lapse-0", "lapse-1"} {
		waitLease(t, ns, name, func(l *coordinationv1.Lease) (bool, string) { return holderOf(l) == name, "holder " + holderOf(l) })
	}
	waitPasses(t, 3)

	// lapse-1 stops: its data plane no longer answers, and nothing renews its lease. lapse-0
	// renews just before lapse-1's lease would lapse.
	p1.kill(t)
	lapseAfter := wire.LeaseLapsedAfter(bloomeryv1alpha1.DefaultHomeLeaseSeconds * time.Second)
	clock.Advance(lapseAfter - time.Millisecond)
	if err := r0.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitPasses(t, 10)
	if l := waitLease(t, ns, "lapse-1", exists); holderOf(l) != "lapse-1" {
		t.Fatalf("lapse-1's lease revoked %v after it was seen renewed, before %v: holder %q", lapseAfter-time.Millisecond, lapseAfter, holderOf(l))
	}
	if c := getCluster(t, ns, "lapse"); uint64(c.Status.MembershipEpoch) != first {
		t.Fatalf("epoch moved to %d before any lease lapsed", c.Status.MembershipEpoch)
	}

	clock.Advance(time.Millisecond)
	revokedFor := strconv.FormatUint(first+1, 10)
	waitLease(t, ns, "lapse-1", func(l *coordinationv1.Lease) (bool, string) {
		return holderOf(l) == "" && l.Annotations[wire.LeaseRevokedAnnotation] == revokedFor,
			fmt.Sprintf("holder %q, annotations %v", holderOf(l), l.Annotations)
	})
	without := waitMembership(t, ns, "lapse", p0)
	if without != first+1 {
		t.Errorf("epoch without lapse-1: %d, want the revocation's %d", without, first+1)
	}
	c := getCluster(t, ns, "lapse")
	if owners := c.Status.Placement.Owners; !slices.Equal(owners, []string{"lapse-0", "lapse-1"}) {
		t.Errorf("owners %v, want lapse-1 kept among them", owners)
	}
	// lapse-0 renewed later: it keeps its lease.
	if l := waitLease(t, ns, "lapse-0", exists); holderOf(l) != "lapse-0" {
		t.Errorf("lapse-0's lease: holder %q, want lapse-0", holderOf(l))
	}
	// Its data plane still at the old epoch (here, none), lapse-1 cannot take its lease back.
	if err := r1.Renew(t.Context()); !errors.Is(err, lease.ErrRevoked) {
		t.Errorf("lapse-1's renewal before it holds epoch %s: %v, want ErrRevoked", revokedFor, err)
	}

	// Back: it answers, is a member again in a later epoch, and then retakes its lease.
	p1.restartEmpty(t)
	back := waitMembership(t, ns, "lapse", p0, p1)
	if back <= without {
		t.Errorf("epoch with lapse-1 back: %d, want above %d", back, without)
	}
	waitClusterCondition(t, ns, "lapse", ConditionDegraded, "True/"+ReasonHomeLeaseNotTaken, "lapse-1")
	if err := r1.Renew(t.Context()); err != nil {
		t.Fatalf("lapse-1's renewal at epoch %d: %v", back, err)
	}
	waitLease(t, ns, "lapse-1", func(l *coordinationv1.Lease) (bool, string) {
		return holderOf(l) == "lapse-1" && l.Annotations[wire.LeaseRevokedAnnotation] == "",
			fmt.Sprintf("holder %q, annotations %v", holderOf(l), l.Annotations)
	})
	waitClusterCondition(t, ns, "lapse", ConditionDegraded, "False/"+ReasonAsExpected, "")
	if again := waitMembership(t, ns, "lapse", p0, p1); again != back {
		t.Errorf("epoch after lapse-1 retook its lease: %d, want still %d", again, back)
	}
}

// waitDeleted waits until ns/name of obj's kind no longer exists.
func waitDeleted(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	await.Until(t, 20*time.Second, fmt.Sprintf("%T %s/%s deleted", obj, ns, name), func() (bool, string) {
		err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}
