package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// operatorUser is the user name of the chart's ServiceAccount, as the API server authenticates it.
const operatorUser = "system:serviceaccount:bloomery-system:bloomery-operator"

// operatorRules are the rules the markers generate into config/rbac/role.yaml: the chart renders
// the same rules (charts/chart_envtest_test.go) into a ClusterRole, or a Role per watched namespace.
func operatorRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatalf("config/rbac/role.yaml: %v", err)
	}
	return role.Rules
}

// grantRole gives the operator's ServiceAccount the operator's rules in ns alone, as the chart does
// with watchNamespaces.
func grantRole(t *testing.T, ns string) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bloomery-operator", Namespace: ns}, Rules: operatorRules(t)}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bloomery-operator", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bloomery-operator", Namespace: "bloomery-system"}},
	}
	if err := k8s.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
}

// allowed asks the API server, as `kubectl auth can-i --as` does, whether the operator may do verb
// on resource in ns.
func allowed(t *testing.T, ns, verb, group, resource string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: operatorUser,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: resource,
		},
	}}
	if err := k8s.Create(t.Context(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// A namespaced install: the operator, with the rendered rules as a Role in one namespace and
// nothing else, runs its BloomClusters and BloomFilters there, and may touch nothing elsewhere.
func TestOperatorRunsWithARoleInItsNamespaceAlone(t *testing.T) {
	t.Parallel()
	ns, other := newNamespace(t), newNamespace(t)
	grantRole(t, ns)
	user, err := testEnv.AddUser(envtest.User{Name: operatorUser}, restConfig)
	if err != nil {
		t.Fatal(err)
	}
	startManagerAs(t, user.Config(), ns, func(mgr ctrl.Manager) error {
		if err := (&BloomClusterReconciler{
			Recorder:          mgr.GetEventRecorder("bloomcluster"),
			DefaultImage:      testImage,
			OperatorNamespace: "bloomery-system",
			OperatorPodLabels: testOperatorPods,
		}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&BloomFilterReconciler{Recorder: mgr.GetEventRecorder("bloomfilter")}).SetupWithManager(mgr)
	})

	// Every child is made, and the status patch goes through: Degraded would name a refusal.
	cluster := createBloomCluster(t, ns, "scoped", nil)
	// The operator may not read where the API server is (the default namespace is not its own):
	// the pods may reach its usual ports anywhere.
	waitPolicy(t, ns, "scoped", defaultPolicySpec("scoped", networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{tcp(443), tcp(6443)}}))
	waitFor(t, &appsv1.StatefulSet{}, ns, "scoped", exists)
	waitFor(t, &policyv1.PodDisruptionBudget{}, ns, "scoped", exists)
	// A change of the spec updates the children it reaches: the StatefulSet too.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })
	waitFor(t, &appsv1.StatefulSet{}, ns, "scoped", func(sts *appsv1.StatefulSet) (bool, string) {
		return sts.Spec.Replicas != nil && *sts.Spec.Replicas == 2, fmt.Sprintf("replicas %d", ptr.Deref(sts.Spec.Replicas, 0))
	})
	waitClusterCondition(t, ns, "scoped", ConditionDegraded, "False/AsExpected", "")
	// The BloomFilter's status (an update).
	createBloomFilter(t, ns, "users", "scoped")
	waitFor(t, &bloomeryv1alpha1.BloomFilter{}, ns, "users", func(f *bloomeryv1alpha1.BloomFilter) (bool, string) {
		return f.Status.ObservedGeneration == f.Generation, fmt.Sprintf("status %+v", f.Status)
	})

	for _, c := range []struct {
		verb, group, resource string
		here                  bool // allowed in the operator's namespace; never elsewhere
	}{
		{"get", "", "configmaps", true},
		{"update", "", "configmaps", true},
		{"get", "", "services", true},
		{"update", "", "services", true},
		{"create", "networking.k8s.io", "networkpolicies", true},
		{"patch", "bloomery.io", "bloomclusters/status", true},
		{"patch", "bloomery.io", "bloomclusters", true}, // a retained filter's annotation
		// The token Secrets: made, read, never changed.
		{"get", "", "secrets", true},
		{"create", "", "secrets", true},
		{"update", "", "secrets", false},
		{"delete", "", "secrets", false},
		{"delete", "", "configmaps", false},
		{"delete", "", "services", false},
		{"delete", "", "pods", false},
		{"create", "", "pods", false},
	} {
		if got := allowed(t, ns, c.verb, c.group, c.resource); got != c.here {
			t.Errorf("%s %s in its own namespace: allowed %v, want %v", c.verb, c.resource, got, c.here)
		}
		if allowed(t, other, c.verb, c.group, c.resource) {
			t.Errorf("%s %s in another namespace: allowed, want denied", c.verb, c.resource)
		}
	}
	// Cluster-wide reads, which a cache of every namespace needs, are denied: a namespaced install
	// must pass the namespaces to --watch-namespace (the chart does).
	if allowed(t, "", "list", "", "configmaps") {
		t.Error("list configmaps in every namespace: allowed, want denied")
	}
}
