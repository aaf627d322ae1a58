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
)

// writerInterval paces a writer: about a hundred check-and-sets a second, enough to have writes
// in flight at every moment of a disruption without starving the control plane of the machine.
const writerInterval = 10 * time.Millisecond

// writer is an application streaming check-and-sets of new values (prefix-0, prefix-1, ...) to a
// filter, one request at a time, each to the next of its targets. It remembers which values were
// acknowledged (200) and when: those are the values the cluster must never lose. A value whose
// request failed may or may not have been applied; the writer does not retry it.
type writer struct {
	filter, prefix string
	targets        func() []podAPI

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	acked    []ackedValue
	perPod   map[string]int
	failures []string // one line per failed request
}

type ackedValue struct {
	value string
	at    time.Time // when the answer arrived: the cluster acknowledged the value before
}

// startWriter starts a writer until the test ends or halt is called. targets is asked before every
// request.
func startWriter(t *testing.T, filter, prefix string, targets func() []podAPI) *writer {
	w := &writer{filter: filter, prefix: prefix, targets: targets, stop: make(chan struct{}), done: make(chan struct{}), perPod: map[string]int{}}
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
	tick := time.NewTicker(writerInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		targets := w.targets()
		if len(targets) == 0 {
			continue
		}
		p := targets[i%len(targets)]
		value := w.prefix + "-" + strconv.Itoa(i)
		status, body, err := p.call(http.MethodPost, "/v1/bloomfilter/"+w.filter+"/check-and-set", map[string]any{"value": value})
		now := time.Now()
		w.mu.Lock()
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
	eventually(t, fmt.Sprintf("the writer has %d values acknowledged", n), func() (bool, string) {
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
	for _, f := range w.failures[:min(len(w.failures), 10)] {
		s += "\n  " + f
	}
	if len(w.failures) > 10 {
		s += fmt.Sprintf("\n  ... and %d more", len(w.failures)-10)
	}
	return s
}

// serviceTargets follows the pods the client Service sends to, as kube-proxy would for an
// application calling the Service: Ready pods that are not being deleted (the endpoint slice
// controller's "ready"). The harness has no kube-proxy, and its pods' loopback addresses are not
// valid in EndpointSlices, so the writer reads the pods themselves.
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
