package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Output formats of -o.
const (
	outputTable = ""
	outputJSON  = "json"
	outputYAML  = "yaml"
)

func validOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use json or yaml, or leave -o out for a table", o)
}

// printData writes v as JSON or YAML.
func printData(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == outputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// table writes rows aligned in columns, as kubectl get does.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, strings.Join(header, "\t")) // errors surface at Flush
	for _, r := range rows {
		_, _ = fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// ClusterSummary is one line of `status` without a cluster.
type ClusterSummary struct {
	Name            string `json:"name"`
	Phase           string `json:"phase"`
	Replicas        int32  `json:"replicas"`
	ReadyReplicas   int32  `json:"readyReplicas"`
	Filters         int32  `json:"filters"`
	MembershipEpoch int64  `json:"membershipEpoch"`
}

func printClusters(w io.Writer, clusters []ClusterSummary) error {
	if len(clusters) == 0 {
		_, err := fmt.Fprintln(w, "No BloomClusters found.")
		return err
	}
	rows := make([][]string, len(clusters))
	for i, c := range clusters {
		rows[i] = []string{c.Name, dash(c.Phase), fmt.Sprintf("%d/%d", c.ReadyReplicas, c.Replicas), itoa(int64(c.Filters)), itoa(c.MembershipEpoch)}
	}
	return table(w, []string{"NAME", "PHASE", "READY", "FILTERS", "EPOCH"}, rows)
}

// ClusterStatus is what `status CLUSTER` shows.
type ClusterStatus struct {
	Name            string       `json:"name"`
	Namespace       string       `json:"namespace"`
	Phase           string       `json:"phase"`
	Endpoint        string       `json:"endpoint,omitempty"`
	Replicas        int32        `json:"replicas"`
	ReadyReplicas   int32        `json:"readyReplicas"`
	MembershipEpoch int64        `json:"membershipEpoch"`
	Conditions      []Condition  `json:"conditions"`
	Pods            []PodStatus  `json:"pods"`
	Filters         []FilterLine `json:"filters"`
}

// Condition is a condition of the cluster's status.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// PodStatus is one pod of the cluster; Filters and Bytes are nil when its metrics could not be
// read, and Error says why.
type PodStatus struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	Filters  *int64 `json:"filters,omitempty"`
	Bytes    *int64 `json:"bytes,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FilterLine is one BloomFilter of the cluster.
type FilterLine struct {
	Name              string `json:"name"`
	Ready             string `json:"ready"`
	Capacity          int64  `json:"capacity"`
	FalsePositiveRate string `json:"falsePositiveRate"`
	Items             int64  `json:"items"`
	SizeBytes         int64  `json:"sizeBytes"`
	Message           string `json:"message,omitempty"`
}

func printStatus(w io.Writer, s *ClusterStatus) error {
	ew := &errWriter{w: w}
	ew.printf("Cluster:           %s (namespace %s)\n", s.Name, s.Namespace)
	ew.printf("Phase:             %s\n", dash(s.Phase))
	ew.printf("Replicas ready:    %d/%d\n", s.ReadyReplicas, s.Replicas)
	ew.printf("Membership epoch:  %d\n", s.MembershipEpoch)
	if s.Endpoint != "" {
		ew.printf("Endpoint:          %s\n", s.Endpoint)
	}
	ew.printf("\nConditions:\n")
	rows := make([][]string, len(s.Conditions))
	for i, c := range s.Conditions {
		rows[i] = []string{c.Type, c.Status, dash(c.Reason), dash(c.Message)}
	}
	ew.table([]string{"TYPE", "STATUS", "REASON", "MESSAGE"}, rows)

	ew.printf("\nPods:\n")
	rows = make([][]string, len(s.Pods))
	var notes []string
	for i, p := range s.Pods {
		filters, bytes := "?", "?"
		if p.Filters != nil {
			filters = itoa(*p.Filters)
		}
		if p.Bytes != nil {
			bytes = humanBytes(*p.Bytes)
		}
		if p.Error != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", p.Name, p.Error))
		}
		rows[i] = []string{p.Name, strconv.FormatBool(p.Ready), itoa(int64(p.Restarts)), filters, bytes}
	}
	ew.table([]string{"NAME", "READY", "RESTARTS", "FILTERS", "BYTES"}, rows)
	if len(notes) > 0 {
		ew.printf("Metrics not read (FILTERS and BYTES show ?):\n%s\n", strings.Join(notes, "\n"))
	}

	ew.printf("\nFilters:\n")
	if len(s.Filters) == 0 {
		ew.printf("  none\n")
		return ew.err
	}
	rows = make([][]string, len(s.Filters))
	for i, f := range s.Filters {
		rows[i] = []string{f.Name, f.Ready, itoa(f.Capacity), f.FalsePositiveRate, itoa(f.Items), humanBytes(f.SizeBytes), dash(f.Message)}
	}
	ew.table([]string{"NAME", "READY", "CAPACITY", "FPR", "ITEMS", "SIZE", "MESSAGE"}, rows)
	return ew.err
}

// ValueResult is the answer for one value of check or add.
type ValueResult struct {
	Value string `json:"value"`
	// Present is check's answer; for add, whether the value was (probably) there before.
	Present bool `json:"present"`
}

func printValues(w io.Writer, results []ValueResult, column string) error {
	rows := make([][]string, len(results))
	for i, r := range results {
		rows[i] = []string{r.Value, strconv.FormatBool(r.Present)}
	}
	return table(w, []string{"VALUE", column}, rows)
}

func printFilterInfo(w io.Writer, cluster string, f *wire.Filter) error {
	rows := [][]string{
		{"Name:", f.Name},
		{"Cluster:", cluster},
		{"Capacity:", strconv.FormatUint(f.ExpectedInsertions, 10)},
		{"False positive rate:", strconv.FormatFloat(f.FPP, 'g', -1, 64)},
		{"Scalable:", strconv.FormatBool(f.Scalable)},
		{"Items:", strconv.FormatUint(f.Items, 10)},
		{"Size:", humanBytes(int64(f.SizeBytes))},
		{"Layers:", strconv.Itoa(f.Layers)},
		{"Hashes:", strconv.FormatUint(uint64(f.Hashes), 10)},
		{"Fill ratio:", strconv.FormatFloat(f.FillRatio, 'g', 4, 64)},
		{"Estimated FPR:", strconv.FormatFloat(f.EstimatedFPP, 'g', 4, 64)},
		{"Created:", f.Created},
	}
	if f.Expiration != "" {
		rows = append(rows, []string{"Expires:", f.Expiration})
	}
	if f.LastSnapshot != "" {
		rows = append(rows, []string{"Last snapshot:", f.LastSnapshot})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	for _, r := range rows {
		_, _ = fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1]) // errors surface at Flush
	}
	return tw.Flush()
}

// humanBytes writes a size in binary units, as kubectl writes quantities: 1.5Mi.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10)
	}
	value, suffix := float64(n), ""
	for _, s := range []string{"Ki", "Mi", "Gi", "Ti", "Pi"} {
		if value < unit {
			break
		}
		value /= unit
		suffix = s
	}
	return strconv.FormatFloat(value, 'f', 1, 64) + suffix
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// errWriter keeps the first write error, so that a page of prints checks it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func (e *errWriter) table(header []string, rows [][]string) {
	if e.err == nil {
		e.err = table(e.w, header, rows)
	}
}
