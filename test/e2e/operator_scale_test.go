//go:build e2e

package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// benchOperatorEnv holds the numbers of filters of the operator's scale benchmark, comma-separated
// (make bench-operator sets it). Set, the operator runs with its default resyncs, as installed;
// unset, TestOperatorScale is skipped.
const benchOperatorEnv = "E2E_BENCH_OPERATOR"

// benchAPIServerEnv holds the numbers of filters of TestAPIServerScale (make bench-operator-floor).
const benchAPIServerEnv = "E2E_BENCH_APISERVER"

// scaleTimeout bounds each phase of the benchmark: far past its targets, so that a slow run still
// reports its numbers.
const scaleTimeout = 15 * time.Minute

// TestOperatorScale is the operator's scale benchmark, not a test: for each number of filters it
// creates that many BloomFilters on the sample cluster of 3 pods and reports how long until all
// are Ready, what a quiet minute then costs (the operator's CPU, the API server's requests, the
// operator's calls to each pod) and the operator's RSS, and how long until all are gone.
//
//	make bench-operator                  # 1,000 and 10,000 filters
//	make bench-operator FILTERS=500      # another number
func TestOperatorScale(t *testing.T) {
	for _, filters := range benchSizes(t, benchOperatorEnv, "make bench-operator") {
		t.Run(strconv.Itoa(filters), func(t *testing.T) { measureOperatorScale(t, filters) })
	}
}

// TestAPIServerScale is the floor under the operator's scale benchmark, not a test: for each number
// of filters it creates and deletes that many BloomFilters as TestOperatorScale does, with the
// operator stopped, so that the API server does nothing for them but the benchmark's own requests.
//
//	make bench-operator-floor            # 1,000 and 10,000 filters
func TestAPIServerScale(t *testing.T) {
	sizes := benchSizes(t, benchAPIServerEnv, "make bench-operator-floor")
	n := newNamespace(t)
	n.applySamples()
	restart, err := h.stopClusterWideOperator()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Error(err)
		}
	})
	api := scaleClient(t)
	watch := watchScaleFilters(t, api, n.name)
	for _, filters := range sizes {
		creating := beginPhase(n, fmt.Sprintf("%d filters created, the API server alone", filters))
		created := time.Now()
		createScaleFilters(t, api, n.name, filters)
		all := watch.await(t, scaleTimeout, fmt.Sprintf("all %d BloomFilters", filters), func(exist, _ int) bool {
			return exist == filters
		}).Sub(created)
		creating.end()
		creating.log(t, n)
		deleting := beginPhase(n, fmt.Sprintf("%d filters deleted, the API server alone", filters))
		deleted := time.Now()
		deleteScaleFilters(t, api, n.name, filters)
		gone := watch.await(t, scaleTimeout, fmt.Sprintf("all %d BloomFilters gone", filters), func(exist, _ int) bool {
			return exist == 0
		}).Sub(deleted)
		deleting.end()
		deleting.log(t, n)
		t.Logf("%d filters, the API server alone: all created after %v, all gone after %v", filters, all.Round(time.Millisecond), gone.Round(time.Millisecond))
	}
}

// benchSizes reads the numbers of filters of a benchmark from env, comma-separated; unset, it skips
// the benchmark, which target runs.
func benchSizes(t *testing.T, env, target string) []int {
	t.Helper()
	spec := os.Getenv(env)
	if spec == "" {
		t.Skip("a benchmark, run by " + target + " (" + env + "=1000,10000)")
	}
	var sizes []int
	for field := range strings.SplitSeq(spec, ",") {
		filters, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || filters < 1 {
			t.Fatalf("%s=%q: %q is not a number of filters", env, spec, field)
		}
		sizes = append(sizes, filters)
	}
	return sizes
}

func measureOperatorScale(t *testing.T, filters int) {
	t.Helper()
	n := newNamespace(t)
	n.applySamples()
	operator := h.clusterWideOperator()
	pid := operator.cmd.Process.Pid
	api := scaleClient(t)
	watch := watchScaleFilters(t, api, n.name)

	writes, creating := apiWrites(n), beginPhase(n, fmt.Sprintf("%d filters created until all Ready", filters))
	profiled := profiledProcesses(t, operator)
	stopProfiling := profilePhase(t, profiled, fmt.Sprintf("ready-%d", filters))
	created := time.Now()
	createScaleFilters(t, api, n.name, filters)
	applied := time.Since(created)
	ready := watch.await(t, scaleTimeout, fmt.Sprintf("all %d BloomFilters Ready", filters), func(_, ready int) bool {
		return ready == filters
	}).Sub(created)
	creating.end()
	stopProfiling()
	t.Logf("%d filters: API writes while they were created, until all Ready: %s", filters, writes.perFilter(apiWrites(n), filters))
	creating.log(t, n)

	pods := n.apis(podNames(sampleReplicas)...)
	cpuBefore, apiBefore := processCPU(t, pid), apiRequestsByKind(n)
	callsBefore := make([]operatorCalls, len(pods))
	for i, p := range pods {
		callsBefore[i] = p.operatorCalls()
	}
	quiet := time.Now()
	stopProfiling = profilePhase(t, profiled, fmt.Sprintf("quiet-%d", filters))
	time.Sleep(time.Minute)
	minutes := time.Since(quiet).Minutes()
	cpu := (processCPU(t, pid) - cpuBefore).Seconds() / minutes
	apiAfter := apiRequestsByKind(n)
	apiPerMinute := (apiAfter.total() - apiBefore.total()) / minutes
	var perFilter, polls float64
	for i, p := range pods {
		calls := p.operatorCalls()
		perFilter += calls.perFilter - callsBefore[i].perFilter
		polls += calls.polls - callsBefore[i].polls
	}
	rss := processRSS(t, pid)
	stopProfiling()
	t.Logf("%d filters on %d pods: created in %v, all Ready after %v; a quiet minute: operator CPU %.2f s (%.1f%% of a core), "+
		"%.0f API requests (every client), %.2f pod calls a second per pod (%.0f about filters, %.0f polls in all); operator RSS %.0f MiB",
		filters, len(pods), applied.Round(time.Millisecond), ready.Round(time.Millisecond),
		cpu, 100*cpu/60, apiPerMinute, (perFilter+polls)/minutes/60/float64(len(pods)), perFilter, polls, rss/(1<<20))
	t.Logf("%d filters: the quiet minute's API requests, by verb and resource: %s", filters, apiAfter.since(apiBefore))

	writes, deleting := apiWrites(n), beginPhase(n, fmt.Sprintf("%d filters deleted until their copies were gone", filters))
	stopProfiling = profilePhase(t, profiled, fmt.Sprintf("gone-%d", filters))
	deleted := time.Now()
	deleteScaleFilters(t, api, n.name, filters)
	requested := time.Since(deleted)
	gone := watch.await(t, scaleTimeout, fmt.Sprintf("all %d BloomFilters gone", filters), func(exist, _ int) bool {
		return exist == 0
	}).Sub(deleted)
	apiWritten := writes.perFilter(apiWrites(n), filters)
	// The BloomFilters go at once; their copies, which the operator then deletes, are measured too.
	await.Until(t, scaleTimeout, fmt.Sprintf("the copies of all %d BloomFilters gone from the pods", filters), func() (bool, string) {
		for _, p := range pods {
			if left := p.scaleCopies(); left > 0 {
				return false, fmt.Sprintf("pod %s holds %d", p.pod, left)
			}
		}
		return true, ""
	})
	copiesGone := time.Since(deleted)
	deleting.end()
	stopProfiling()
	t.Logf("%d filters: deletes sent in %v, all gone after %v, and their copies from the pods after %v; API writes until then: %s", filters,
		requested.Round(time.Millisecond), gone.Round(time.Millisecond), copiesGone.Round(time.Millisecond), apiWritten)
	deleting.log(t, n)
}

// phase is a phase of a scale benchmark, and what the machine had done when it began: the API
// requests answered, the watchers the API server closed, and the CPU every process used.
type phase struct {
	name          string
	requests      requestCounts
	closed        float64
	cpu, cpuAtEnd machineCPU
}

func beginPhase(n namespace, name string) *phase {
	return &phase{name: name, requests: apiRequestsByKind(n), closed: closedWatchers(n), cpu: readMachineCPU()}
}

// closedWatchers counts the watches of BloomFilters the API server closed because their clients
// did not take the events as fast as they came (each reopens from where it was).
func closedWatchers(n namespace) float64 {
	n.t.Helper()
	var total float64
	for _, m := range apiMetrics(n).Samples("apiserver_terminated_watchers_total", "resource", "bloomfilters") {
		total += m.GetCounter().GetValue()
	}
	return total
}

// end reads the CPU used: at once when the phase ends, before the benchmark does more.
func (p *phase) end() { p.cpuAtEnd = readMachineCPU() }

// log logs what the phase cost, by process, and the API requests answered since it began.
func (p *phase) log(t *testing.T, n namespace) {
	t.Helper()
	t.Logf("%s: CPU %s", p.name, p.cpuAtEnd.since(p.cpu))
	t.Logf("%s: API requests %s; watches of BloomFilters closed as too slow: %.0f", p.name,
		apiRequestsByKind(n).since(p.requests), closedWatchers(n)-p.closed)
}

// scaleCopies counts the benchmark's filters the pod holds.
func (p podAPI) scaleCopies() int {
	status, body, err := p.call(http.MethodGet, wire.ListPath, nil)
	if err != nil || status != http.StatusOK {
		p.t.Fatalf("listing the filters of pod %s: %d %s %v", p.pod, status, body, err)
	}
	var names []string
	if err := json.Unmarshal(body, &names); err != nil {
		p.t.Fatalf("listing the filters of pod %s: %v", p.pod, err)
	}
	n := 0
	for _, name := range names {
		if strings.HasPrefix(name, scalePrefix) {
			n++
		}
	}
	return n
}

// processCPU reads the CPU time, user and system, that process pid used so far.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command, which is in parentheses and may hold spaces: utime and stime
	// are the 12th and 13th, in clock ticks (USER_HZ, 100 on Linux).
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %q: %v", pid, f, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / 100)
}

// processRSS reads the resident memory of process pid, in bytes.
func processRSS(t *testing.T, pid int) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatalf("/proc/%d/status: %q: %v", pid, line, err)
			}
			return kib * 1024
		}
	}
	t.Fatalf("/proc/%d/status has no VmRSS", pid)
	return 0
}

// requestCounts are the API server's counts of requests answered, from every client, by verb and
// resource ("GET leases", "PUT bloomfilters/status").
type requestCounts map[string]float64

func apiRequestsByKind(n namespace) requestCounts {
	n.t.Helper()
	out := requestCounts{}
	for _, m := range apiMetrics(n).Samples("apiserver_request_total") {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		kind := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			kind += "/" + sub
		}
		out[kind] += m.GetCounter().GetValue()
	}
	return out
}

func (c requestCounts) total() float64 {
	var sum float64
	for _, v := range c {
		sum += v
	}
	return sum
}

// since lists the kinds of request answered between before and c, the most frequent first.
func (c requestCounts) since(before requestCounts) string {
	kinds := slices.Collect(maps.Keys(c))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(c[b]-before[b], c[a]-before[a]) })
	var parts []string
	for _, k := range kinds {
		if d := c[k] - before[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, d))
		}
	}
	return strings.Join(parts, ", ")
}

func apiMetrics(n namespace) metricstest.Families {
	n.t.Helper()
	fs, err := metricstest.Parse([]byte(n.run("get", "--raw", "/metrics")), "text/plain", "")
	if err != nil {
		n.t.Fatalf("the API server's /metrics: %v", err)
	}
	return fs
}

// apiCount sums the API server's requests answered that have the given labels (name, value, ...).
func apiCount(n namespace, fs metricstest.Families, labels ...string) float64 {
	n.t.Helper()
	var total float64
	for _, m := range fs.Samples("apiserver_request_total", labels...) {
		total += m.GetCounter().GetValue()
	}
	return total
}

// filterWrites are the API server's writes that follow from the benchmark's creates and deletes,
// from every client: besides these, the benchmark writes nothing of BloomFilters, so the updates
// (finalizers), status writes, events and refused writes (409) are the operator's.
type filterWrites struct{ updates, statusWrites, events, conflicts float64 }

func apiWrites(n namespace) filterWrites {
	n.t.Helper()
	fs := apiMetrics(n)
	return filterWrites{
		updates: apiCount(n, fs, "resource", "bloomfilters", "subresource", "", "verb", "PUT"),
		statusWrites: apiCount(n, fs, "resource", "bloomfilters", "subresource", "status", "verb", "PUT") +
			apiCount(n, fs, "resource", "bloomfilters", "subresource", "status", "verb", "PATCH"),
		events:    apiCount(n, fs, "resource", "events", "verb", "POST"),
		conflicts: apiCount(n, fs, "resource", "bloomfilters", "code", "409"),
	}
}

// perFilter is what each of filters cost from w to now.
func (w filterWrites) perFilter(now filterWrites, filters int) string {
	f := float64(filters)
	return fmt.Sprintf("%.2f updates, %.2f status writes, %.2f events and %.2f conflicts a filter",
		(now.updates-w.updates)/f, (now.statusWrites-w.statusWrites)/f, (now.events-w.events)/f, (now.conflicts-w.conflicts)/f)
}
