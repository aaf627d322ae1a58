//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/e2e/promconfig"
)

const (
	// overCapacityAlert is the alert the test makes fire: a fixed filter holding more keys than
	// its capacity is a state of the data plane a user can reach through the API alone.
	overCapacityAlert = "BloomeryFilterOverCapacity"
	// shortenedGroup holds a copy of overCapacityAlert whose for is shortenedFor: the real rule
	// waits 15 minutes, which no test should. The real rule is loaded as it is too, and must go
	// pending on the same series.
	shortenedGroup = "e2e-shortened-for"
	shortenedFor   = "2s"
	// tinyFilter is a fixed filter of tinyCapacity keys, which the test fills past it.
	tinyFilter   = "tiny"
	tinyCapacity = 10
)

// A real Prometheus scrapes the sample cluster through the scrape configuration the Prometheus
// Operator would generate from its ServiceMonitor, discovering the pods through the headless
// Service's EndpointSlices as a ServiceAccount allowed only that, and evaluates
// config/prometheus/alerts.yaml.
func TestPrometheus(t *testing.T) {
	t.Parallel()
	if !h.net.servicesReachable() {
		t.Skip("Prometheus discovers the pods through their Service's EndpointSlices, which the suite has only as root: " + h.net.noServices)
	}
	n := newNamespace(t)
	n.applySamplesPatched(`- op: add
  path: /spec/monitoring
  value: {serviceMonitor: {enabled: true, interval: 2s}}`)
	pods := podNames(sampleReplicas)
	n.waitMembership(pods)

	// A fixed filter past its capacity, on every pod (writes are copied to each).
	n.apply(fmt.Sprintf(`apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: %s
spec:
  clusterRef: {name: example}
  capacity: %d
  falsePositiveRate: "0.01"
  scalable: false
`, tinyFilter, tinyCapacity))
	n.wait("condition=Ready", "bloomfilter/"+tinyFilter)
	n.api(samplePod).multiCheckAndSet(tinyFilter, newValues("past-capacity", 4*tinyCapacity))

	var serviceMonitor unstructured.Unstructured
	if err := json.Unmarshal([]byte(n.run("get", "servicemonitor/example", "-o", "json")), &serviceMonitor.Object); err != nil {
		t.Fatal(err)
	}
	scrapeConfigs, err := promconfig.ScrapeConfigs(&serviceMonitor, promconfig.Options{
		// The control plane runs the EndpointSlice controller, not the Endpoints one.
		Role:           promconfig.EndpointSlice,
		KubeconfigFile: n.prometheusKubeconfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	groups := n.alertRuleGroups()
	prom := n.startPrometheus(scrapeConfigs, append(groups, shortenedCopy(t, groups, overCapacityAlert, shortenedFor)))

	// The labels the Prometheus Operator's relabelings give each pod's target, and so each series.
	job := scrapeConfigs[0].JobName
	wantLabels := map[string]model.LabelSet{}
	for _, pod := range pods {
		wantLabels[pod] = model.LabelSet{
			"namespace": model.LabelValue(n.name),
			"service":   "example-headless",
			"job":       "example-headless", // the Service's name: the ServiceMonitor has no jobLabel
			"endpoint":  "ops",
			"pod":       model.LabelValue(pod),
			"container": "dataplane",
			"instance":  model.LabelValue(net.JoinHostPort(n.jsonpath("pod/"+pod, "{.status.podIP}"), "9090")),
		}
	}

	t.Run("every pod is a target and up", func(t *testing.T) {
		await.Until(t, waitTimeout, "every pod to be scraped", func() (bool, string) {
			ctx, cancel := apiContext()
			defer cancel()
			targets, err := prom.api.Targets(ctx)
			if err != nil {
				return false, err.Error()
			}
			got := map[string]promv1.ActiveTarget{}
			for _, target := range targets.Active {
				if target.ScrapePool == job {
					got[string(target.Labels["pod"])] = target
				}
			}
			if len(got) != len(pods) {
				return false, fmt.Sprintf("%d targets of %s, want one per pod %v; /api/v1/targets: active %s\ndropped: %s",
					len(got), job, pods, describe(targets.Active), droppedTargets(targets.Dropped))
			}
			for _, pod := range pods {
				target, ok := got[pod]
				if !ok || target.Health != promv1.HealthGood {
					return false, fmt.Sprintf("pod %s is not a healthy target; /api/v1/targets: active %s", pod, describe(targets.Active))
				}
				if !maps.Equal(target.Labels, wantLabels[pod]) {
					t.Fatalf("target of pod %s has labels %v, want %v", pod, target.Labels, wantLabels[pod])
				}
			}
			return true, ""
		})
	})

	t.Run("each pod's series arrive with the target's labels", func(t *testing.T) {
		for _, c := range []struct {
			metric string
			value  func(float64) bool
			want   string
		}{
			{"bloomery_ready", func(v float64) bool { return v == 1 }, "1: every pod is ready"},
			{"bloomery_filters", func(v float64) bool { return v == 2 }, "2: users and " + tinyFilter},
			{"bloomery_replication_membership_epoch", func(v float64) bool { return v >= 1 }, "at least 1: the operator told the pods their peers"},
		} {
			query := fmt.Sprintf(`%s{namespace=%q}`, c.metric, n.name)
			await.Until(t, waitTimeout, "the series "+query, func() (bool, string) {
				vector, detail := prom.instantVector(query)
				if len(vector) != len(pods) {
					return false, fmt.Sprintf("%d series, want one per pod %v: %s", len(vector), pods, detail)
				}
				for _, sample := range vector {
					pod := string(sample.Metric["pod"])
					want := maps.Clone(wantLabels[pod])
					want[model.MetricNameLabel] = model.LabelValue(c.metric)
					if !maps.Equal(model.LabelSet(sample.Metric), want) {
						t.Fatalf("%s has labels %v, want %v", query, sample.Metric, want)
					}
					if !c.value(float64(sample.Value)) {
						return false, fmt.Sprintf("%s of pod %s is %v, want %s", c.metric, pod, sample.Value, c.want)
					}
				}
				return true, ""
			})
		}
	})

	t.Run("every alert rule evaluates", func(t *testing.T) {
		await.Until(t, waitTimeout, "every rule of config/prometheus/alerts.yaml to be evaluated", func() (bool, string) {
			rules, detail := prom.alertingRules()
			for _, group := range groups {
				for _, want := range group.Rules {
					got, ok := rules[group.Name][want.Alert]
					if !ok {
						return false, fmt.Sprintf("rule %s of group %s is not loaded; /api/v1/rules:\n%s", want.Alert, group.Name, detail)
					}
					switch got.Health {
					case promv1.RuleHealthGood:
					case promv1.RuleHealthBad:
						t.Fatalf("rule %s of group %s fails to evaluate: %s", want.Alert, group.Name, got.LastError)
					default:
						return false, fmt.Sprintf("rule %s of group %s is %q", want.Alert, group.Name, got.Health)
					}
				}
				if len(rules[group.Name]) != len(group.Rules) {
					t.Fatalf("group %s has %d rules in Prometheus, %d in config/prometheus/alerts.yaml; /api/v1/rules:\n%s",
						group.Name, len(rules[group.Name]), len(group.Rules), detail)
				}
			}
			return true, ""
		})
	})

	t.Run("a filter past its capacity fires "+overCapacityAlert, func(t *testing.T) {
		realGroup := groupOf(t, groups, overCapacityAlert)
		await.Until(t, waitTimeout, overCapacityAlert+" to fire on every pod", func() (bool, string) {
			rules, detail := prom.alertingRules()
			shortened, original := rules[shortenedGroup][overCapacityAlert], rules[realGroup.Name][overCapacityAlert]
			if !onEveryPod(shortened.Alerts, pods, promv1.AlertStateFiring) {
				_, filters := prom.instantVector(fmt.Sprintf(`{__name__=~"bloomery_filter_(items|capacity|scalable)",namespace=%q,filter=%q}`, n.name, tinyFilter))
				return false, fmt.Sprintf("the copy with a short for: %s; the filter: %s", describe(shortened.Alerts), filters)
			}
			// The real rule sees the same series, and waits its 15 minutes.
			if !onEveryPod(original.Alerts, pods, promv1.AlertStatePending) {
				return false, "the real rule, want pending: " + describe(original.Alerts)
			}
			for _, alert := range shortened.Alerts {
				pod := string(alert.Labels["pod"])
				want := maps.Clone(wantLabels[pod])
				maps.Copy(want, model.LabelSet{"alertname": overCapacityAlert, "severity": "warning", "filter": tinyFilter})
				if !maps.Equal(alert.Labels, want) {
					t.Fatalf("the alert on pod %s has labels %v, want %v (only the filter %s is past its capacity)", pod, alert.Labels, want, tinyFilter)
				}
				// The description renders the value of the expression, the pod's key count.
				items, itemsDetail := prom.instantVector(fmt.Sprintf(`bloomery_filter_items{namespace=%q,pod=%q,filter=%q}`, n.name, pod, tinyFilter))
				if len(items) != 1 {
					return false, "bloomery_filter_items of " + pod + ": " + itemsDetail
				}
				if items[0].Value <= tinyCapacity {
					t.Fatalf("the alert fires on pod %s, whose filter %s holds %v keys, not past its %d: %s", pod, tinyFilter, items[0].Value, tinyCapacity, detail)
				}
				wantAnnotations := model.LabelSet{
					"summary": "A fixed filter holds more keys than it was created for.",
					"description": model.LabelValue(fmt.Sprintf("Fixed filter %s on %s/%s holds %v keys, more than its capacity: its false positive rate rises with every key.",
						tinyFilter, n.name, pod, float64(items[0].Value))),
					"runbook_url": "https://github.com/bloomery/bloomery/blob/main/docs/runbook.md#bloomeryfilterovercapacity",
				}
				if !maps.Equal(alert.Annotations, wantAnnotations) {
					// The count may still be growing on a pod that receives the last copies.
					return false, fmt.Sprintf("annotations of the alert on pod %s: %v, want %v", pod, alert.Annotations, wantAnnotations)
				}
			}
			return true, ""
		})
	})
}

// shortenedCopy is a rule group holding a copy of the alert of groups named alert, with for
// shortened to forDuration: the same expression, labels and annotations.
func shortenedCopy(t *testing.T, groups []ruleGroup, alert, forDuration string) ruleGroup {
	t.Helper()
	for _, r := range groupOf(t, groups, alert).Rules {
		if r.Alert == alert {
			r.For = forDuration
			return ruleGroup{Name: shortenedGroup, Rules: []rule{r}}
		}
	}
	panic("unreachable: groupOf found the alert")
}

// groupOf returns the group that holds the alert.
func groupOf(t *testing.T, groups []ruleGroup, alert string) ruleGroup {
	t.Helper()
	for _, g := range groups {
		if slices.ContainsFunc(g.Rules, func(r rule) bool { return r.Alert == alert }) {
			return g
		}
	}
	t.Fatalf("config/prometheus/alerts.yaml has no alert %s", alert)
	return ruleGroup{}
}

// droppedTargets sums up the targets the relabelings dropped: their address, Service, port and pod.
func droppedTargets(dropped []promv1.DroppedTarget) string {
	var out []string
	for _, d := range dropped {
		l := d.DiscoveredLabels
		out = append(out, fmt.Sprintf("%s (service %s, port %s, %s %s)", l["__address__"], l["__meta_kubernetes_service_name"],
			l["__meta_kubernetes_endpointslice_port_name"]+l["__meta_kubernetes_endpoint_port_name"],
			l["__meta_kubernetes_endpointslice_address_target_kind"], l["__meta_kubernetes_endpointslice_address_target_name"]))
	}
	return fmt.Sprintf("%d: %s", len(out), strings.Join(out, "; "))
}

// onEveryPod reports whether alerts are one per pod, each in state.
func onEveryPod(alerts []*promv1.Alert, pods []string, state promv1.AlertState) bool {
	var got []string
	for _, a := range alerts {
		if a.State != state {
			return false
		}
		got = append(got, string(a.Labels["pod"]))
	}
	slices.Sort(got)
	return slices.Equal(got, pods)
}

// instantVector runs an instant query, and returns its samples and Prometheus's answer (or error)
// for a message.
func (p *runningPrometheus) instantVector(query string) (model.Vector, string) {
	ctx, cancel := apiContext()
	defer cancel()
	value, warnings, _, err := p.api.Query(ctx, query, time.Now())
	if err != nil {
		return nil, fmt.Sprintf("query %s: %v", query, err)
	}
	vector, ok := value.(model.Vector)
	if !ok {
		return nil, fmt.Sprintf("query %s answered a %s: %v", query, value.Type(), value)
	}
	detail := fmt.Sprintf("query %s answered %v", query, vector)
	if len(warnings) > 0 {
		detail += fmt.Sprintf(" (warnings: %v)", warnings)
	}
	return vector, detail
}

// alertingRules returns the alerting rules Prometheus holds, by group and name, and its answer
// for a message.
func (p *runningPrometheus) alertingRules() (map[string]map[string]promv1.AlertingRule, string) {
	ctx, cancel := apiContext()
	defer cancel()
	result, err := p.api.Rules(ctx, nil)
	if err != nil {
		return nil, "/api/v1/rules: " + err.Error()
	}
	rules := map[string]map[string]promv1.AlertingRule{}
	for _, g := range result.Groups {
		rules[g.Name] = map[string]promv1.AlertingRule{}
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok {
				rules[g.Name][a.Name] = a
			}
		}
	}
	return rules, strings.TrimSpace(describe(result))
}
