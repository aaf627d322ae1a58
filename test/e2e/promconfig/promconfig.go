//go:build e2e

// Package promconfig translates a ServiceMonitor into the scrape configuration the Prometheus
// Operator generates from it (its pkg/prometheus/promcfg.go, generateServiceMonitorConfig), so
// that the end-to-end suite runs a real Prometheus on the configuration a cluster's Prometheus
// would run, without the Prometheus Operator. docs/observability.md lists what maps to what.
//
// It translates the fields a ServiceMonitor of Bloomery can hold and refuses any other: a field
// it would ignore could change what the Prometheus Operator generates, and the test would then
// prove something else than what runs in a cluster.
package promconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Version is the Prometheus that `make prometheus-tools` builds (the Makefile's
// PROMETHEUS_VERSION), and whose directory ToolsDir names by default.
const Version = "v0.316.0"

// ToolsDir is the directory of the cached prometheus and promtool: PROMETHEUS_TOOLS_DIR, which
// the Makefile sets, or the Makefile's default, $BLOOMERY_CACHE (or ~/.cache/bloomery)
// /prometheus/<Version>.
func ToolsDir() string {
	if dir := os.Getenv("PROMETHEUS_TOOLS_DIR"); dir != "" {
		return dir
	}
	cache := os.Getenv("BLOOMERY_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "bloomery")
	}
	return filepath.Join(cache, "prometheus", Version)
}

// Tool returns the path of a cached binary of ToolsDir ("prometheus", "promtool"), or an error
// that says how to build it.
func Tool(name string) (string, error) {
	path := filepath.Join(ToolsDir(), name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no %s at %s (PROMETHEUS_TOOLS_DIR): run `make prometheus-tools` (`make test` and `make test-e2e` do)", name, path)
	}
	return path, nil
}

// Role is the kind of objects Kubernetes service discovery lists, as the Prometheus resource's
// spec.serviceDiscoveryRole chooses it.
type Role string

const (
	// Endpoints is the Prometheus Operator's default.
	Endpoints Role = "endpoints"
	// EndpointSlice is what a Prometheus with serviceDiscoveryRole: EndpointSlice discovers; the
	// end-to-end control plane runs the EndpointSlice controller, not the Endpoints one.
	EndpointSlice Role = "endpointslice"
)

// Options are what the Prometheus resource, not the ServiceMonitor, decides.
type Options struct {
	Role Role
	// KubeconfigFile is how Prometheus reaches the API server; empty means in cluster, as the
	// Prometheus Operator's pods do.
	KubeconfigFile string
}

// ScrapeConfig is one scrape_configs entry of prometheus.yml, with the fields the translation sets.
type ScrapeConfig struct {
	JobName              string               `json:"job_name"`
	HonorLabels          bool                 `json:"honor_labels"`
	KubernetesSDConfigs  []KubernetesSDConfig `json:"kubernetes_sd_configs"`
	ScrapeInterval       string               `json:"scrape_interval,omitempty"`
	ScrapeTimeout        string               `json:"scrape_timeout,omitempty"`
	MetricsPath          string               `json:"metrics_path,omitempty"`
	Scheme               string               `json:"scheme,omitempty"`
	RelabelConfigs       []RelabelConfig      `json:"relabel_configs"`
	MetricRelabelConfigs []RelabelConfig      `json:"metric_relabel_configs,omitempty"`
}

// KubernetesSDConfig is a kubernetes_sd_configs entry.
type KubernetesSDConfig struct {
	Role           Role        `json:"role"`
	KubeconfigFile string      `json:"kubeconfig_file,omitempty"`
	Namespaces     *Namespaces `json:"namespaces,omitempty"`
}

// Namespaces limits discovery to some namespaces.
type Namespaces struct {
	Names []string `json:"names"`
}

// RelabelConfig is a relabel_configs (or metric_relabel_configs) entry; the ServiceMonitor's own
// relabelings have the same fields in camel case.
type RelabelConfig struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// The subset of monitoring.coreos.com/v1 ServiceMonitor that the translation knows. Decoding
// refuses any other field.
type serviceMonitorSpec struct {
	Selector          labelSelector     `json:"selector"`
	NamespaceSelector namespaceSelector `json:"namespaceSelector"`
	Endpoints         []endpoint        `json:"endpoints"`
	JobLabel          string            `json:"jobLabel"`
	TargetLabels      []string          `json:"targetLabels"`
	PodTargetLabels   []string          `json:"podTargetLabels"`
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

type namespaceSelector struct {
	Any        bool     `json:"any"`
	MatchNames []string `json:"matchNames"`
}

type endpoint struct {
	Port              string          `json:"port"`
	Path              string          `json:"path"`
	Scheme            string          `json:"scheme"`
	Interval          string          `json:"interval"`
	ScrapeTimeout     string          `json:"scrapeTimeout"`
	HonorLabels       bool            `json:"honorLabels"`
	FilterRunning     *bool           `json:"filterRunning"`
	Relabelings       []relabelConfig `json:"relabelings"`
	MetricRelabelings []relabelConfig `json:"metricRelabelings"`
}

type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels"`
	Separator    *string  `json:"separator"`
	TargetLabel  string   `json:"targetLabel"`
	Regex        string   `json:"regex"`
	Modulus      uint64   `json:"modulus"`
	Replacement  *string  `json:"replacement"`
	Action       string   `json:"action"`
}

// ScrapeConfigs translates a ServiceMonitor into one scrape configuration per endpoint, as the
// Prometheus Operator does for a Prometheus of one shard, no scrape class, and none of its
// overrides (honorLabels, namespace enforcement, limits).
func ScrapeConfigs(sm *unstructured.Unstructured, opts Options) ([]ScrapeConfig, error) {
	if gvk := sm.GroupVersionKind(); gvk.Group != "monitoring.coreos.com" || gvk.Version != "v1" || gvk.Kind != "ServiceMonitor" {
		return nil, fmt.Errorf("%s is not a monitoring.coreos.com/v1 ServiceMonitor", gvk)
	}
	if opts.Role != Endpoints && opts.Role != EndpointSlice {
		return nil, fmt.Errorf("unknown service discovery role %q", opts.Role)
	}
	data, err := json.Marshal(sm.Object["spec"])
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var spec serviceMonitorSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("ServiceMonitor %s/%s: the translation does not handle its spec: %w", sm.GetNamespace(), sm.GetName(), err)
	}
	if len(spec.Endpoints) == 0 {
		return nil, fmt.Errorf("ServiceMonitor %s/%s has no endpoints", sm.GetNamespace(), sm.GetName())
	}
	configs := make([]ScrapeConfig, len(spec.Endpoints))
	for i, ep := range spec.Endpoints {
		if ep.Port == "" {
			// targetPort is deprecated, and Bloomery names its port.
			return nil, fmt.Errorf("ServiceMonitor %s/%s: endpoint %d has no port name", sm.GetNamespace(), sm.GetName(), i)
		}
		c, err := endpointConfig(sm.GetNamespace(), sm.GetName(), i, spec, ep, opts)
		if err != nil {
			return nil, err
		}
		configs[i] = c
	}
	return configs, nil
}

func endpointConfig(namespace, name string, i int, spec serviceMonitorSpec, ep endpoint, opts Options) (ScrapeConfig, error) {
	sd := KubernetesSDConfig{Role: opts.Role, KubeconfigFile: opts.KubeconfigFile}
	switch {
	case spec.NamespaceSelector.Any:
	case len(spec.NamespaceSelector.MatchNames) > 0:
		sd.Namespaces = &Namespaces{Names: spec.NamespaceSelector.MatchNames}
	default:
		sd.Namespaces = &Namespaces{Names: []string{namespace}}
	}
	// The discovered labels of an endpoint depend on the role.
	endpointMeta := "__meta_kubernetes_endpoint_"
	if opts.Role == EndpointSlice {
		endpointMeta = "__meta_kubernetes_endpointslice_"
	}

	// The job label first goes into a temporary label, which relabelings may read.
	relabel := []RelabelConfig{{SourceLabels: []string{"job"}, TargetLabel: "__tmp_prometheus_job_name"}}
	relabel = append(relabel, selectorRelabelings(spec.Selector)...)
	relabel = append(relabel,
		// Only the endpoint's port.
		RelabelConfig{Action: "keep", SourceLabels: []string{endpointMeta + "port_name"}, Regex: ep.Port},
		// The pod behind the address, or a node for a Service of nodes.
		RelabelConfig{SourceLabels: []string{endpointMeta + "address_target_kind", endpointMeta + "address_target_name"},
			Separator: new(";"), Regex: "Node;(.*)", Replacement: new("${1}"), TargetLabel: "node"},
		RelabelConfig{SourceLabels: []string{endpointMeta + "address_target_kind", endpointMeta + "address_target_name"},
			Separator: new(";"), Regex: "Pod;(.*)", Replacement: new("${1}"), TargetLabel: "pod"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_service_name"}, TargetLabel: "service"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_container_name"}, TargetLabel: "container"},
	)
	if ep.FilterRunning == nil || *ep.FilterRunning {
		// Pods that ended are not scraped.
		relabel = append(relabel, RelabelConfig{Action: "drop", SourceLabels: []string{"__meta_kubernetes_pod_phase"}, Regex: "(Failed|Succeeded)"})
	}
	for _, l := range spec.TargetLabels {
		relabel = append(relabel, RelabelConfig{SourceLabels: []string{"__meta_kubernetes_service_label_" + sanitize(l)},
			TargetLabel: sanitize(l), Regex: "(.+)", Replacement: new("${1}")})
	}
	for _, l := range spec.PodTargetLabels {
		relabel = append(relabel, RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_label_" + sanitize(l)},
			TargetLabel: sanitize(l), Regex: "(.+)", Replacement: new("${1}")})
	}
	// The job is the Service's name, unless jobLabel names a label of the Service that it has.
	relabel = append(relabel, RelabelConfig{SourceLabels: []string{"__meta_kubernetes_service_name"}, TargetLabel: "job", Replacement: new("${1}")})
	if spec.JobLabel != "" {
		relabel = append(relabel, RelabelConfig{SourceLabels: []string{"__meta_kubernetes_service_label_" + sanitize(spec.JobLabel)},
			TargetLabel: "job", Regex: "(.+)", Replacement: new("${1}")})
	}
	relabel = append(relabel, RelabelConfig{TargetLabel: "endpoint", Replacement: new(ep.Port)})
	own, err := relabelings(ep.Relabelings)
	if err != nil {
		return ScrapeConfig{}, fmt.Errorf("ServiceMonitor %s/%s endpoint %d relabelings: %w", namespace, name, i, err)
	}
	relabel = append(relabel, own...)
	// Sharding: with one shard, the $(SHARD) the config reloader substitutes is 0, which every
	// address's hash modulo 1 is.
	relabel = append(relabel,
		RelabelConfig{SourceLabels: []string{"__address__"}, TargetLabel: "__tmp_hash", Modulus: 1, Action: "hashmod"},
		RelabelConfig{SourceLabels: []string{"__tmp_hash"}, Regex: "0", Action: "keep"},
	)
	metricRelabel, err := relabelings(ep.MetricRelabelings)
	if err != nil {
		return ScrapeConfig{}, fmt.Errorf("ServiceMonitor %s/%s endpoint %d metricRelabelings: %w", namespace, name, i, err)
	}
	return ScrapeConfig{
		JobName:              fmt.Sprintf("serviceMonitor/%s/%s/%d", namespace, name, i),
		HonorLabels:          ep.HonorLabels,
		KubernetesSDConfigs:  []KubernetesSDConfig{sd},
		ScrapeInterval:       ep.Interval,
		ScrapeTimeout:        ep.ScrapeTimeout,
		MetricsPath:          ep.Path,
		Scheme:               ep.Scheme,
		RelabelConfigs:       relabel,
		MetricRelabelConfigs: metricRelabel,
	}, nil
}

// selectorRelabelings keep the targets of the Services the selector selects: matchLabels in the
// order of their keys, then matchExpressions.
func selectorRelabelings(sel labelSelector) []RelabelConfig {
	label := func(k string) string { return "__meta_kubernetes_service_label_" + sanitize(k) }
	present := func(k string) string { return "__meta_kubernetes_service_labelpresent_" + sanitize(k) }
	var out []RelabelConfig
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, RelabelConfig{Action: "keep", SourceLabels: []string{label(k), present(k)}, Regex: "(" + sel.MatchLabels[k] + ");true"})
	}
	for _, e := range sel.MatchExpressions {
		switch e.Operator {
		case "In":
			out = append(out, RelabelConfig{Action: "keep", SourceLabels: []string{label(e.Key), present(e.Key)}, Regex: "(" + strings.Join(e.Values, "|") + ");true"})
		case "NotIn":
			out = append(out, RelabelConfig{Action: "drop", SourceLabels: []string{label(e.Key), present(e.Key)}, Regex: "(" + strings.Join(e.Values, "|") + ");true"})
		case "Exists":
			out = append(out, RelabelConfig{Action: "keep", SourceLabels: []string{present(e.Key)}, Regex: "true"})
		case "DoesNotExist":
			out = append(out, RelabelConfig{Action: "drop", SourceLabels: []string{present(e.Key)}, Regex: "true"})
		}
	}
	return out
}

// relabelings copies a ServiceMonitor's relabelings, actions in lower case as the Prometheus
// Operator writes them.
func relabelings(in []relabelConfig) ([]RelabelConfig, error) {
	var out []RelabelConfig
	for _, r := range in {
		if r.Action == "" && r.TargetLabel == "" && len(r.SourceLabels) == 0 {
			return nil, errors.New("an empty relabeling")
		}
		out = append(out, RelabelConfig{
			SourceLabels: r.SourceLabels, Separator: r.Separator, TargetLabel: r.TargetLabel, Regex: r.Regex,
			Modulus: r.Modulus, Replacement: r.Replacement, Action: strings.ToLower(r.Action),
		})
	}
	return out, nil
}

var invalidLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// sanitize makes a Kubernetes label's name a Prometheus label name, as service discovery does.
func sanitize(name string) string { return invalidLabelChar.ReplaceAllString(name, "_") }

// Config is a prometheus.yml: rule files and scrape configurations, as the Prometheus Operator's
// generated one has them, with the global intervals a test chooses.
type Config struct {
	Global        Global         `json:"global"`
	RuleFiles     []string       `json:"rule_files,omitempty"`
	ScrapeConfigs []ScrapeConfig `json:"scrape_configs"`
}

// Global holds the defaults of every job and rule group.
type Global struct {
	ScrapeInterval     string `json:"scrape_interval,omitempty"`
	EvaluationInterval string `json:"evaluation_interval,omitempty"`
}

// Marshal writes the configuration as YAML.
func (c Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }
