//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bloomery/bloomery/internal/await"
)

// writerInterval paces a writer: about a hundred check-and-sets a second, enough to have writes
// in flight at every moment of a disruption without starving the control plane of the machine.
const writerInterval = 10 * time.Millisecond

// writer is an application streaming check-and-sets of new values (prefix-0, prefix-1, ...) to a
// filter, one request at a time, each to the next of its targets. It remembers which values were
// acknowledged (200) and when: those are the values the cluster must never lose. A value whose
// request failed may or may not have been applied. A writer started with retries retries it as
// the README's "Retrying" tells applications to (retrying); others do not.
type writer struct {
	filter, prefix string
	targets        func() []podAPI
	retry          bool
	// op is what the writer sends: check-and-set, or set for one that must be acknowledged while
	// the filter's home is down (a check-and-set is then answered 503 code 13).
	op string

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	acked    []ackedValue
	perPod   map[string]int
	failures []string // one line per failed request
	retried  []string // one line per retried attempt
}

type ackedValue struct {
	value string
	at    time.Time // when the answer arrived: the cluster acknowledged the value before
}

// startWriter starts a writer until the test ends or halt is called. targets is asked before every
// request.
func startWriter(t *testing.T, filter, prefix string, targets func() []podAPI) *writer {
	t.Helper()
	return startWriterRetrying(t, filter, prefix, targets, false)
}

// startSetWriter starts a writer of sets rather than check-and-sets, which any pod serves.
func startSetWriter(t *testing.T, filter, prefix string, targets func() []podAPI) *writer {
	t.Helper()
	return startWriterOp(t, filter, prefix, targets, false, "set")
}

// startWriterRetrying starts a writer that retries failed requests when retry is set.
func startWriterRetrying(t *testing.T, filter, prefix string, targets func() []podAPI, retry bool) *writer {
	t.Helper()
	return startWriterOp(t, filter, prefix, targets, retry, "check-and-set")
}

// startWriterOp starts a writer that sends op (the path's last segment).
func startWriterOp(t *testing.T, filter, prefix string, targets func() []podAPI, retry bool, op string) *writer {
	t.Helper()
	w := &writer{filter: filter, prefix: prefix, targets: targets, retry: retry, op: op,
		stop: make(chan struct{}), done: make(chan struct{}), perPod: map[string]int{}}
	go w.run()
	t.Cleanup(func() {
		w.halt()
		if t.Failed() {
			t.Logf("writer %s: %s", prefix, w.summary())
		}
	})
	return w
}

// fixedTargets sends to the given pods in turn.
func fixedTargets(pods ...podAPI) func() []podAPI {
	return func() []podAPI { return pods }
}

func (w *writer) run() {
	defer close(w.done)
	paced(w.stop, func(i int) {
		targets := w.targets()
		if len(targets) == 0 {
			return
		}
		p := targets[i%len(targets)]
		value := w.prefix + "-" + strconv.Itoa(i)
		var retryFor time.Duration
		if w.retry {
			retryFor = clientRetryFor
		}
		status, body, retried, err := retrying(p, retryFor, http.MethodPost, "/v1/bloomfilter/"+w.filter+"/"+w.op, map[string]any{"value": value})
		now := time.Now()
		w.mu.Lock()
		w.retried = append(w.retried, retried...)
		switch {
		case err != nil:
			w.failures = append(w.failures, fmt.Sprintf("%s %s via %s: %v", now.Format("15:04:05.000"), value, p.pod, err))
		case status != http.StatusOK:
			w.failures = append(w.failures, fmt.Sprintf("%s %s via %s: %d %s", now.Format("15:04:05.000"), value, p.pod, status, strings.TrimSpace(string(body))))
		default:
			w.acked = append(w.acked, ackedValue{value, now})
			w.perPod[p.pod]++
		}
		w.mu.Unlock()
	})
}

// paced calls step(0), step(1), ... once every writerInterval until stop is closed.
func paced(stop <-chan struct{}, step func(i int)) {
	tick := time.NewTicker(writerInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		step(i)
	}
}

// halt stops the writer and waits for its request in flight.
func (w *writer) halt() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// waitAcked waits until at least n values were acknowledged.
func (w *writer) waitAcked(t *testing.T, n int) {
	t.Helper()
	await.Until(t, waitTimeout, fmt.Sprintf("the writer has %d values acknowledged", n), func() (bool, string) {
		return w.count(time.Time{}, time.Now()) >= n, w.summary()
	})
}

// values returns every value acknowledged so far.
func (w *writer) values() []string { return w.ackedIn(time.Time{}, time.Now()) }

// ackedIn returns the values acknowledged in [from, to).
func (w *writer) ackedIn(from, to time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, a := range w.acked {
		if !a.at.Before(from) && a.at.Before(to) {
			out = append(out, a.value)
		}
	}
	return out
}

func (w *writer) count(from, to time.Time) int { return len(w.ackedIn(from, to)) }

// summary says how the writer fared: acknowledged values per pod, and the failed requests.
func (w *writer) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	pods := make([]string, 0, len(w.perPod))
	for pod, n := range w.perPod {
		pods = append(pods, fmt.Sprintf("%s %d", pod, n))
	}
	slices.Sort(pods)
	s := fmt.Sprintf("%d values acknowledged (%s), %d requests failed", len(w.acked), strings.Join(pods, ", "), len(w.failures))
	s += listSome(w.failures)
	if w.retry {
		s += fmt.Sprintf("; %d attempts retried", len(w.retried)) + listSome(w.retried)
	}
	return s
}

// failed returns the requests that failed (after their retries, for a writer that retries).
func (w *writer) failed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.failures)
}

// listSome lists up to ten lines, one per line, and how many more there are.
func listSome(lines []string) string {
	var s string
	for _, l := range lines[:min(len(lines), 10)] {
		s += "\n  " + l
	}
	if len(lines) > 10 {
		s += fmt.Sprintf("\n  ... and %d more", len(lines)-10)
	}
	return s
}

// clientRetryFor is how long an application following the README's "Retrying" goes on sending a
// request before it gives up: longer than it takes a frozen home's lease to lapse and the
// operator to move the home (the samples' homeLeaseSeconds, 10, by 5%, then a push and a merge).
const clientRetryFor = 30 * time.Second

// retrying sends a request until it is answered, or for retryFor, as the README's "Retrying"
// advises: again after a connection error or a 503, after a pause that grows with each attempt,
// 200 ms more each time up to 2 s. It returns the last answer, and one line per attempt that was
// retried.
func retrying(p podAPI, retryFor time.Duration, method, path string, body any) (int, []byte, []string, error) {
	var retried []string
	began := time.Now()
	for attempt := 1; ; attempt++ {
		status, data, err := p.call(method, path, body)
		if time.Since(began) >= retryFor || (err == nil && status != http.StatusServiceUnavailable) {
			return status, data, retried, err
		}
		why := fmt.Sprintf("%d %s", status, strings.TrimSpace(string(data)))
		if err != nil {
			why = err.Error()
		}
		retried = append(retried, fmt.Sprintf("%s %s %s attempt %d: %s", time.Now().Format("15:04:05.000"), method, path, attempt, why))
		time.Sleep(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second))
	}
}

// reader is an application checking, through its target, values a writer had acknowledged, one
// request at a time at consistency quorum, retrying as the README's "Retrying" advises. Every
// such check must answer true.
type reader struct {
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	checks   int
	failures []string // errors after the retries, and answers other than true
	retried  []string
}

// startReader checks w's acknowledged values through target until the test ends or halt is called.
func startReader(t *testing.T, filter string, target podAPI, w *writer) *reader {
	t.Helper()
	r := &reader{stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(filter, target, w)
	t.Cleanup(func() {
		r.halt()
		if t.Failed() {
			t.Logf("reader: %s", r.summary())
		}
	})
	return r
}

func (r *reader) run(filter string, target podAPI, w *writer) {
	defer close(r.done)
	paced(r.stop, func(i int) {
		acked := w.values()
		if len(acked) == 0 {
			return
		}
		value := acked[(i*7919)%len(acked)] // spread over old and new values
		status, body, retried, err := retrying(target, clientRetryFor, http.MethodPost,
			"/v1/bloomfilter/"+filter+"/check?consistency=quorum", map[string]any{"value": value})
		r.mu.Lock()
		r.checks++
		r.retried = append(r.retried, retried...)
		switch {
		case err != nil:
			r.failures = append(r.failures, fmt.Sprintf("%s check %s: %v", time.Now().Format("15:04:05.000"), value, err))
		case status != http.StatusOK || strings.TrimSpace(string(body)) != "true":
			r.failures = append(r.failures, fmt.Sprintf("%s check %s: %d %s", time.Now().Format("15:04:05.000"), value, status, strings.TrimSpace(string(body))))
		}
		r.mu.Unlock()
	})
}

func (r *reader) halt() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
}

func (r *reader) failed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failures)
}

func (r *reader) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d checks, %d failed", r.checks, len(r.failures)) + listSome(r.failures) +
		fmt.Sprintf("; %d attempts retried", len(r.retried)) + listSome(r.retried)
}

// clientTraffic is an application of the cluster writing to and reading from a filter through
// the client Service, retrying as the README's "Retrying" advises. Where no Service can be reached
// (harness_network_test.go) it is a writer to the pods the Service would send to (serviceTargets),
// which does not retry, and no reader.
type clientTraffic struct {
	w *writer
	r *reader // nil without a Service
}

// startClientTraffic starts the writer (values prefix-0, prefix-1, ...) and the reader.
func (n namespace) startClientTraffic(t *testing.T, filter, prefix string) clientTraffic {
	t.Helper()
	if !h.net.servicesReachable() {
		return clientTraffic{w: startWriter(t, filter, prefix, n.serviceTargets(dataPlaneSelector))}
	}
	svc := n.serviceAPI("example", "http")
	pooled := svc
	pooled.http = dataPlaneHTTP // keeps its connections, as most applications do
	w := startWriterRetrying(t, filter, prefix, fixedTargets(pooled), true)
	return clientTraffic{w: w, r: startReader(t, filter, svc, w)}
}

// halt stops the traffic and reports it; through a Service, every request must have succeeded
// within its retries.
func (c clientTraffic) halt(t *testing.T) {
	t.Helper()
	c.w.halt()
	t.Logf("writer: %s", c.w.summary())
	if c.r == nil {
		return
	}
	c.r.halt()
	t.Logf("reader: %s", c.r.summary())
	if failed := c.w.failed(); len(failed) > 0 {
		t.Errorf("%d writes through the client Service failed after retrying for %v, such as %s", len(failed), clientRetryFor, failed[0])
	}
	if failed := c.r.failed(); len(failed) > 0 {
		t.Errorf("%d checks through the client Service of acknowledged values failed or answered false, such as %s", len(failed), failed[0])
	}
}

// serviceTargets follows the pods the client Service sends to, as kube-proxy would for an
// application calling the Service: Ready pods that are not being deleted (the endpoint slice
// controller's "ready"). It stands for the Service where pods have loopback addresses, which are
// not valid in EndpointSlices.
func (n namespace) serviceTargets(selector string) func() []podAPI {
	n.t.Helper()
	client, err := kubernetes.NewForConfig(h.cp.config)
	if err != nil {
		n.t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		cached  []podAPI
		fetched time.Time
	)
	return func() []podAPI {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(fetched) < 200*time.Millisecond {
			return cached
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pods, err := client.CoreV1().Pods(n.name).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return cached // the last known endpoints, as kube-proxy keeps its rules
		}
		fetched = time.Now()
		cached = nil
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
				continue
			}
			for _, port := range p.Spec.Containers[0].Ports {
				if port.Name == "http" {
					cached = append(cached, podAPI{t: n.t, pod: p.Name, base: "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))})
				}
			}
		}
		return cached
	}
}
