package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The home leases (docs/replication.md#the-homes-lease): one coordination.k8s.io Lease per pod
// of the StatefulSet, named after the pod. The operator makes them, since RBAC cannot restrict
// create by name; the pods, as the cluster's ServiceAccount, may only get and update their own,
// by name (the Role below). The Leases, the ServiceAccount, the Role and its binding are the
// cluster's children, and go with it.

func serviceAccountName(cluster string) string { return cluster }

func homeLeaseRoleName(cluster string) string { return cluster + "-home-lease" }

// homeLeaseNames are the names of the pods the StatefulSet runs or will: ordinals below the
// larger of spec.replicas and the replicas the StatefulSet keeps (a scale-down waits for its
// drain), so that a pod has its Lease, and the right to renew it, before it starts.
func homeLeaseNames(c *bloomeryv1alpha1.BloomCluster, stsReplicas int32) []string {
	n := max(c.DesiredReplicas(), stsReplicas)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%d", statefulSetName(c.Name), i)
	}
	return names
}

// reconcileHomeLeases makes the ServiceAccount the pods run as and, with spec.replication's
// homeLeaseSeconds, a Lease per pod and the Role that lets each pod renew them; without, it
// deletes the Leases and the Role. A Lease of a pod that no longer exists is deleted.
func (r *BloomClusterReconciler) reconcileHomeLeases(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	c := st.cluster
	if _, err := ensureChild(ctx, r, c, buildServiceAccount(c), &corev1.ServiceAccount{}, mergeServiceAccount); err != nil {
		return ctrl.Result{}, err
	}
	var names []string
	if c.HomeLease() > 0 {
		stsReplicas, err := r.statefulSetReplicas(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		names = homeLeaseNames(c, stsReplicas)
	}
	for _, name := range names {
		if _, err := ensureChild(ctx, r, c, buildHomeLease(c, name), &coordinationv1.Lease{}, mergeHomeLease); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.deleteHomeLeasesBut(ctx, c, names); err != nil {
		return ctrl.Result{}, err
	}
	role, binding := buildHomeLeaseRole(c, names), buildHomeLeaseRoleBinding(c)
	if len(names) == 0 {
		// A Role without resourceNames would grant every Lease of the namespace.
		if err := deleteChild(ctx, r, c, binding); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, deleteChild(ctx, r, c, role)
	}
	if _, err := ensureChild(ctx, r, c, role, &rbacv1.Role{}, mergeRole); err != nil {
		return ctrl.Result{}, err
	}
	_, err := ensureChild(ctx, r, c, binding, &rbacv1.RoleBinding{}, mergeRoleBinding)
	return ctrl.Result{}, err
}

// statefulSetReplicas is the cluster's StatefulSet's spec.replicas, 0 when there is none yet.
func (r *BloomClusterReconciler) statefulSetReplicas(ctx context.Context, c *bloomeryv1alpha1.BloomCluster) (int32, error) {
	var sts appsv1.StatefulSet
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: statefulSetName(c.Name)}, &sts)
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("getting StatefulSet: %w", err)
	case !metav1.IsControlledBy(&sts, c) || sts.Spec.Replicas == nil:
		return 0, nil
	}
	return *sts.Spec.Replicas, nil
}

// deleteHomeLeasesBut deletes the cluster's Leases but those of keep.
func (r *BloomClusterReconciler) deleteHomeLeasesBut(ctx context.Context, c *bloomeryv1alpha1.BloomCluster, keep []string) error {
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c.Name))); err != nil {
		return fmt.Errorf("listing the Leases of BloomCluster %s: %w", c.Name, err)
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		if !slices.Contains(keep, l.Name) && metav1.IsControlledBy(l, c) {
			if err := deleteChild(ctx, r, c, l); err != nil {
				return err
			}
		}
	}
	return nil
}

func buildServiceAccount(c *bloomeryv1alpha1.BloomCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: childMeta(c, serviceAccountName(c.Name))}
}

// mergeServiceAccount owns nothing but the labels and the owner: the token controller and
// users may add secrets and image pull secrets.
func mergeServiceAccount(_, _ *corev1.ServiceAccount) {}

// buildHomeLease is a pod's Lease as the operator makes it: no holder until the pod takes it.
func buildHomeLease(c *bloomeryv1alpha1.BloomCluster, pod string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: childMeta(c, pod),
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: new(int32(c.HomeLease().Seconds()))},
	}
}

// mergeHomeLease owns nothing of the spec: the pod writes it at each renewal, and the operator
// only to revoke it (homelease.go).
func mergeHomeLease(_, _ *coordinationv1.Lease) {}

// buildHomeLeaseRole lets the pods get and update the Leases of names alone: not create (which
// RBAC cannot restrict by name), nor list, watch or delete.
func buildHomeLeaseRole(c *bloomeryv1alpha1.BloomCluster, names []string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: childMeta(c, homeLeaseRoleName(c.Name)),
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{coordinationv1.GroupName},
			Resources:     []string{"leases"},
			Verbs:         []string{"get", "update"},
			ResourceNames: slices.Clone(names),
		}},
	}
}

func mergeRole(existing, desired *rbacv1.Role) { existing.Rules = desired.Rules }

func buildHomeLeaseRoleBinding(c *bloomeryv1alpha1.BloomCluster) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: childMeta(c, homeLeaseRoleName(c.Name)),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: homeLeaseRoleName(c.Name)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccountName(c.Name), Namespace: c.Namespace}},
	}
}

// mergeRoleBinding: roleRef is immutable, and the name fixes it; the subjects are the operator's.
func mergeRoleBinding(existing, desired *rbacv1.RoleBinding) { existing.Subjects = desired.Subjects }
