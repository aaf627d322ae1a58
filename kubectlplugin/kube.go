package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// Resource names as the API server and RBAC know them.
const (
	clustersResource = "bloomclusters"
	filtersResource  = "bloomfilters"
	bloomeryGroup    = "bloomery.io"
)

// kube is what the plugin reaches of the API server: the core API (pods, the proxy) and the
// bloomery.io resources, in one namespace.
type kube struct {
	namespace string
	host      string // the API server's URL, for the errors that say it cannot be reached
	core      kubernetes.Interface
	bloomery  rest.Interface
}

// connect loads the kubeconfig as kubectl does ($KUBECONFIG, ~/.kube/config, or --kubeconfig),
// with --context and --namespace over it; the namespace defaults to the context's.
func connect(f *globalFlags) (*kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	config, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	config.Timeout = f.requestTimeout
	config.UserAgent = "kubectl-bloomery"
	return newKube(config, namespace)
}

// newKube makes the clients of one namespace from a REST config.
func newKube(config *rest.Config, namespace string) (*kube, error) {
	core, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := bloomeryv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	crd := rest.CopyConfig(config)
	crd.GroupVersion = &bloomeryv1alpha1.GroupVersion
	crd.APIPath = "/apis"
	crd.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	crd.ContentType = runtime.ContentTypeJSON
	bloomery, err := rest.RESTClientFor(crd)
	if err != nil {
		return nil, err
	}
	return &kube{namespace: namespace, host: config.Host, core: core, bloomery: bloomery}, nil
}

// apiError turns an error of the API server into one a user can act on: which verb on which
// resource RBAC denied, that the server cannot be reached, that the CRDs are missing. resource is
// as RBAC names it ("bloomclusters.bloomery.io", "pods", "services/proxy").
func (k *kube) apiError(err error, verb, resource string) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("RBAC denied: you may not %s %s in namespace %q (a Role or ClusterRole must grant the verb %q on %q): %w",
			verb, resource, k.namespace, verb, resource, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server at %s did not accept your credentials (log in again, or check the kubeconfig's user): %w", k.host, err)
	case errors.As(err, &status):
		return err
	case unreachable(err):
		return fmt.Errorf("cannot reach the Kubernetes API server at %s (check the kubeconfig's current context, --context or --kubeconfig): %w", k.host, err)
	}
	return err
}

// unreachable reports whether err is a failure to connect or to hear from the API server.
func unreachable(err error) bool {
	var urlErr *url.Error
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.As(err, &opErr) ||
		errors.Is(err, context.DeadlineExceeded)
}

// crdMissing reports whether a NotFound is for the resource type itself rather than an object:
// the API server then names no object in the status.
func crdMissing(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

func noCRDs(kind string, err error) error {
	return fmt.Errorf("this API server does not serve %s (%s): is Bloomery's operator, with its CRDs, installed? %w",
		kind, bloomeryv1alpha1.GroupVersion, err)
}

func (k *kube) listClusters(ctx context.Context) ([]bloomeryv1alpha1.BloomCluster, error) {
	var list bloomeryv1alpha1.BloomClusterList
	err := k.bloomery.Get().Namespace(k.namespace).Resource(clustersResource).Do(ctx).Into(&list)
	if crdMissing(err) {
		return nil, noCRDs("BloomClusters", err)
	}
	if err != nil {
		return nil, k.apiError(err, "list", clustersResource+"."+bloomeryGroup)
	}
	slices.SortFunc(list.Items, func(a, b bloomeryv1alpha1.BloomCluster) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// getCluster gets one BloomCluster; when there is none of that name, the error lists those there
// are.
func (k *kube) getCluster(ctx context.Context, name string) (*bloomeryv1alpha1.BloomCluster, error) {
	var c bloomeryv1alpha1.BloomCluster
	err := k.bloomery.Get().Namespace(k.namespace).Resource(clustersResource).Name(name).Do(ctx).Into(&c)
	switch {
	case crdMissing(err):
		return nil, noCRDs("BloomClusters", err)
	case apierrors.IsNotFound(err):
		clusters, listErr := k.listClusters(ctx)
		if listErr != nil {
			return nil, fmt.Errorf("BloomCluster %q not found in namespace %q", name, k.namespace)
		}
		names := make([]string, len(clusters))
		for i, c := range clusters {
			names[i] = c.Name
		}
		return nil, notFound("BloomCluster", name, k.namespace, names)
	case err != nil:
		return nil, k.apiError(err, "get", clustersResource+"."+bloomeryGroup)
	}
	return &c, nil
}

// notFound says that an object is missing, and which of its kind there are.
func notFound(kind, name, namespace string, existing []string) error {
	there := "there are none"
	if len(existing) > 0 {
		there = "there are: " + strings.Join(existing, ", ")
	}
	return fmt.Errorf("%s %q not found in namespace %q; %s", kind, name, namespace, there)
}

// listFilters lists the BloomFilters of the namespace; with cluster set, only that cluster's.
func (k *kube) listFilters(ctx context.Context, cluster string) ([]bloomeryv1alpha1.BloomFilter, error) {
	var list bloomeryv1alpha1.BloomFilterList
	err := k.bloomery.Get().Namespace(k.namespace).Resource(filtersResource).Do(ctx).Into(&list)
	if crdMissing(err) {
		return nil, noCRDs("BloomFilters", err)
	}
	if err != nil {
		return nil, k.apiError(err, "list", filtersResource+"."+bloomeryGroup)
	}
	out := list.Items[:0]
	for _, f := range list.Items {
		if cluster == "" || f.Spec.ClusterRef.Name == cluster {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b bloomeryv1alpha1.BloomFilter) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (k *kube) filterNames(ctx context.Context, cluster string) []string {
	filters, err := k.listFilters(ctx, cluster)
	if err != nil {
		return nil
	}
	names := make([]string, len(filters))
	for i, f := range filters {
		names[i] = f.Name
	}
	return names
}

func (k *kube) getFilter(ctx context.Context, name string) (*bloomeryv1alpha1.BloomFilter, error) {
	var f bloomeryv1alpha1.BloomFilter
	err := k.bloomery.Get().Namespace(k.namespace).Resource(filtersResource).Name(name).Do(ctx).Into(&f)
	switch {
	case crdMissing(err):
		return nil, noCRDs("BloomFilters", err)
	case apierrors.IsNotFound(err):
		return nil, notFound("BloomFilter", name, k.namespace, k.filterNames(ctx, ""))
	case err != nil:
		return nil, k.apiError(err, "get", filtersResource+"."+bloomeryGroup)
	}
	return &f, nil
}

func (k *kube) createFilter(ctx context.Context, f *bloomeryv1alpha1.BloomFilter) (*bloomeryv1alpha1.BloomFilter, error) {
	var created bloomeryv1alpha1.BloomFilter
	err := k.bloomery.Post().Namespace(k.namespace).Resource(filtersResource).Body(f).Do(ctx).Into(&created)
	switch {
	case crdMissing(err):
		return nil, noCRDs("BloomFilters", err)
	case apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("BloomFilter %q already exists in namespace %q", f.Name, k.namespace)
	case err != nil:
		return nil, k.apiError(err, "create", filtersResource+"."+bloomeryGroup)
	}
	return &created, nil
}

func (k *kube) deleteFilter(ctx context.Context, name string) error {
	err := k.bloomery.Delete().Namespace(k.namespace).Resource(filtersResource).Name(name).Do(ctx).Error()
	switch {
	case crdMissing(err):
		return noCRDs("BloomFilters", err)
	case apierrors.IsNotFound(err):
		return notFound("BloomFilter", name, k.namespace, k.filterNames(ctx, ""))
	}
	return k.apiError(err, "delete", filtersResource+"."+bloomeryGroup)
}

// waitFilterReady polls the BloomFilter until its Ready condition is True.
func (k *kube) waitFilterReady(ctx context.Context, name string, timeout time.Duration) (*bloomeryv1alpha1.BloomFilter, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		f, err := k.getFilter(ctx, name)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if f != nil && conditionStatus(f.Status.Conditions, "Ready") == string(metav1.ConditionTrue) {
			return f, nil
		}
		select {
		case <-ctx.Done():
			msg := "no Ready condition yet"
			if f != nil {
				if c := findCondition(f.Status.Conditions, "Ready"); c != nil {
					msg = fmt.Sprintf("Ready is %s: %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			return nil, fmt.Errorf("BloomFilter %q not Ready within %v (%s)", name, timeout, msg)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// clusterPods lists the pods of a cluster, by the selector its status publishes.
func (k *kube) clusterPods(ctx context.Context, c *bloomeryv1alpha1.BloomCluster) ([]corev1.Pod, error) {
	selector := c.Status.Selector
	if selector == "" {
		// The operator's labels, for a cluster it has not yet given a status.
		selector = "app.kubernetes.io/name=bloomery,app.kubernetes.io/instance=" + c.Name + ",app.kubernetes.io/component=dataplane"
	}
	list, err := k.core.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, k.apiError(err, "list", "pods")
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// conditionStatus is the status of the condition of that type, or "Unknown" without one.
func conditionStatus(conds []metav1.Condition, typ string) string {
	if c := findCondition(conds, typ); c != nil {
		return string(c.Status)
	}
	return string(metav1.ConditionUnknown)
}
