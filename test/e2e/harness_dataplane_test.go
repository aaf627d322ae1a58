//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// dataPlaneHTTP is the client of the tests' calls to the pods, as an application would call them:
// plain HTTP and JSON (README, "The API").
var dataPlaneHTTP = &http.Client{Timeout: 10 * time.Second}

// podAPI is the data-plane API of one pod, at the address its status reports: its public API,
// or its internal port with the cluster's token (internalAPI).
type podAPI struct {
	t     testing.TB
	pod   string
	base  string
	token string // sent as the bearer token when set
	// http sends the requests; nil means dataPlaneHTTP. A pod of a cluster with spec.tls needs
	// one that trusts the cluster's CA (overTLS).
	http *http.Client
}

// overTLS calls the same port over https with client, as a pod of a cluster with spec.tls serves it.
func (p podAPI) overTLS(client *http.Client) podAPI {
	p.base = "https://" + strings.TrimPrefix(p.base, "http://")
	p.http = client
	return p
}

// api returns the API of a pod, read from its status as a user would with kubectl.
func (n namespace) api(pod string) podAPI {
	n.t.Helper()
	ip := n.jsonpath("pod/"+pod, "{.status.podIP}")
	port := n.jsonpath("pod/"+pod, `{.spec.containers[0].ports[?(@.name=="http")].containerPort}`)
	if ip == "" || port == "" {
		n.t.Fatalf("pod %s has no IP (%q) or http port (%q) yet", pod, ip, port)
	}
	return podAPI{t: n.t, pod: pod, base: "http://" + net.JoinHostPort(ip, port)}
}

// freshConnections sends each request on a new connection, so that the client Service balances
// each one anew, as it does the requests of many short-lived clients.
var freshConnections = &http.Client{Timeout: dataPlaneHTTP.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}

// serviceAPI returns the API behind a port of a Service, at the Service's cluster IP, as an
// application in the cluster calls it. The test skips where no Service can be reached.
func (n namespace) serviceAPI(service, port string) podAPI {
	n.t.Helper()
	if !h.net.servicesReachable() {
		n.t.Skip("no Service can be reached: " + h.net.noServices)
	}
	f := strings.Fields(n.jsonpath("service/"+service, fmt.Sprintf(`{.spec.clusterIP} {.spec.ports[?(@.name==%q)].port}`, port)))
	if len(f) != 2 {
		n.t.Fatalf("service %s has no cluster IP or port %s: %q", service, port, f)
	}
	return podAPI{t: n.t, pod: "service/" + service, base: "http://" + net.JoinHostPort(f[0], f[1]), http: freshConnections}
}

// internalAPI returns the internal port of a pod, as the operator and the peers call it: with the
// token of its cluster, read from the Secret the operator made.
func (n namespace) internalAPI(pod string) podAPI {
	n.t.Helper()
	f := strings.Fields(n.jsonpath("pod/"+pod, `{.status.podIP} {.spec.containers[0].ports[?(@.name=="internal")].containerPort} `+
		`{.metadata.labels.app\.kubernetes\.io/instance}`))
	if len(f) != 3 {
		n.t.Fatalf("pod %s has no IP, internal port or cluster label yet: %q", pod, f)
	}
	token, err := n.internalToken(f[2])
	if err != nil {
		n.t.Fatal(err)
	}
	return podAPI{t: n.t, pod: pod, base: "http://" + net.JoinHostPort(f[0], f[1]), token: token}
}

// internalToken reads the internal token of a BloomCluster from its Secret.
func (n namespace) internalToken(cluster string) (string, error) {
	encoded, err := n.try("get", "secret", cluster+"-internal-token", "-o", "jsonpath={.data.token}")
	if err != nil {
		return "", err
	}
	token, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return "", fmt.Errorf("secret %s-internal-token: %w", cluster, err)
	}
	if len(token) == 0 {
		return "", fmt.Errorf("secret %s-internal-token holds no token", cluster)
	}
	return string(token), nil
}

// call sends a request and returns the status and body.
func (p podAPI) call(method, path string, body any) (int, []byte, error) {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		reader = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dataPlaneHTTP.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	client := dataPlaneHTTP
	if p.http != nil {
		client = p.http
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s on pod %s: %w", method, path, p.pod, err)
	}
	defer func() { _ = resp.Body.Close() }() // read in full below
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// post calls a filter's endpoint, requires 200 and decodes the answer into out (if not nil).
func (p podAPI) post(filter, endpoint string, body, out any) {
	p.t.Helper()
	status, data, err := p.call(http.MethodPost, "/v1/bloomfilter/"+filter+"/"+endpoint, body)
	if err != nil {
		p.t.Fatal(err)
	}
	if status != http.StatusOK {
		p.t.Fatalf("POST %s/%s on pod %s: status %d: %s", filter, endpoint, p.pod, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			p.t.Fatalf("POST %s/%s on pod %s: answer %q: %v", filter, endpoint, p.pod, data, err)
		}
	}
}

func (p podAPI) checkAndSet(filter, value string) bool {
	p.t.Helper()
	var present bool
	p.post(filter, "check-and-set", map[string]any{"value": value}, &present)
	return present
}

func (p podAPI) multiCheckAndSet(filter string, values []string) []bool {
	p.t.Helper()
	var present []bool
	p.post(filter, "multi-check-and-set", map[string]any{"values": values}, &present)
	return present
}

func (p podAPI) multiCheck(filter string, values []string) []bool {
	p.t.Helper()
	var present []bool
	p.post(filter, "multi-check", map[string]any{"values": values}, &present)
	return present
}

// requireAllPresent checks that every value checks true: a bloom filter never forgets.
func (p podAPI) requireAllPresent(filter string, values []string) {
	p.t.Helper()
	got := p.multiCheck(filter, values)
	var missing []string
	for i, v := range values {
		if !got[i] {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		p.t.Fatalf("pod %s lost %d of %d acknowledged values of filter %s, such as %q", p.pod, len(missing), len(values), filter, missing[0])
	}
}

// filter GETs a filter and returns the status and the decoded body.
func (p podAPI) filter(name string) (int, map[string]any) {
	p.t.Helper()
	status, data, err := p.call(http.MethodGet, "/v1/bloomfilter/"+name, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil {
		p.t.Fatalf("GET filter %s on pod %s: %q: %v", name, p.pod, data, err)
	}
	return status, body
}

// addValues adds n new values named prefix-i through multi-check-and-set and checks that each was
// new (false); it returns them.
func (p podAPI) addValues(filter, prefix string, n int) []string {
	p.t.Helper()
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	if got := p.multiCheckAndSet(filter, values); slices.Contains(got, true) {
		p.t.Fatalf("pod %s: multi-check-and-set of %d new values answered %v: some were present before", p.pod, n, got)
	}
	return values
}
