//go:build e2e

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A kubelet mounts a pod's ServiceAccount token where every in-cluster client looks for it,
// /var/run/secrets/kubernetes.io/serviceaccount, a path that processes sharing the host's files
// cannot each have. The agent gives such a pod a kubeconfig instead, of a token the API server
// issued to the pod's ServiceAccount and bound to the pod as the kubelet's is, named by KUBECONFIG
// in its environment: the data plane reads it before the in-cluster files.

// serviceAccountTokenSeconds is the life of a pod's token: longer than any run of the suite,
// since the agent, unlike a kubelet, does not refresh it.
const serviceAccountTokenSeconds = 6 * 3600

// mountsServiceAccountToken reports whether the kubelet would mount the pod's token: unless the
// pod, or else its ServiceAccount, says not to (the admission default is to mount).
func mountsServiceAccountToken(pod *corev1.Pod) bool {
	return pod.Spec.ServiceAccountName != "" &&
		(pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken)
}

// serviceAccountKubeconfig writes into dir a kubeconfig of a token of the pod's ServiceAccount
// for the API server api, and returns its path.
func serviceAccountKubeconfig(ctx context.Context, client kubernetes.Interface, api *rest.Config, pod *corev1.Pod, dir string) (string, error) {
	expiry := int64(serviceAccountTokenSeconds)
	tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err)
	}
	ca := api.CAData
	if len(ca) == 0 && api.CAFile != "" {
		if ca, err = os.ReadFile(api.CAFile); err != nil {
			return "", fmt.Errorf("reading the API server's CA: %w", err)
		}
	}
	kubeconfig := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"cluster": {Server: api.Host, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"pod": {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"pod": {Cluster: "cluster", AuthInfo: "pod", Namespace: pod.Namespace}},
		CurrentContext: "pod",
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the ServiceAccount directory: %w", err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(kubeconfig, path); err != nil {
		return "", fmt.Errorf("writing the pod's kubeconfig: %w", err)
	}
	return path, nil
}
