package lease

import (
	"context"
	"fmt"
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// InCluster reaches the Leases of namespace with the pod's ServiceAccount, as every client in a
// pod does (the API server's address from the environment, the token and CA from the mounted
// files), or, when KUBECONFIG names a file, as that kubeconfig says: the way of a data plane run
// as a process outside a pod that still holds a lease. Without either, the Leases it returns
// fail every call with the reason, which the renewer logs at each attempt: the pod then is no
// partition's home, and says why.
func InCluster(namespace string) Leases {
	cfg, err := apiConfig(os.Getenv("KUBECONFIG"))
	if err != nil {
		return unreachable{err}
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

// apiConfig is how to reach the API server: kubeconfig's, or the pod's in-cluster configuration
// when kubeconfig is empty.
func apiConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig %s (KUBECONFIG): %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no in-cluster configuration to reach the Kubernetes API (is the ServiceAccount token mounted?): %w", err)
	}
	return cfg, nil
}
