package lease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// InCluster reaches the Leases of namespace with the pod's ServiceAccount, as every client in a
// pod does (the API server's address from the environment, the token and CA from the mounted
// files). Without them, the Leases it returns fail every call with the reason, which the
// renewer logs at each attempt: the pod then is no partition's home, and says why.
func InCluster(namespace string) Leases {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return unreachable{fmt.Errorf("no in-cluster configuration to reach the Kubernetes API (is the ServiceAccount token mounted?): %w", err)}
	}
	c, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		return unreachable{fmt.Errorf("a client of the Kubernetes API: %w", err)}
	}
	return c.Leases(namespace)
}

// unreachable is the Leases of a pod that cannot reach the API.
type unreachable struct{ err error }

func (u unreachable) Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error) {
	return nil, u.err
}

func (u unreachable) Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return nil, u.err
}
