//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/internal/await"
)

// The operator as installed makes the ServiceMonitor a BloomCluster asks for, and the
// Prometheus Operator's CRD takes it as the operator wrote it; the operator's own metrics answer
// over HTTPS a ServiceAccount bound to the metrics-reader ClusterRole, and nobody else.
func TestOperatorAsInstalled(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamplesPatched(onePodPatch + `
- op: add
  path: /spec/monitoring
  value: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}`)

	t.Run("the ServiceMonitor meets the real CRD", func(t *testing.T) {
		n := namespace{t: t, name: n.name}
		// What the schema does not know it prunes: each field the operator set must be there.
		got := n.jsonpath("servicemonitor/example", `{.spec.endpoints[0].port} {.spec.endpoints[0].path} `+
			`{.spec.endpoints[0].interval} {.spec.namespaceSelector.matchNames} {.metadata.labels.release}`)
		if want := fmt.Sprintf(`ops /metrics 15s ["%s"] prom`, n.name); got != want {
			t.Errorf("ServiceMonitor example: %q, want %q", got, want)
		}
		// Its selector picks the headless Service, which has the port it names.
		var matchLabels map[string]string
		if err := json.Unmarshal([]byte(n.jsonpath("servicemonitor/example", "{.spec.selector.matchLabels}")), &matchLabels); err != nil {
			t.Fatal(err)
		}
		var selector []string
		for k, v := range matchLabels {
			selector = append(selector, k+"="+v)
		}
		services := n.run("get", "services", "--selector", strings.Join(selector, ","),
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.ports[?(@.name=="ops")].port}{"\n"}{end}`)
		if strings.TrimSpace(services) != "example-headless 9090" {
			t.Errorf("the ServiceMonitor's selector %v selects %q, want the headless Service and its ops port", selector, services)
		}
		// config/prometheus, the ServiceMonitor of the operator itself, as config/default would
		// install it.
		overlay, err := kustomizeOverlay(t.TempDir(), operatorNamespace, installPrefix, filepath.Join(h.root, "config", "prometheus"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
		defer cancel()
		if _, _, err := h.kubectl.run(ctx, "", "apply", "--dry-run=server", "-k", overlay); err != nil {
			t.Errorf("config/prometheus: %v", err)
		}
	})

	t.Run("metrics for the reader role alone", func(t *testing.T) {
		n := namespace{t: t, name: n.name}
		n.run("create", "serviceaccount", "prometheus")
		n.run("create", "serviceaccount", "stranger")
		binding := n.name + "-metrics-reader" // cluster-wide: it goes with the test, not its namespace
		n.run("create", "clusterrolebinding", binding, "--clusterrole", metricsReaderRole, "--serviceaccount", n.name+":prometheus")
		t.Cleanup(func() {
			if _, err := n.try("delete", "clusterrolebinding", binding); err != nil {
				t.Log(err)
			}
		})
		// The operator keeps a refusal for 30 s: ask the API server first, as the operator will.
		await.Until(t, waitTimeout, "the reader role to be granted", func() (bool, string) {
			out, _ := n.try("auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:"+n.name+":prometheus")
			return strings.TrimSpace(out) == "yes", out
		})
		if out, _ := n.try("auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:"+n.name+":stranger"); strings.TrimSpace(out) != "no" {
			t.Fatalf("kubectl auth can-i get /metrics as the stranger: %q, want no", out)
		}
		reader, err := h.token(n.name, "prometheus", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		stranger, err := h.token(n.name, "stranger", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		url := h.clusterWideOperator().metricsURL

		status, body, contentType := scrape(t, url, reader)
		if status != http.StatusOK {
			t.Fatalf("GET %s with the reader's token: %d %s", url, status, body)
		}
		families, err := metricstest.Parse(body, contentType, "")
		if err != nil {
			t.Fatal(err)
		}
		// Real metrics: the reconciles of this test's cluster and filter, whatever their result
		// (a pass that asks to come back after the resync counts as requeue_after).
		for _, controller := range []string{"bloomcluster", "bloomfilter"} {
			var reconciles float64
			for _, m := range families.Samples("controller_runtime_reconcile_total", "controller", controller) {
				reconciles += m.GetCounter().GetValue()
			}
			if reconciles < 1 {
				t.Errorf("controller_runtime_reconcile_total{controller=%q} adds up to %v, want at least one reconcile", controller, reconciles)
			}
		}

		if status, body, _ := scrape(t, url, stranger); status != http.StatusForbidden {
			t.Errorf("GET %s with the token of a ServiceAccount without the reader role: %d %s, want 403", url, status, body)
		}
		if status, body, _ := scrape(t, url, ""); status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d %s, want 401", url, status, body)
		}
		// A token the API server does not know is refused too. controller-runtime (v0.25) answers it
		// 500 "Authentication failed" rather than 401: its TokenReview authenticator returns an
		// error for an unauthenticated token, which its filter takes for a failure of its own.
		if status, body, _ := scrape(t, url, "not-a-token"); status != http.StatusUnauthorized && status != http.StatusInternalServerError {
			t.Errorf("GET %s with a token of nobody: %d %s, want it refused (401, or 500 from controller-runtime)", url, status, body)
		}
	})

	// Every pass compares the ServiceMonitor with what it wants: had the schema dropped or
	// changed a field the operator sets, each pass would write it again.
	if got := n.jsonpath("servicemonitor/example", "{.metadata.generation}"); got != "1" {
		t.Errorf("ServiceMonitor example is at generation %s, want 1: the operator rewrites it", got)
	}
}

// scrape GETs the operator's metrics with a bearer token (none if empty). The operator serves a
// certificate it signed itself at start, unless one is mounted for it: like config/prometheus's
// ServiceMonitor, the scrape does not verify it.
func scrape(t *testing.T, url, token string) (status int, body []byte, contentType string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a self-signed certificate, as above
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // read in full below
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, body, resp.Header.Get("Content-Type")
}

// TestNamespacedOperator installs the operator as the chart does with watchNamespaces: the rules
// of config/rbac/role.yaml as a Role in the watched namespace alone, the leader election Role in a
// namespace of the operator's own, where its lease is. Run with --watch-namespace, it makes the
// BloomCluster of its namespace Ready and does not touch one in another namespace.
//
// Not parallel: Go runs it before every parallel test, and alone. The cluster-wide operator, which
// would reconcile both clusters, is stopped while it runs, and started again when it ends.
func TestNamespacedOperator(t *testing.T) {
	own, watched, other := newNamespace(t), newNamespace(t), newNamespace(t)
	const account = installPrefix + "operator"
	own.run("create", "serviceaccount", account)
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: own.name}
	for _, grant := range []struct {
		n          namespace
		name, file string
	}{
		{own, installPrefix + "leader-election", "leader_election_role.yaml"},
		{watched, installPrefix + "operator", "role.yaml"},
	} {
		rules, err := readRules(h.root, grant.file)
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := roleManifest(grant.name, grant.n.name, rules, subject)
		if err != nil {
			t.Fatal(err)
		}
		grant.n.apply(manifest)
	}
	kubeconfig, err := h.accountKubeconfig(own.name, account, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	restart, err := h.stopClusterWideOperator()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("starting the cluster-wide operator again: %v", err)
		}
	})
	// Made before the operator starts: had it watched the namespace, its first pass would have
	// found the cluster.
	other.run("apply", "-k", other.samplesOverlay(onePodPatch))
	// As they were made: no operator may write either after that.
	objects := []string{"bloomcluster/example", "bloomfilter/users"}
	versions := map[string]string{}
	for _, object := range objects {
		versions[object] = other.jsonpath(object, "{.metadata.resourceVersion}")
	}
	op, err := h.startOperator(operatorRun{name: "operator-namespaced", kubeconfig: kubeconfig, namespace: own.name, watchNamespace: watched.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.stop(15 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("---- namespaced operator log %s, last %d lines:\n%s", op.logPath, logTailLines, tail(op.logPath, logTailLines))
		}
	})

	watched.applyOnePodSamples()
	watched.waitMembership(podNames(1))

	for _, object := range objects {
		if got := other.jsonpath(object, "{.metadata.resourceVersion}"); got != versions[object] {
			t.Errorf("%s of namespace %s, which the operator does not watch, was written (version %s, created as %s): %s",
				object, other.name, got, versions[object], other.jsonpath(object, "{.metadata.finalizers} {.status}"))
		}
	}
	kinds := "statefulsets,services,configmaps,secrets,poddisruptionbudgets,networkpolicies,events"
	if got := strings.Fields(other.run("get", kinds, "-o", "name")); len(got) > 0 {
		t.Errorf("objects in namespace %s, which the operator does not watch: %v", other.name, got)
	}
	if lines := grepTail(op.logPath, other.name, 5); lines != "" {
		t.Errorf("the namespaced operator's log names namespace %s, which it does not watch:\n%s", other.name, lines)
	}
	// Gone before the cluster-wide operator starts again, which would start its pod.
	other.run("delete", "bloomcluster", "example", "--wait=false")
}
