package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// serviceRoleLabel tells a cluster's two Services apart, so that the ServiceMonitor selects only
// the headless one (every pod, ready or not) and no pod is scraped twice.
//
// The client Service exposes the public API and, with spec.resp, the RESP port. The headless Service, which names every pod,
// exposes the internal port (the peers' and the operator's) and the ops port (Prometheus's), and
// not the public API, which applications reach through the client Service.
const (
	serviceRoleLabel    = "bloomery.io/service"
	serviceRoleHeadless = "headless"
	serviceRoleClient   = "client"
)

func headlessServiceName(cluster string) string { return cluster + "-headless" }

func (r *BloomClusterReconciler) reconcileServices(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	for _, desired := range []*corev1.Service{buildHeadlessService(st.cluster), buildClientService(st.cluster)} {
		if _, err := ensureChild(ctx, r, st.cluster, desired, &corev1.Service{}, mergeService); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// servicePort exposes the container port of that name on the same number.
func servicePort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{
		Name:       name,
		Protocol:   corev1.ProtocolTCP,
		Port:       port,
		TargetPort: intstr.FromString(name),
	}
}

// buildHeadlessService gives every pod a DNS name (<pod>.<name>-headless.<ns>.svc) for peers and
// the StatefulSet. Not-ready pods are published too: a recovering pod must reach its peers to
// catch up before it can become ready.
func buildHeadlessService(c *bloomeryv1alpha1.BloomCluster) *corev1.Service {
	meta := childMeta(c, headlessServiceName(c.Name))
	meta.Labels[serviceRoleLabel] = serviceRoleHeadless
	return &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(c.Name),
			Ports: []corev1.ServicePort{
				servicePort(internalPortName, bloomeryv1alpha1.InternalPort),
				servicePort(opsPortName, bloomeryv1alpha1.OpsPort),
			},
			PublishNotReadyAddresses: true,
			SessionAffinity:          corev1.ServiceAffinityNone,
		},
	}
}

// buildClientService is what applications call: ready pods only.
func buildClientService(c *bloomeryv1alpha1.BloomCluster) *corev1.Service {
	meta := childMeta(c, c.ClientServiceName())
	meta.Labels[serviceRoleLabel] = serviceRoleClient
	return &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			Selector:        selectorLabels(c.Name),
			Ports:           clientServicePorts(c),
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
}

// clientServicePorts are the public API's and, with spec.resp, the RESP port's.
func clientServicePorts(c *bloomeryv1alpha1.BloomCluster) []corev1.ServicePort {
	ports := []corev1.ServicePort{servicePort(httpPortName, bloomeryv1alpha1.APIPort)}
	if c.RESPEnabled() {
		ports = append(ports, servicePort(respPortName, c.RESPPort()))
	}
	return ports
}

// mergeService sets the fields the operator owns. The cluster IPs, IP families and traffic
// policies are the API server's.
func mergeService(existing, desired *corev1.Service) {
	existing.Spec.Type = desired.Spec.Type
	existing.Spec.Selector = desired.Spec.Selector
	existing.Spec.Ports = desired.Spec.Ports
	existing.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
	existing.Spec.SessionAffinity = desired.Spec.SessionAffinity
}
