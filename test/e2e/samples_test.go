//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	// sampleReplicas is the number of pods of the sample BloomCluster "example".
	sampleReplicas = 3
	// samplePod is the first pod of the sample BloomCluster, and the only one of a one-pod cluster.
	samplePod = "example-0"
)

// onePodPatch makes the samples' BloomCluster a cluster of one pod.
const onePodPatch = `- op: replace
  path: /spec/replicas
  value: 1`

// applySamples applies config/samples, a BloomCluster "example" and a BloomFilter "users", as the
// README says, and waits until both are Ready.
func (n namespace) applySamples() {
	n.t.Helper()
	n.run("apply", "-k", filepath.Join(h.root, "config", "samples"))
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
}

// applyOnePodSamples applies config/samples with one pod instead of three, through a kustomize
// overlay as a user would adapt the samples, and waits until both are Ready. The tests of what one
// pod's volume keeps use it: with peers, a pod that lost values would get them back from the
// others, and such a test would show nothing.
func (n namespace) applyOnePodSamples() {
	n.t.Helper()
	n.applySamplesPatched(onePodPatch)
	if got := n.jsonpath("statefulset/example", "{.spec.replicas}"); got != "1" {
		n.t.Fatalf("the one-pod overlay of the samples made a StatefulSet of %s replicas", got)
	}
}

// applySamplesPatched applies config/samples with a JSON patch of the BloomCluster, through a
// kustomize overlay as a user would adapt the samples, and waits until both are Ready.
func (n namespace) applySamplesPatched(patch string) {
	n.t.Helper()
	n.run("apply", "-k", n.samplesOverlay(patch))
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
}

// samplesOverlay writes a kustomize overlay of config/samples that applies a JSON patch to the
// BloomCluster, and returns its directory.
func (n namespace) samplesOverlay(patch string) string {
	n.t.Helper()
	overlay := n.t.TempDir()
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(h.root, "config", "samples"))
	if err != nil {
		n.t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - target:
      kind: BloomCluster
      name: example
    patch: |-
%s
`, base, indent(patch, "      "))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return overlay
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// TestSamplesBecomeReady applies the samples and checks what `kubectl get` and `kubectl explain`
// show: three pods ready, the membership epoch the operator gave them, the filter on each. Then,
// on the same cluster, it checks that the pods answer as one (harness_replication_test.go).
func TestSamplesBecomeReady(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)

	tables := parseTables(n.run("get", "bloomclusters,bloomfilters"))
	if len(tables) != 2 {
		t.Fatalf("kubectl get bloomclusters,bloomfilters printed %d tables, want 2: %v", len(tables), tables)
	}
	requireRow(t, tables[0], []string{"NAME", "REPLICAS", "READY", "FILTERS", "STATUS", "AGE"}, true, map[string]string{
		"NAME": "bloomcluster.bloomery.io/example", "REPLICAS": "3", "READY": "3", "FILTERS": "1", "STATUS": "AllReplicasReady",
	})
	// A million values at 0.001 take one partition of a few MiB.
	requireRow(t, tables[1], []string{"NAME", "CLUSTER", "CAPACITY", "FPR", "PARTITIONS", "READY", "ITEMS", "AGE"}, true, map[string]string{
		"NAME": "bloomfilter.bloomery.io/users", "CLUSTER": "example", "CAPACITY": "1000000", "FPR": "0.001", "PARTITIONS": "1",
		"READY": "True",
	})

	// -o wide adds diagnostic columns (more may come: only these are checked).
	endpoint := "http://example." + n.name + ".svc:8080"
	wide := parseTables(n.run("get", "bloomclusters,bloomfilters", "-o", "wide"))
	requireRow(t, wide[0], []string{"NAME", "ENDPOINT", "EPOCH", "AGE"}, false, map[string]string{"ENDPOINT": endpoint})
	requireRow(t, wide[1], []string{"NAME", "ITEMS", "FILL", "URL", "AGE"}, false, map[string]string{
		"FILL": "0", "URL": endpoint + "/v1/bloomfilter/users",
	})
	// The operator told every pod its peers, under the epoch the EPOCH column shows.
	epoch := n.waitMembership(pods)
	t.Logf("membership epoch %d on %v", epoch, pods)

	// The status says, per pod, what the operator found there.
	if got := n.jsonpath("bloomfilter/users", "{.status.pods[*].pod}={.status.pods[*].present}"); got != strings.Join(pods, " ")+"=true true true" {
		t.Errorf("status.pods of the BloomFilter: %q, want %v present", got, pods)
	}

	explain := strings.Join(strings.Fields(n.run("explain", "bloomfilter.spec")), " ")
	for _, doc := range []string{
		"capacity is the number of values the filter holds at falsePositiveRate",
		"falsePositiveRate is the probability that a value never added is reported present",
		"deletionPolicy says what happens to the filter on the pods when the BloomFilter is deleted",
		"expiry makes the filter expire",
	} {
		if !strings.Contains(explain, doc) {
			t.Errorf("kubectl explain bloomfilter.spec does not say %q:\n%s", doc, explain)
		}
	}

	// The scenarios below share this cluster: each uses values or a filter of its own.
	t.Run("every pod answers for every value", func(t *testing.T) {
		valuesReachEveryPod(t, namespace{t: t, name: n.name}, pods)
	})
	t.Run("concurrent check-and-set through every pod", func(t *testing.T) {
		concurrentCheckAndSet(t, namespace{t: t, name: n.name}, pods)
	})
}

// table is one table of kubectl's output: its header and its rows, each field by column name.
type table struct {
	header []string
	rows   []map[string]string
}

// parseTables splits kubectl get's output into its tables (one per kind, separated by blank
// lines). A column's values are aligned under its header, and may be empty.
func parseTables(out string) []table {
	var tables []table
	for block := range strings.SplitSeq(strings.Trim(out, "\n"), "\n\n") {
		lines := strings.Split(strings.Trim(block, "\n"), "\n")
		var starts []int
		for i, r := range lines[0] {
			if r != ' ' && (i == 0 || lines[0][i-1] == ' ') {
				starts = append(starts, i)
			}
		}
		t := table{header: strings.Fields(lines[0])}
		for _, line := range lines[1:] {
			row := map[string]string{}
			for i, name := range t.header {
				end := len(line)
				if i+1 < len(starts) {
					end = min(starts[i+1], len(line))
				}
				if starts[i] < end {
					row[name] = strings.TrimSpace(line[starts[i]:end])
				}
			}
			t.rows = append(t.rows, row)
		}
		tables = append(tables, t)
	}
	return tables
}

// requireRow checks a one-row table's columns and the values of want. With exact, the header
// must be header; otherwise it must contain header's columns in that order.
func requireRow(t *testing.T, tb table, header []string, exact bool, want map[string]string) {
	t.Helper()
	if exact && !slices.Equal(tb.header, header) || !exact && !isSubsequence(header, tb.header) {
		t.Errorf("columns %v, want %v", tb.header, header)
	}
	if len(tb.rows) != 1 {
		t.Fatalf("%d rows under %v, want 1", len(tb.rows), tb.header)
	}
	for col, v := range want {
		if got := tb.rows[0][col]; got != v {
			t.Errorf("column %s is %q, want %q (row %v)", col, got, v, tb.rows[0])
		}
	}
}

// isSubsequence reports whether every element of sub appears in s, in order.
func isSubsequence(sub, s []string) bool {
	i := 0
	for _, v := range s {
		if i < len(sub) && sub[i] == v {
			i++
		}
	}
	return i == len(sub)
}
