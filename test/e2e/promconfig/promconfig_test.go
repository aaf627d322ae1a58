//go:build e2e

package promconfig

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/controllers"
)

// operatorServiceMonitor is the ServiceMonitor the operator renders for the sample BloomCluster in
// namespace shop, with the ServiceMonitor on, every 5s.
func operatorServiceMonitor(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", "bloomery_v1alpha1_bloomcluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c bloomeryv1alpha1.BloomCluster
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatal(err)
	}
	c.Namespace = "shop"
	c.Spec.Monitoring.ServiceMonitor = bloomeryv1alpha1.ServiceMonitorSpec{Enabled: true, Interval: "5s", Labels: map[string]string{"release": "prom"}}
	return controllers.BuildServiceMonitor(&c)
}

// wantScrapeConfig is the translation of operatorServiceMonitor, written down field by field from
// the Prometheus Operator's generateServiceMonitorConfig, for a Prometheus that discovers
// EndpointSlices.
const wantScrapeConfig = `
job_name: serviceMonitor/shop/example/0
honor_labels: false
kubernetes_sd_configs:
  - role: endpointslice
    kubeconfig_file: /etc/prometheus/kubeconfig
    namespaces: {names: [shop]}
scrape_interval: 5s
metrics_path: /metrics
relabel_configs:
  - {source_labels: [job], target_label: __tmp_prometheus_job_name}
  # The selector: the headless Service of the cluster "example".
  - action: keep
    source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_component, __meta_kubernetes_service_labelpresent_app_kubernetes_io_component]
    regex: (dataplane);true
  - action: keep
    source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_instance, __meta_kubernetes_service_labelpresent_app_kubernetes_io_instance]
    regex: (example);true
  - action: keep
    source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_name, __meta_kubernetes_service_labelpresent_app_kubernetes_io_name]
    regex: (bloomery);true
  - action: keep
    source_labels: [__meta_kubernetes_service_label_bloomery_io_service, __meta_kubernetes_service_labelpresent_bloomery_io_service]
    regex: (headless);true
  # Its port ops.
  - {action: keep, source_labels: [__meta_kubernetes_endpointslice_port_name], regex: ops}
  - source_labels: [__meta_kubernetes_endpointslice_address_target_kind, __meta_kubernetes_endpointslice_address_target_name]
    separator: ;
    regex: Node;(.*)
    replacement: ${1}
    target_label: node
  - source_labels: [__meta_kubernetes_endpointslice_address_target_kind, __meta_kubernetes_endpointslice_address_target_name]
    separator: ;
    regex: Pod;(.*)
    replacement: ${1}
    target_label: pod
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_service_name], target_label: service}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}
  - {action: drop, source_labels: [__meta_kubernetes_pod_phase], regex: (Failed|Succeeded)}
  - {source_labels: [__meta_kubernetes_service_name], target_label: job, replacement: "${1}"}
  - {target_label: endpoint, replacement: ops}
  - {source_labels: [__address__], target_label: __tmp_hash, modulus: 1, action: hashmod}
  - {source_labels: [__tmp_hash], regex: "0", action: keep}
`

func TestTranslationOfTheOperatorsServiceMonitor(t *testing.T) {
	configs, err := ScrapeConfigs(operatorServiceMonitor(t), Options{Role: EndpointSlice, KubeconfigFile: "/etc/prometheus/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	if len(configs) != 1 {
		t.Fatalf("%d scrape configurations, want 1 (one endpoint): %+v", len(configs), configs)
	}
	got, err := yaml.Marshal(configs[0])
	if err != nil {
		t.Fatal(err)
	}
	requireSameYAML(t, got, []byte(wantScrapeConfig))
}

// The Endpoints role reads the same facts from other discovered labels.
func TestTranslationForTheEndpointsRole(t *testing.T) {
	configs, err := ScrapeConfigs(operatorServiceMonitor(t), Options{Role: Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(configs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(wantScrapeConfig, "__meta_kubernetes_endpointslice_", "__meta_kubernetes_endpoint_")
	want = strings.Replace(want, "role: endpointslice\n    kubeconfig_file: /etc/prometheus/kubeconfig", "role: endpoints", 1)
	requireSameYAML(t, got, []byte(want))
}

// A field the translation does not know would change what the Prometheus Operator generates: it
// is refused rather than ignored.
func TestUnknownFieldsAreRefused(t *testing.T) {
	sm := operatorServiceMonitor(t)
	endpoints := sm.Object["spec"].(map[string]any)["endpoints"].([]any)
	endpoints[0].(map[string]any)["bearerTokenFile"] = "/var/run/secrets/token"
	_, err := ScrapeConfigs(sm, Options{Role: EndpointSlice})
	if err == nil || !strings.Contains(err.Error(), "bearerTokenFile") {
		t.Fatalf("a ServiceMonitor with bearerTokenFile: err = %v, want it refused by name", err)
	}
}

// The endpoint's own relabelings come after the generated ones, actions in lower case; metric
// relabelings go to metric_relabel_configs.
func TestEndpointRelabelings(t *testing.T) {
	sm := operatorServiceMonitor(t)
	ep := sm.Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	ep["relabelings"] = []any{map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "node", "action": "Replace"}}
	ep["metricRelabelings"] = []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_.*", "action": "drop"}}
	configs, err := ScrapeConfigs(sm, Options{Role: EndpointSlice})
	if err != nil {
		t.Fatal(err)
	}
	relabel := configs[0].RelabelConfigs
	own := relabel[len(relabel)-3] // before the two sharding rules
	if want := (RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, TargetLabel: "node", Action: "replace"}); !reflect.DeepEqual(own, want) {
		t.Errorf("the endpoint's relabeling became %+v, want %+v after the generated ones", own, want)
	}
	if want := []RelabelConfig{{SourceLabels: []string{"__name__"}, Regex: "go_.*", Action: "drop"}}; !reflect.DeepEqual(configs[0].MetricRelabelConfigs, want) {
		t.Errorf("metric_relabel_configs %+v, want %+v", configs[0].MetricRelabelConfigs, want)
	}
}

// promtool, the configuration's own checker, accepts the generated file.
func TestPromtoolAcceptsTheConfig(t *testing.T) {
	promtool, err := Tool("promtool")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	configs, err := ScrapeConfigs(operatorServiceMonitor(t), Options{Role: EndpointSlice, KubeconfigFile: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Config{Global: Global{EvaluationInterval: "1s"}, ScrapeConfigs: configs}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "config", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config refused the generated configuration: %v\n%s\n%s", err, out, data)
	}
}

// The version looked for in the cache is the one the Makefile builds.
func TestVersionIsTheMakefiles(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMETHEUS_VERSION \?= (\S+)$`).FindSubmatch(makefile)
	if m == nil || string(m[1]) != Version {
		t.Fatalf("the Makefile's PROMETHEUS_VERSION is %q, promconfig.Version %q", m, Version)
	}
}

// requireSameYAML compares two YAML documents as data, and prints both when they differ.
func requireSameYAML(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := yaml.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		wantNorm, _ := yaml.Marshal(w)
		t.Errorf("the translation differs from the Prometheus Operator's:\ngot:\n%s\nwant:\n%s", got, bytes.TrimSpace(wantNorm))
	}
}
