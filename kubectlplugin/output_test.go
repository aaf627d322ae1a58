package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/wire"
)

func TestPrintStatus(t *testing.T) {
	s := &ClusterStatus{
		Name: "example", Namespace: "team", Phase: "ReplicasNotReady", Replicas: 3, ReadyReplicas: 2, MembershipEpoch: 7,
		Endpoint: "http://example.team.svc:8080",
		Conditions: []Condition{
			{Type: "Ready", Status: "False", Reason: "ReplicasNotReady", Message: "2 of 3 pods ready"},
			{Type: "Degraded", Status: "False", Reason: "UpToDate"},
		},
		Pods: []PodStatus{
			{Name: "example-0", Ready: true, Filters: new(int64(2)), Bytes: new(int64(3 << 20))},
			{Name: "example-1", Ready: true, Restarts: 1, Filters: new(int64(2)), Bytes: new(int64(1536))},
			{Name: "example-2", Error: "the pod has no address yet"},
		},
		Filters: []FilterLine{
			{Name: "users", Ready: "True", Capacity: 1000000, FalsePositiveRate: "0.001", Items: 12, SizeBytes: 1797 << 10},
			{Name: "new", Ready: "False", Capacity: 10, FalsePositiveRate: "0.01", Message: "missing on example-2"},
		},
	}
	var out bytes.Buffer
	if err := printStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	want := `Cluster:           example (namespace team)
Phase:             ReplicasNotReady
Replicas ready:    2/3
Membership epoch:  7
Endpoint:          http://example.team.svc:8080

Conditions:
TYPE       STATUS   REASON             MESSAGE
Ready      False    ReplicasNotReady   2 of 3 pods ready
Degraded   False    UpToDate           -

Pods:
NAME        READY   RESTARTS   FILTERS   BYTES
example-0   true    0          2         3.0Mi
example-1   true    1          2         1.5Ki
example-2   false   0          ?         ?
Metrics not read (FILTERS and BYTES show ?):
  example-2: the pod has no address yet

Filters:
NAME    READY   CAPACITY   FPR     ITEMS   SIZE    MESSAGE
users   True    1000000    0.001   12      1.8Mi   -
new     False   10         0.01    0       0       missing on example-2
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}

	s.Filters = nil
	out.Reset()
	if err := printStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "Filters:\n  none\n") {
		t.Errorf("without filters:\n%s", out.String())
	}
}

func TestPrintClusters(t *testing.T) {
	var out bytes.Buffer
	if err := printClusters(&out, nil); err != nil || out.String() != "No BloomClusters found.\n" {
		t.Errorf("no clusters: %q, %v", out.String(), err)
	}
	out.Reset()
	err := printClusters(&out, []ClusterSummary{
		{Name: "example", Phase: "AllReplicasReady", Replicas: 3, ReadyReplicas: 3, Filters: 1, MembershipEpoch: 4},
		{Name: "new", Replicas: 1},
	})
	want := "NAME      PHASE              READY   FILTERS   EPOCH\nexample   AllReplicasReady   3/3     1         4\nnew       -                  0/1     0         0\n"
	if err != nil || out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPrintData(t *testing.T) {
	results := []ValueResult{{Value: "alice", Present: true}, {Value: "bob"}}
	var out bytes.Buffer
	if err := printData(&out, outputJSON, results); err != nil {
		t.Fatal(err)
	}
	if want := "[\n  {\n    \"value\": \"alice\",\n    \"present\": true\n  },\n  {\n    \"value\": \"bob\",\n    \"present\": false\n  }\n]\n"; out.String() != want {
		t.Errorf("json:\n%s", out.String())
	}
	out.Reset()
	if err := printData(&out, outputYAML, results); err != nil {
		t.Fatal(err)
	}
	if want := "- present: true\n  value: alice\n- present: false\n  value: bob\n"; out.String() != want {
		t.Errorf("yaml:\n%s", out.String())
	}
}

func TestPrintFilterInfo(t *testing.T) {
	var out bytes.Buffer
	err := printFilterInfo(&out, "example", &wire.Filter{
		Name: "users", ExpectedInsertions: 1000, FPP: 0.01, Created: "2026-12-01T19:00:00.000Z", Scalable: true,
		Items: 3, Hashes: 7, Layers: 1, SizeBytes: 1232, FillRatio: 0.00219, EstimatedFPP: 2.5e-19,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Name:                users\n", "Cluster:             example\n", "Capacity:            1000\n",
		"False positive rate: 0.01\n", "Items:               3\n", "Size:                1.2Ki\n", "Estimated FPR:       2.5e-19\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("info does not show %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Expires") {
		t.Errorf("info shows an expiry for a filter without one:\n%s", out.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1.0Ki", 1536: "1.5Ki", 5 << 30: "5.0Gi", 1 << 50: "1.0Pi"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestParseGauges(t *testing.T) {
	text := `# HELP bloomery_filters Live filters.
# TYPE bloomery_filters gauge
bloomery_filters 2
bloomery_filters_bytes 1.2345e+06
bloomery_filters_bytes_limit 4.294967296e+08
bloomery_filter_items{filter="users"} 12
`
	got := parseGauges([]byte(text), "bloomery_filters", "bloomery_filters_bytes", "bloomery_filter_items")
	if len(got) != 2 || got["bloomery_filters"] != 2 || got["bloomery_filters_bytes"] != 1234500 {
		t.Errorf("got %v", got)
	}
}
