package kubectlplugin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Port names the operator gives the data-plane containers and Services: the client Service
// exposes "http", the headless one "internal" and "ops".
const (
	httpPortName = "http"
	opsPortName  = "ops"
)

// dataPlane reaches the pods of one cluster: through the API server's proxy (the client Service
// for the filter API, each pod for its ops port), or, with --direct, at the pods' own addresses.
type dataPlane struct {
	k       *kube
	cluster *bloomeryv1alpha1.BloomCluster
	direct  bool
	http    *http.Client // for --direct
}

// answer is what a data plane answered: its status and body.
type answer struct {
	status int
	body   []byte
}

func (a answer) ok() bool { return a.status >= 200 && a.status < 300 }

// errorBody is the data plane's error, or the body itself when it is not one.
func (a answer) errorBody() wire.ErrorBody {
	var e wire.ErrorBody
	if json.Unmarshal(a.body, &e) != nil || e.Code == 0 {
		return wire.ErrorBody{Error: strings.TrimSpace(string(a.body))}
	}
	return e
}

// clientAPI sends a request to the cluster's filter API (the client Service, any ready pod).
func (d *dataPlane) clientAPI(ctx context.Context, method, path string, body []byte) (answer, error) {
	scheme := "http"
	if d.cluster.TLSEnabled() {
		scheme = "https"
	}
	if d.direct {
		if scheme == "https" {
			return answer{}, fmt.Errorf("--direct speaks plain HTTP to the pods, and BloomCluster %q serves TLS: use the API server's proxy (without --direct)", d.cluster.Name)
		}
		pods, err := d.k.clusterPods(ctx, d.cluster)
		if err != nil {
			return answer{}, err
		}
		for _, p := range pods {
			if podReady(&p) && p.Status.PodIP != "" {
				return d.directCall(ctx, method, p.Status.PodIP, bloomeryv1alpha1.APIPort, path, body, "application/json")
			}
		}
		return answer{}, fmt.Errorf("BloomCluster %q has no ready pod with an address", d.cluster.Name)
	}
	target := scheme + ":" + d.cluster.ClientServiceName() + ":" + httpPortName
	return d.proxyCall(ctx, method, "services", target, path, body, "application/json")
}

// opsGet reads a path of one pod's ops port (/readyz, /metrics).
func (d *dataPlane) opsGet(ctx context.Context, pod *corev1.Pod, path string) (answer, error) {
	if d.direct {
		if pod.Status.PodIP == "" {
			return answer{}, errors.New("the pod has no address yet")
		}
		return d.directCall(ctx, http.MethodGet, pod.Status.PodIP, bloomeryv1alpha1.OpsPort, path, nil, "text/plain")
	}
	// The pod proxy takes a port number: unlike the Service proxy it does not resolve names.
	return d.proxyCall(ctx, http.MethodGet, "pods", pod.Name+":"+strconv.Itoa(int(opsPort(pod))), path, nil, "text/plain")
}

// opsPort is the number of the pod's port named ops, or the data plane's default.
func opsPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == opsPortName {
				return p.ContainerPort
			}
		}
	}
	return bloomeryv1alpha1.OpsPort
}

// proxyCall sends a request through the API server's proxy to a Service or pod:
// /api/v1/namespaces/NS/{services,pods}/[SCHEME:]NAME:PORT/proxy/PATH.
func (d *dataPlane) proxyCall(ctx context.Context, method, resource, target, path string, body []byte, accept string) (answer, error) {
	req := d.k.core.CoreV1().RESTClient().Verb(method).
		Namespace(d.k.namespace).Resource(resource).Name(target).SubResource("proxy").
		Suffix(path).SetHeader("Accept", accept)
	if body != nil {
		req = req.SetHeader("Content-Type", "application/json").Body(body)
	}
	result := req.Do(ctx)
	var status int
	result.StatusCode(&status)
	raw, err := result.Raw()
	// An answer of the data plane's own (a 404 for a missing filter) comes back as an error
	// with its body; the API server's own refusals carry a Status, which Error decodes.
	if err == nil || isDataPlaneError(raw) {
		return answer{status: status, body: raw}, nil
	}
	err = result.Error()
	verb := "get"
	if method != http.MethodGet {
		verb = "create"
	}
	return answer{}, d.proxyError(d.k.apiError(err, verb, resource+"/proxy"), resource, target)
}

// isDataPlaneError reports whether a body is the data plane's JSON error, not a Kubernetes Status.
func isDataPlaneError(body []byte) bool {
	var e struct {
		Kind string `json:"kind"`
		Code int    `json:"code"`
	}
	return json.Unmarshal(body, &e) == nil && e.Kind == "" && e.Code != 0
}

// proxyError explains the API server's refusals to proxy.
func (d *dataPlane) proxyError(err error, resource, target string) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address not allowed"):
		return fmt.Errorf("the API server refuses to proxy to the address of %s %s (it proxies only to global unicast addresses, not loopback or link-local ones); "+
			"from a machine that reaches the pods' addresses, use --direct: %w", strings.TrimSuffix(resource, "s"), target, err)
	case strings.Contains(msg, "no endpoints available"):
		return fmt.Errorf("no ready pod behind the Service of BloomCluster %q: the Service has no endpoints "+
			"(with --direct, the plugin calls a ready pod at its own address): %w", d.cluster.Name, err)
	case apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), utilnet.IsConnectionRefused(err):
		return fmt.Errorf("the API server could not reach %s %s: %w", strings.TrimSuffix(resource, "s"), target, err)
	}
	return err
}

// directCall sends a request to a pod's address, as --direct does.
func (d *dataPlane) directCall(ctx context.Context, method, ip string, port int32, path string, body []byte, accept string) (answer, error) {
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(int(port))) + path
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("--direct: cannot reach the pod at %s (this machine must reach the pods' network): %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // read whole below
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer of %s: %w", url, err)
	}
	return answer{status: resp.StatusCode, body: raw}, nil
}

// filterError turns a data plane's refusal into an error; a missing filter lists the cluster's
// BloomFilters.
func (d *dataPlane) filterError(ctx context.Context, filter string, a answer) error {
	e := a.errorBody()
	if a.status == http.StatusNotFound && e.Code == wire.CodeFilterNotFound {
		err := notFound("filter", filter, d.k.namespace, d.k.filterNames(ctx, d.cluster.Name))
		return fmt.Errorf("on BloomCluster %q: %w", d.cluster.Name, err)
	}
	return fmt.Errorf("BloomCluster %q answered %d %s: %s", d.cluster.Name, a.status, http.StatusText(a.status), e.Error)
}

// values sends values to one of the filter's multi-value operations; the multi-checks answer
// one bool per value, multi-set nothing.
func (d *dataPlane) values(ctx context.Context, filter string, op wire.FilterOp, values []string) ([]bool, error) {
	body, err := json.Marshal(map[string][]string{"values": values})
	if err != nil {
		return nil, err
	}
	a, err := d.clientAPI(ctx, http.MethodPost, wire.FilterOpPath(filter, op), body)
	if err != nil {
		return nil, err
	}
	if !a.ok() {
		return nil, d.filterError(ctx, filter, a)
	}
	if op == wire.OpMultiSet {
		return nil, nil
	}
	var present []bool
	if err := json.Unmarshal(a.body, &present); err != nil || len(present) != len(values) {
		return nil, fmt.Errorf("unexpected answer to %s: %q", op, a.body)
	}
	return present, nil
}

// info gets the filter as the data plane describes it.
func (d *dataPlane) info(ctx context.Context, filter string) (*wire.Filter, error) {
	a, err := d.clientAPI(ctx, http.MethodGet, wire.FilterPath(filter), nil)
	if err != nil {
		return nil, err
	}
	if !a.ok() {
		return nil, d.filterError(ctx, filter, a)
	}
	var f wire.Filter
	if err := json.Unmarshal(a.body, &f); err != nil {
		return nil, fmt.Errorf("unexpected answer for filter %q: %w", filter, err)
	}
	return &f, nil
}

// podStats reads the filters and their bytes from a pod's metrics.
func (d *dataPlane) podStats(ctx context.Context, pod *corev1.Pod) (filters, bytes int64, err error) {
	a, err := d.opsGet(ctx, pod, wire.MetricsPath)
	if err != nil {
		return 0, 0, err
	}
	if !a.ok() {
		return 0, 0, fmt.Errorf("%s answered %d: %s", wire.MetricsPath, a.status, a.errorBody().Error)
	}
	m := parseGauges(a.body, "bloomery_filters", "bloomery_filters_bytes")
	f, okF := m["bloomery_filters"]
	b, okB := m["bloomery_filters_bytes"]
	if !okF || !okB {
		return 0, 0, errors.New("no bloomery_filters and bloomery_filters_bytes in the metrics")
	}
	return int64(f), int64(b), nil
}

// parseGauges reads the values of unlabelled samples from the Prometheus text format.
func parseGauges(text []byte, names ...string) map[string]float64 {
	out := map[string]float64{}
	s := bufio.NewScanner(bytes.NewReader(text))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		for _, n := range names {
			if fields[0] == n {
				if v, err := strconv.ParseFloat(fields[1], 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}
