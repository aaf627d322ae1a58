package controllers

import (
	"context"
	"net"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// namespaceNameLabel is the label the API server sets on every namespace to its name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// prometheusPodLabels select the scrapers of the ops port when spec.networkPolicy.metricsFrom is
// absent: the label the Prometheus Operator and the prometheus Helm charts put on Prometheus's pods.
var prometheusPodLabels = map[string]string{labelName: "prometheus"}

func networkPolicyName(cluster string) string { return cluster }

func (r *BloomClusterReconciler) reconcileNetworkPolicy(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	if !st.cluster.NetworkPolicyEnabled() {
		return ctrl.Result{}, deleteChild(ctx, r, st.cluster, buildNetworkPolicy(st.cluster, r.OperatorNamespace, r.OperatorPodLabels, nil))
	}
	var api *networkingv1.NetworkPolicyEgressRule
	if st.cluster.HomeLease() > 0 {
		rule := r.apiServerEgress(ctx)
		api = &rule
	}
	desired := buildNetworkPolicy(st.cluster, r.OperatorNamespace, r.OperatorPodLabels, api)
	_, err := ensureChild(ctx, r, st.cluster, desired, &networkingv1.NetworkPolicy{}, mergeNetworkPolicy)
	return ctrl.Result{}, err
}

// buildNetworkPolicy admits to each port of the cluster's pods only who needs it, and lets the
// pods call only their peers' internal port, DNS and, with api (the home leases), the API
// server. operatorNamespace and operatorPods locate
// the operator's pods; with either unknown (an operator run outside the cluster, which no pod
// selector can match), the internal port admits the cluster's own pods alone.
func buildNetworkPolicy(c *bloomeryv1alpha1.BloomCluster, operatorNamespace string, operatorPods map[string]string,
	api *networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	peers := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name)}}
	internalFrom := []networkingv1.NetworkPolicyPeer{peers}
	if operatorNamespace != "" && len(operatorPods) > 0 {
		internalFrom = append(internalFrom, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: operatorNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: operatorPods},
		})
	}
	clientsFrom := c.Spec.NetworkPolicy.ClientsFrom
	if len(clientsFrom) == 0 {
		// An empty pod selector without a namespace selector: every pod of the policy's namespace.
		clientsFrom = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
	}
	metricsFrom := c.Spec.NetworkPolicy.MetricsFrom
	if len(metricsFrom) == 0 {
		metricsFrom = []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{},
			PodSelector:       &metav1.LabelSelector{MatchLabels: prometheusPodLabels},
		}}
	}
	egress := []networkingv1.NetworkPolicyEgressRule{
		// Replication, forwarding to a filter's home and catch-up: all on the internal port.
		{Ports: tcpPorts(bloomeryv1alpha1.InternalPort), To: []networkingv1.NetworkPolicyPeer{peers}},
		// DNS to any address: the resolver may be a pod (CoreDNS), a node-local cache on a
		// link-local address or a server outside the pod network, which pod and namespace
		// selectors would not match.
		{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, 53), port(corev1.ProtocolTCP, 53)}},
	}
	if api != nil {
		egress = append(egress, *api)
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: childMeta(c, networkPolicyName(c.Name)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(c.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: clientPorts(c), From: clientsFrom},
				{Ports: tcpPorts(bloomeryv1alpha1.InternalPort), From: internalFrom},
				{Ports: tcpPorts(bloomeryv1alpha1.OpsPort), From: metricsFrom},
			},
			Egress: egress,
		},
	}
}

// fallbackAPIServerEgress lets the pods reach the API server when the operator cannot read where
// it is (a namespaced install may not read the default namespace): its usual ports, 443 and 6443,
// at any address.
var fallbackAPIServerEgress = networkingv1.NetworkPolicyEgressRule{
	Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 443), port(corev1.ProtocolTCP, 6443)},
}

// apiServerEgress lets the pods renew their home leases: to the addresses and ports of the
// default/kubernetes Service's endpoints, the API servers themselves. A NetworkPolicy applies
// after the Service's address is translated to an endpoint's, so the rule names the endpoints,
// which no pod selector matches. It is read past the cache at each pass (the addresses change
// seldom, and the cache holds only the operator's children); the fallback when it cannot be read.
func (r *BloomClusterReconciler) apiServerEgress(ctx context.Context) networkingv1.NetworkPolicyEgressRule {
	var slices discoveryv1.EndpointSliceList
	err := r.apiReader().List(ctx, &slices, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"})
	switch {
	case apierrors.IsForbidden(err):
		// A namespaced install, as documented: not worth a line at every pass.
		return fallbackAPIServerEgress
	case err != nil:
		log.FromContext(ctx).V(1).Info("Cannot read where the API server is; the pods may reach ports 443 and 6443 anywhere", "error", err.Error())
		return fallbackAPIServerEgress
	}
	rule := apiServerRule(slices.Items)
	if len(rule.To) == 0 || len(rule.Ports) == 0 {
		return fallbackAPIServerEgress
	}
	return rule
}

// apiServerRule admits the endpoints of the slices, each address as a single-address block.
func apiServerRule(slices []discoveryv1.EndpointSlice) networkingv1.NetworkPolicyEgressRule {
	var rule networkingv1.NetworkPolicyEgressRule
	seenAddr, seenPort := map[string]bool{}, map[int32]bool{}
	for _, s := range slices {
		for _, p := range s.Ports {
			if p.Port != nil && !seenPort[*p.Port] && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				seenPort[*p.Port] = true
				rule.Ports = append(rule.Ports, port(corev1.ProtocolTCP, *p.Port))
			}
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ip := net.ParseIP(a)
				if ip == nil || seenAddr[ip.String()] {
					continue
				}
				seenAddr[ip.String()] = true
				bits := "/32"
				if ip.To4() == nil {
					bits = "/128"
				}
				rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: ip.String() + bits}})
			}
		}
	}
	return rule
}

// clientPorts are the ports applications call: the public API's and, with spec.resp, the RESP
// port, admitted from the same peers.
func clientPorts(c *bloomeryv1alpha1.BloomCluster) []networkingv1.NetworkPolicyPort {
	ports := tcpPorts(bloomeryv1alpha1.APIPort)
	if c.RESPEnabled() {
		ports = append(ports, port(corev1.ProtocolTCP, c.RESPPort()))
	}
	return ports
}

func tcpPorts(p int32) []networkingv1.NetworkPolicyPort {
	return []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, p)}
}

// port sets the protocol, which the API server would default to TCP, so that the built policy
// compares equal to the stored one.
func port(protocol corev1.Protocol, p int32) networkingv1.NetworkPolicyPort {
	n := intstr.FromInt32(p)
	return networkingv1.NetworkPolicyPort{Protocol: &protocol, Port: &n}
}

// mergeNetworkPolicy owns the whole spec: a rule added by hand would widen what the policy admits.
func mergeNetworkPolicy(existing, desired *networkingv1.NetworkPolicy) {
	existing.Spec = desired.Spec
}
