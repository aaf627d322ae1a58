package controllers

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"

	"github.com/bloomery/bloomery/internal/await"
)

// The operator's pods, as the chart labels them and passes them to --operator-pod-labels.
var testOperatorPods = map[string]string{
	"app.kubernetes.io/name": "bloomery", "app.kubernetes.io/instance": "bloomery", "app.kubernetes.io/component": "operator",
}

// startPolicyReconciler runs the BloomCluster reconciler with the operator's identity set, as
// `bloomery operator` in the chart's Deployment does.
func startPolicyReconciler(t *testing.T, ns string) {
	t.Helper()
	startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomClusterReconciler{
			Recorder:          mgr.GetEventRecorder("bloomcluster"),
			DefaultImage:      testImage,
			OperatorNamespace: "bloomery-system",
			OperatorPodLabels: testOperatorPods,
		}).SetupWithManager(mgr)
	})
}

// tcp and udp are NetworkPolicyPorts as the API server stores them.
func tcp(p int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: new(corev1.ProtocolTCP), Port: new(intstr.FromInt(p))}
}

func udp(p int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: new(corev1.ProtocolUDP), Port: new(intstr.FromInt(p))}
}

func selector(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	for i := 0; i+1 < len(kv); i += 2 {
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

// waitPolicy waits until the cluster's NetworkPolicy has the spec want.
func waitPolicy(t *testing.T, ns, cluster string, want networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	t.Helper()
	return waitFor(t, &networkingv1.NetworkPolicy{}, ns, cluster, func(p *networkingv1.NetworkPolicy) (bool, string) {
		return equality.Semantic.DeepEqual(p.Spec, want), fmt.Sprintf("spec %+v", p.Spec)
	})
}

// The rules, written out as a reviewer would read them: each port admits only its callers.
// defaultPolicySpec is the policy of a cluster that leaves spec.networkPolicy out; api is its
// rule to the API server, which the pods renew their home leases with.
func defaultPolicySpec(cluster string, api networkingv1.NetworkPolicyEgressRule) networkingv1.NetworkPolicySpec {
	pods := selector("app.kubernetes.io/name", "bloomery", "app.kubernetes.io/instance", cluster, "app.kubernetes.io/component", "dataplane")
	return networkingv1.NetworkPolicySpec{
		PodSelector: *pods,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			// Client API and RESP: every pod of the cluster's namespace.
			{Ports: []networkingv1.NetworkPolicyPort{tcp(8080), tcp(6379)}, From: []networkingv1.NetworkPolicyPeer{{PodSelector: selector()}}},
			// Internal API: the cluster's own pods, and the operator's pods in its namespace.
			{Ports: []networkingv1.NetworkPolicyPort{tcp(8090)}, From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: pods},
				{
					NamespaceSelector: selector("kubernetes.io/metadata.name", "bloomery-system"),
					PodSelector: selector("app.kubernetes.io/name", "bloomery", "app.kubernetes.io/instance", "bloomery",
						"app.kubernetes.io/component", "operator"),
				},
			}},
			// Probes and /metrics: Prometheus's pods in any namespace.
			{Ports: []networkingv1.NetworkPolicyPort{tcp(9090)}, From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: selector(), PodSelector: selector("app.kubernetes.io/name", "prometheus")},
			}},
		},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{Ports: []networkingv1.NetworkPolicyPort{tcp(8090)}, To: []networkingv1.NetworkPolicyPeer{{PodSelector: pods}}},
			{Ports: []networkingv1.NetworkPolicyPort{udp(53), tcp(53)}},
			api,
		},
	}
}

// envtestAPIServer is the rule to envtest's API server, which the API server itself records as
// the endpoint of the default namespace's kubernetes Service: its address, and its port.
func envtestAPIServer(t *testing.T) networkingv1.NetworkPolicyEgressRule {
	t.Helper()
	var slices discoveryv1.EndpointSliceList
	if err := k8s.List(t.Context(), &slices, client.InNamespace("default"), client.MatchingLabels{"kubernetes.io/service-name": "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 || len(slices.Items[0].Endpoints[0].Addresses) != 1 || len(slices.Items[0].Ports) != 1 {
		t.Fatalf("the kubernetes Service's endpoints: %+v, want one address and one port", slices.Items)
	}
	s := slices.Items[0]
	return networkingv1.NetworkPolicyEgressRule{
		Ports: []networkingv1.NetworkPolicyPort{tcp(int(*s.Ports[0].Port))},
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: s.Endpoints[0].Addresses[0] + "/32"}}},
	}
}

func TestNetworkPolicyAdmitsEachPortOnlyItsCallers(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startPolicyReconciler(t, ns)
	cluster := createBloomCluster(t, ns, "np", nil)
	policy := waitPolicy(t, ns, "np", defaultPolicySpec("np", envtestAPIServer(t)))
	checkOwnedBy(t, policy, cluster)
	for k, v := range clusterLabels("np") {
		if policy.Labels[k] != v {
			t.Errorf("label %s=%q, want %q: the operator's cache would not see the policy", k, policy.Labels[k], v)
		}
	}

	// A rule added by hand would widen what the policy admits: it is taken out.
	modify(t, policy, func(p *networkingv1.NetworkPolicy) {
		p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	})
	waitPolicy(t, ns, "np", defaultPolicySpec("np", envtestAPIServer(t)))
}

func TestNetworkPolicyFollowsTheSpec(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startPolicyReconciler(t, ns)
	cluster := createBloomCluster(t, ns, "follow", nil)
	waitPolicy(t, ns, "follow", defaultPolicySpec("follow", envtestAPIServer(t)))

	clients := []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: selector("team", "search")},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.20.0.0/16", Except: []string{"10.20.1.0/24"}}},
	}
	metrics := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: selector("kubernetes.io/metadata.name", "monitoring"),
		PodSelector:       selector("app.kubernetes.io/name", "prometheus", "operator.prometheus.io/name", "k8s"),
	}}
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.NetworkPolicy.ClientsFrom = clients
		c.Spec.NetworkPolicy.MetricsFrom = metrics
	})
	want := defaultPolicySpec("follow", envtestAPIServer(t))
	want.Ingress[0].From = clients
	want.Ingress[2].From = metrics
	waitPolicy(t, ns, "follow", want)

	// Disabled: the policy the operator made goes away, and the cluster is not degraded.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.NetworkPolicy.Enabled = new(false) })
	await.Until(t, 20*time.Second, "NetworkPolicy deleted", func() (bool, string) {
		err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "follow"}, &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	waitClusterCondition(t, ns, "follow", ConditionDegraded, "False/AsExpected", "")

	// Enabled again, with the defaults back: it is made anew.
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.NetworkPolicy = bloomeryv1alpha1.NetworkPolicySpec{Enabled: new(true)}
	})
	waitPolicy(t, ns, "follow", defaultPolicySpec("follow", envtestAPIServer(t)))
}

// A policy of the same name that is not the operator's is left alone: disabling does not delete
// it, and enabling reports it rather than taking it over.
func TestNetworkPolicyLeavesOthersAlone(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	mine := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "someone", UID: "7c0b1a2e-0000-4000-8000-000000000001", Controller: new(true),
		}}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *selector("app", "other")},
	}
	if err := k8s.Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	startPolicyReconciler(t, ns)
	createBloomCluster(t, ns, "taken", nil)
	// Unlabelled, it is outside the operator's cache: the create collides, and the read past the
	// cache finds another controller's object.
	waitClusterCondition(t, ns, "taken", ConditionDegraded, "True/ChildObjectFailure", "NetworkPolicy taken exists and is not this BloomCluster's")

	modify(t, &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}},
		func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.NetworkPolicy.Enabled = new(false) })
	waitClusterCondition(t, ns, "taken", ConditionDegraded, "False/AsExpected", "")

	var got networkingv1.NetworkPolicy
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "taken"}, &got); err != nil {
		t.Fatalf("another controller's NetworkPolicy: %v, want it kept", err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, mine.Spec) {
		t.Errorf("another controller's NetworkPolicy was changed: %+v", got.Spec)
	}
}

// An empty list would be a rule that admits everyone (a NetworkPolicy rule without peers admits
// every source): the schema refuses it, so that absent (the default) is the only way to say
// "nobody named".
func TestNetworkPolicyPeersMustNotBeEmpty(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	for _, field := range []string{"clientsFrom", "metricsFrom"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": bloomeryv1alpha1.GroupVersion.String(), "kind": "BloomCluster",
			"metadata": map[string]any{"name": "empty-" + map[string]string{"clientsFrom": "c", "metricsFrom": "m"}[field], "namespace": ns},
			"spec":     map[string]any{"networkPolicy": map[string]any{field: []any{}}},
		}}
		expectRejected(t, field+": []", k8s.Create(t.Context(), u), "spec.networkPolicy."+field+" in body should have at least 1 items")
	}
}
