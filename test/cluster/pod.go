package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Pod is one data plane of the cluster.
type Pod struct {
	Name string
	// URL, InternalURL and OpsURL are the pod's three ports, which the test reaches directly.
	URL, InternalURL, OpsURL string
	// Client calls the client port; Internal the internal port, with the token.
	Client, Internal *client.Client
	// Config is the configuration the pod runs with.
	Config config.Config

	c      *Cluster
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	stopped  atomic.Bool
	runErr   error
}

// With is a client of the pod's client port that asks every request for level.
func (p *Pod) With(level wire.Consistency) *client.Client {
	return client.New(p.URL, client.WithHTTPClient(p.c.http), client.WithConsistency(level))
}

// Stop stops the pod, as a SIGTERM does, and returns what Run returned. Stopping it again
// returns the same.
func (p *Pod) Stop() error {
	p.stopOnce.Do(func() {
		p.stopped.Store(true)
		p.cancel()
		select {
		case p.runErr = <-p.done:
		case <-time.After(time.Minute):
			p.runErr = errors.New("the data plane did not stop within a minute of its cancellation")
		}
	})
	return p.runErr
}

// Ready reports whether /readyz answers 200, and otherwise its message.
func (p *Pod) Ready(t testing.TB) (bool, string) {
	t.Helper()
	status, body := p.get(t, p.OpsURL+wire.ReadyzPath)
	if status == http.StatusOK {
		return true, ""
	}
	var eb wire.ErrorBody
	_ = json.Unmarshal(body, &eb)
	return false, eb.Error
}

// Logs are the pod's log lines so far, JSON, info level and above.
func (p *Pod) Logs() string { return p.logs.String() }

// LogLines are the pod's log lines whose message contains msg, decoded.
func (p *Pod) LogLines(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(p.Logs()) {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) != nil {
			continue
		}
		if m, _ := fields["msg"].(string); strings.Contains(m, msg) {
			out = append(out, fields)
		}
	}
	return out
}

// Metrics scrapes the pod's /metrics.
func (p *Pod) Metrics(t testing.TB) Metrics {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.OpsURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.c.http.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", p.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %d, %v", p.Name, resp.StatusCode, err)
	}
	fs, err := metricstest.Parse(body, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"))
	if err != nil {
		t.Fatalf("scraping %s: %v", p.Name, err)
	}
	return Metrics{t: t, pod: p.Name, Families: fs}
}

// Metric is one sample of the pod's /metrics (see Metrics.Value).
func (p *Pod) Metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return p.Metrics(t).Value(name, labels...)
}

// Holds answers, for each value, whether the pod holds it, asking it alone (consistency=one).
func (p *Pod) Holds(t testing.TB, filter string, values ...string) []bool {
	t.Helper()
	got, err := p.With(wire.ConsistencyOne).MultiCheck(t.Context(), filter, values)
	if err != nil {
		t.Fatalf("multi-check of %s on %s: %v", filter, p.Name, err)
	}
	return got
}

// HoldsAll reports whether the pod holds every value, asking it alone. A filter the pod lacks
// holds nothing.
func (p *Pod) HoldsAll(t testing.TB, filter string, values ...string) bool {
	t.Helper()
	got, err := p.With(wire.ConsistencyOne).MultiCheck(t.Context(), filter, values)
	if client.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("multi-check of %s on %s: %v", filter, p.Name, err)
	}
	for _, ok := range got {
		if !ok {
			return false
		}
	}
	return true
}

func (p *Pod) get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.c.http.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// Metrics are a scrape of one pod's /metrics.
type Metrics struct {
	metricstest.Families
	t   testing.TB
	pod string
}

// Value is the one sample of the family name whose labels include labels (pairs of name and
// value); the test fails if there is not exactly one.
func (m Metrics) Value(name string, labels ...string) float64 {
	m.t.Helper()
	v, ok := m.Families.Value(name, labels...)
	if !ok {
		m.t.Fatalf("%s: no single sample of %s%v in /metrics", m.pod, name, labels)
	}
	return v
}

// WantError asserts that err is the API's error with that status and code, and returns its
// message.
func WantError(t testing.TB, err error, status, code int) string {
	t.Helper()
	e, ok := errors.AsType[*client.Error](err)
	if !ok {
		t.Fatalf("error = %v, want an answer with status %d and code %d", err, status, code)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("error = %v, want status %d and code %d", e, status, code)
	}
	return e.Message
}

// WaitTimeout bounds the tests' waits for a condition: generous enough for a loaded machine
// under the race detector. Tests wait for a condition (await.True), never for a fixed time.
const WaitTimeout = 30 * time.Second
