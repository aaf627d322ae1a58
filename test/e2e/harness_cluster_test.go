//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// The helpers of the scenarios with several pods: each pod is reached at its own address, as a
// user reaches it through `kubectl port-forward pod/<pod>` (docs/replication.md, "At 3 a.m.").

// readBatch is how many values one multi-check carries when a test reads back what it wrote.
const readBatch = 1000

// podNames are the pods of the sample BloomCluster with replicas pods: the StatefulSet names them
// by ordinal.
func podNames(replicas int) []string {
	names := make([]string, replicas)
	for i := range names {
		names[i] = fmt.Sprintf("example-%d", i)
	}
	return names
}

// apis returns the API of each pod, in order.
func (n namespace) apis(pods ...string) []podAPI {
	n.t.Helper()
	apis := make([]podAPI, len(pods))
	for i, pod := range pods {
		apis[i] = n.api(pod)
	}
	return apis
}

// missing reads values on the pod, with ?consistency= unless consistency is empty (the pod's own
// copy), and returns those it does not report present.
func (p podAPI) missing(filter string, values []string, consistency string) ([]string, error) {
	query := ""
	if consistency != "" {
		query = "?consistency=" + consistency
	}
	var out []string
	for batch := range slices.Chunk(values, readBatch) {
		status, data, err := p.call(http.MethodPost, "/v1/bloomfilter/"+filter+"/multi-check"+query, map[string]any{"values": batch})
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("multi-check%s of %s on pod %s: status %d: %s", query, filter, p.pod, status, data)
		}
		var present []bool
		if err := json.Unmarshal(data, &present); err != nil {
			return nil, fmt.Errorf("multi-check%s of %s on pod %s: answer %.200q: %w", query, filter, p.pod, data, err)
		}
		if len(present) != len(batch) {
			return nil, fmt.Errorf("multi-check%s of %s on pod %s: %d answers for %d values", query, filter, p.pod, len(present), len(batch))
		}
		for i, ok := range present {
			if !ok {
				out = append(out, batch[i])
			}
		}
	}
	return out, nil
}

// requirePresent checks at once that the pod reports every value present, reading with
// consistency (empty: its own copy).
func (p podAPI) requirePresent(filter, consistency string, values []string) {
	p.t.Helper()
	missing, err := p.missing(filter, values, consistency)
	if err != nil {
		p.t.Fatal(err)
	}
	if len(missing) > 0 {
		p.t.Fatalf("pod %s (consistency %q) lacks %d of %d acknowledged values of filter %s, such as %q",
			p.pod, consistency, len(missing), len(values), filter, missing[0])
	}
}

// requireEverywhere checks that every acknowledged value is on every pod: at once through a
// quorum read on each pod (R + W > N, so no acknowledged value may be missed), and, within the
// suite's wait, in each pod's own copy, which the default read answers from. It logs how long the
// last copies took to arrive.
func requireEverywhere(t testing.TB, filter string, values []string, pods []podAPI) {
	t.Helper()
	for _, p := range pods {
		p.requirePresent(filter, "quorum", values)
	}
	start := time.Now()
	await.Until(t, waitTimeout, fmt.Sprintf("every pod's own copy of %s holds the %d acknowledged values", filter, len(values)), func() (bool, string) {
		var lacking []string
		for _, p := range pods {
			missing, err := p.missing(filter, values, "")
			if err != nil {
				return false, err.Error()
			}
			if len(missing) > 0 {
				lacking = append(lacking, fmt.Sprintf("%s lacks %d, such as %q", p.pod, len(missing), missing[0]))
			}
		}
		return len(lacking) == 0, strings.Join(lacking, "; ")
	})
	t.Logf("the %d acknowledged values of %s are in the own copy of every pod (%d) %v after the first check",
		len(values), filter, len(pods), time.Since(start).Round(time.Millisecond))
}

// readyz answers /readyz's status and body.
func (p podAPI) readyz() (int, string, error) {
	status, data, err := p.call(http.MethodGet, "/readyz", nil)
	return status, strings.TrimSpace(string(data)), err
}

// waitReadyz polls the pod's /readyz every 50 ms, far more often than its readiness probe, until
// it answers 200, and returns when it did and the distinct answers it gave before.
func (p podAPI) waitReadyz() (time.Time, []string) {
	p.t.Helper()
	at, said, err := p.pollReadyz()
	if err != nil {
		p.t.Fatal(err)
	}
	return at, said
}

// pollReadyz is waitReadyz for any goroutine: it returns an error rather than failing the test.
func (p podAPI) pollReadyz() (time.Time, []string, error) {
	deadline := time.Now().Add(waitTimeout)
	var said []string
	for {
		status, body, err := p.readyz()
		if err == nil && status == http.StatusOK {
			return time.Now(), said, nil
		}
		answer := body
		if err != nil {
			answer = "no answer"
		}
		if len(said) == 0 || said[len(said)-1] != answer {
			said = append(said, answer)
		}
		if time.Now().After(deadline) {
			return time.Time{}, said, fmt.Errorf("/readyz of pod %s at %s did not answer 200 within %v; it said: %s", p.pod, p.base, waitTimeout, strings.Join(said, " | "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// membership is what GET /internal/v1/membership answers on the internal port: the peers the
// operator told the pod.
type membership struct {
	Epoch   int64  `json:"epoch"`
	Self    string `json:"self"`
	Members []struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"members"`
}

func (m membership) names() []string {
	names := make([]string, len(m.Members))
	for i, member := range m.Members {
		names[i] = member.Name
	}
	slices.Sort(names)
	return names
}

func (p podAPI) membership() (membership, error) {
	var m membership
	status, data, err := p.call(http.MethodGet, "/internal/v1/membership", nil)
	if err != nil {
		return m, err
	}
	if status != http.StatusOK {
		return m, fmt.Errorf("GET membership of pod %s: status %d: %s", p.pod, status, data)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("GET membership of pod %s: %q: %w", p.pod, data, err)
	}
	return m, nil
}

// clusterEpoch reads the membership epoch of the BloomCluster from the EPOCH column of
// `kubectl get bloomcluster -o wide`; 0 while it is blank.
func (n namespace) clusterEpoch() int64 {
	n.t.Helper()
	tables := parseTables(n.run("get", "bc", "example", "-o", "wide"))
	if len(tables) != 1 || len(tables[0].rows) != 1 || !slices.Contains(tables[0].header, "EPOCH") {
		n.t.Fatalf("kubectl get bc example -o wide: no one row with an EPOCH column: %v", tables)
	}
	s := tables[0].rows[0]["EPOCH"]
	if s == "" {
		return 0
	}
	epoch, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		n.t.Fatalf("EPOCH column %q: %v", s, err)
	}
	return epoch
}

// waitMembership waits until the EPOCH column shows an epoch and every one of pods holds that
// epoch with exactly pods as its members, itself as self; it returns the epoch.
func (n namespace) waitMembership(pods []string) int64 {
	n.t.Helper()
	var epoch int64
	await.Until(n.t, waitTimeout, fmt.Sprintf("every pod holds the BloomCluster's membership epoch with members %v", pods), func() (bool, string) {
		epoch = n.clusterEpoch()
		if epoch == 0 {
			return false, "the EPOCH column is blank"
		}
		var wrong []string
		for _, pod := range pods {
			m, err := n.internalAPI(pod).membership()
			switch {
			case err != nil:
				wrong = append(wrong, err.Error())
			case m.Epoch != epoch || m.Self != pod || !slices.Equal(m.names(), pods):
				wrong = append(wrong, fmt.Sprintf("%s holds epoch %d, self %q, members %v", pod, m.Epoch, m.Self, m.names()))
			}
		}
		return len(wrong) == 0, fmt.Sprintf("EPOCH %d; %s", epoch, strings.Join(wrong, "; "))
	})
	return epoch
}

// waitPlacement waits until the BloomCluster's status shows the placement in phase, owned by pods,
// with no partition moving, and every pod holds its membership.
func (n namespace) waitPlacement(pods []string, phase string) {
	n.t.Helper()
	owners := strings.Join(pods, " ")
	await.Until(n.t, waitTimeout, fmt.Sprintf("status.placement %s on %v", phase, pods), func() (bool, string) {
		got := n.jsonpath("bloomcluster/example", "{.status.placement.phase} {.status.placement.partitionsMoving} {.status.placement.owners[*]}")
		return got == phase+" 0 "+owners, got
	})
	n.waitMembership(pods)
}

// podEvents prints, for `kubectl get pods --watch --output-watch-events`, one line per change of a
// pod: the event, the pod's name, UID, Ready condition, deletion time, IP and API port (each but
// the first two may be empty).
const podEvents = `{.type} {.object.metadata.name} {.object.metadata.uid} ` +
	`{.object.status.conditions[?(@.type=="Ready")].status} {.object.metadata.deletionTimestamp} ` +
	`{.object.status.podIP} {.object.spec.containers[0].ports[?(@.name=="http")].containerPort}{"\n"}`

// dataPlaneSelector selects the data-plane pods of the sample BloomCluster.
const dataPlaneSelector = "app.kubernetes.io/instance=example,app.kubernetes.io/component=dataplane"

// podEvent is one line of a podEvents watcher.
type podEvent struct {
	kind, pod, uid, ready, deleting, ip, port string
}

func parsePodEvent(line string) (podEvent, bool) {
	f := strings.Split(line, " ")
	if len(f) != 7 {
		return podEvent{}, false
	}
	return podEvent{kind: f[0], pod: f[1], uid: f[2], ready: f[3], deleting: f[4], ip: f[5], port: f[6]}, true
}

// watchPods watches the data-plane pods of the sample cluster, one podEvents line per change: the
// test sees a pod's new address as soon as the API server has it.
func (n namespace) watchPods() *watcher {
	n.t.Helper()
	return n.watch("pods", podEvents, "-l", dataPlaneSelector, "--output-watch-events")
}

// awaitNewPod waits until the pods' watcher shows the pod with a UID other than oldUID (empty:
// any) and an IP, and returns its API.
func (n namespace) awaitNewPod(pods *watcher, pod, oldUID string) podAPI {
	n.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		for _, line := range slices.Backward(pods.seen()) {
			if e, ok := parsePodEvent(line); ok && e.pod == pod && e.uid != oldUID && e.kind != "DELETED" && e.ip != "" && e.port != "" {
				return podAPI{t: n.t, pod: pod, base: "http://" + net.JoinHostPort(e.ip, e.port)}
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("pod %s did not come anew (UID other than %q) with an IP within %v; the pods' watch showed:\n%s",
				pod, oldUID, waitTimeout, strings.Join(pods.seen(), "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processStarted is when the agent last started the pod's data-plane process, from the marker it
// writes into the container's log just before (pod status has its start only to the second).
func processStarted(t *testing.T, n namespace, pod string) time.Time {
	t.Helper()
	const marker = "--- e2e-agent "
	uid := n.jsonpath("pod/"+pod, "{.metadata.uid}")
	var last string
	for line := range strings.SplitSeq(podLog(t, n, pod, uid), "\n") {
		if strings.HasPrefix(line, marker) && strings.Contains(line, ": start (restart ") {
			last = line
		}
	}
	stamp, _, _ := strings.Cut(strings.TrimPrefix(last, marker), ": ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		t.Fatalf("no start marker of pod %s's process in its log (last %q): %v", pod, last, err)
	}
	return at
}

// requireCaughtUpLog checks the log of the pod's current incarnation: the data plane recovered
// the filter from its volume (the directory of its claim, which outlives the pod) and caught up
// from its peers.
func requireCaughtUpLog(t *testing.T, n namespace, pod string) {
	t.Helper()
	uid := n.jsonpath("pod/"+pod, "{.metadata.uid}")
	log := podLog(t, n, pod, uid)
	runs := strings.Split(log, `"msg":"Starting data plane"`)
	last := runs[len(runs)-1]
	if !strings.Contains(last, `"msg":"Recovered filters","filters":1,`) {
		t.Errorf("the last run of pod %s's data plane did not recover the filter from its volume; its log:\n%s", pod, last)
	}
	if !strings.Contains(last, `"msg":"Caught up"`) {
		t.Errorf("the last run of pod %s's data plane did not log that it caught up; its log:\n%s", pod, last)
	}
}

// homeOf is the filter's home pod among pods, by the rendezvous hashing docs/replication.md
// describes: each member weighs FNV-64a of (filter name, a zero byte, member name) passed through
// splitmix64's finalizer, and the highest weight is the home.
func homeOf(filter string, pods []string) string {
	var home string
	var best uint64
	for _, pod := range pods {
		h := fnv.New64a()
		_, _ = h.Write([]byte(filter + "\x00" + pod)) // a hash.Hash never fails
		x := h.Sum64()
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		if home == "" || x > best || x == best && pod < home {
			home, best = pod, x
		}
	}
	return home
}

// forwardedRequests reads the pod's bloomery_replication_forwarded_requests_total from /metrics.
func (p podAPI) forwardedRequests() float64 {
	p.t.Helper()
	status, data, err := p.call(http.MethodGet, "/metrics", nil)
	if err != nil || status != http.StatusOK {
		p.t.Fatalf("GET /metrics on pod %s: %d %v", p.pod, status, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "bloomery_replication_forwarded_requests_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				p.t.Fatalf("pod %s: %q: %v", p.pod, line, err)
			}
			return f
		}
	}
	p.t.Fatalf("pod %s's /metrics has no bloomery_replication_forwarded_requests_total:\n%s", p.pod, data)
	return 0
}

// requireHome checks that home is the filter's home, as a user sees it: a check-and-set through
// the home is served there, one through another pod is forwarded (and counted) by that pod.
func requireHome(t *testing.T, filter string, home podAPI, other podAPI) {
	t.Helper()
	homeBefore, otherBefore := home.forwardedRequests(), other.forwardedRequests()
	home.checkAndSet(filter, "home-probe-1")
	other.checkAndSet(filter, "home-probe-2")
	if got := home.forwardedRequests(); got != homeBefore {
		t.Errorf("pod %s forwarded a check-and-set of %s (%v forwarded requests, were %v): it is not the filter's home", home.pod, filter, got, homeBefore)
	}
	if got := other.forwardedRequests(); got != otherBefore+1 {
		t.Errorf("pod %s forwarded %v check-and-sets of %s to its home, want 1", other.pod, got-otherBefore, filter)
	}
}

// waitServedBy waits until `kubectl get bloomcluster` shows every one of pods ready, and the
// BloomFilter's status has the filter present on exactly those pods and Ready: a user's view of
// a cluster that has settled on pods (a Ready condition alone may still be the one of before).
func (n namespace) waitServedBy(filter string, pods []string) {
	n.t.Helper()
	replicas := fmt.Sprint(len(pods))
	await.Until(n.t, waitTimeout, fmt.Sprintf("kubectl get bloomcluster shows %s of %s pods ready", replicas, replicas), func() (bool, string) {
		out := n.run("get", "bloomcluster", "example")
		rows := parseTables(out)[0].rows
		return len(rows) == 1 && rows[0]["REPLICAS"] == replicas && rows[0]["READY"] == replicas && rows[0]["STATUS"] == "AllReplicasReady", out
	})
	want := strings.Join(pods, " ") + "=" + strings.TrimSpace(strings.Repeat("true ", len(pods))) + " True"
	await.Until(n.t, waitTimeout, fmt.Sprintf("BloomFilter %s is Ready on %v", filter, pods), func() (bool, string) {
		got := n.jsonpath("bloomfilter/"+filter, `{.status.pods[*].pod}={.status.pods[*].present} {.status.conditions[?(@.type=="Ready")].status}`)
		return got == want, got
	})
}
