//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/bloomery/bloomery/test/e2e/promconfig"
)

// A real Prometheus, the cached binary of `make prometheus-tools` (PROMETHEUS_TOOLS_DIR), runs
// per test on the scrape configuration the Prometheus Operator would generate (promconfig) and
// the alert rules of config/prometheus/alerts.yaml, and is asked through its HTTP API.

// prometheusAccount is the ServiceAccount Prometheus discovers its targets as.
const prometheusAccount = "prometheus"

// prometheusDiscoveryRules are what Kubernetes service discovery reads, as kube-prometheus grants
// its Prometheus: the Services, their EndpointSlices (or Endpoints) and the pods behind them.
var prometheusDiscoveryRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
}

// ruleGroup is a group of a PrometheusRule's spec, which is also a rule file's.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// alertRuleGroups reads the rule groups of config/prometheus/alerts.yaml's spec, strictly: a field
// this copy would drop must not pass unnoticed.
func (n namespace) alertRuleGroups() []ruleGroup {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.root, "config", "prometheus", "alerts.yaml"))
	if err != nil {
		n.t.Fatal(err)
	}
	var prometheusRule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []ruleGroup `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &prometheusRule); err != nil {
		n.t.Fatalf("config/prometheus/alerts.yaml: %v", err)
	}
	if len(prometheusRule.Spec.Groups) == 0 {
		n.t.Fatal("config/prometheus/alerts.yaml has no rule groups")
	}
	return prometheusRule.Spec.Groups
}

// runningPrometheus is one test's Prometheus and its API.
type runningPrometheus struct {
	*process
	url string
	api promv1.API
}

// startPrometheus runs Prometheus on the scrape configurations and rule groups until the test
// ends, and returns once it is ready. Its files (prometheus.yml, rules.yaml, the TSDB) are in the
// run directory's prometheus-<namespace>, its log beside them. The scrape configurations discover
// their targets with the kubeconfig of n.prometheusKubeconfig.
func (n namespace) startPrometheus(scrapeConfigs []promconfig.ScrapeConfig, groups []ruleGroup) *runningPrometheus {
	n.t.Helper()
	binary, err := promconfig.Tool("prometheus")
	if err != nil {
		n.t.Fatal(err) // CI must never pass by not running it
	}
	dir := filepath.Join(h.workDir, "prometheus-"+n.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		n.t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o644); err != nil {
		n.t.Fatal(err)
	}
	config, err := promconfig.Config{
		// Rules are evaluated every second, so that an alert fires within seconds of its for.
		Global:        promconfig.Global{EvaluationInterval: "1s"},
		RuleFiles:     []string{rulesFile},
		ScrapeConfigs: scrapeConfigs,
	}.Marshal()
	if err != nil {
		n.t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, config, 0o644); err != nil {
		n.t.Fatal(err)
	}
	addr, err := freeLocalAddress()
	if err != nil {
		n.t.Fatal(err)
	}
	p, err := startProcess("prometheus", dir+".log", nil, binary,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	if err != nil {
		n.t.Fatal(err)
	}
	stop := func() {
		if err := p.stop(15 * time.Second); err != nil {
			n.t.Logf("stopping Prometheus: %v", err)
		}
	}
	n.t.Cleanup(stop)
	h.onStop(stop) // an interrupted run stops it before the API server, which would wait for its watches
	url := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitHTTPOK(ctx, url+"/-/ready", p); err != nil {
		n.t.Fatalf("Prometheus not ready (config %s, log %s): %v", configFile, p.logPath, err)
	}
	client, err := api.NewClient(api.Config{Address: url, Client: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Logf("Prometheus at %s: config %s, log %s", url, configFile, p.logPath)
	return &runningPrometheus{process: p, url: url, api: promv1.NewAPI(client)}
}

// prometheusKubeconfig makes the ServiceAccount prometheus, allowed to discover targets in the
// namespace alone, and returns a kubeconfig with its token, for kubernetes_sd_configs.
func (n namespace) prometheusKubeconfig() string {
	n.t.Helper()
	n.run("create", "serviceaccount", prometheusAccount)
	manifest, err := roleManifest(prometheusAccount, n.name, prometheusDiscoveryRules,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: prometheusAccount, Namespace: n.name})
	if err != nil {
		n.t.Fatal(err)
	}
	n.apply(manifest)
	kubeconfig, err := h.accountKubeconfig(n.name, prometheusAccount, time.Hour)
	if err != nil {
		n.t.Fatal(err)
	}
	return kubeconfig
}

// apiContext bounds one call to Prometheus's API.
func apiContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// describe is what Prometheus answered, for a failure's message.
func describe(v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(data)
}
