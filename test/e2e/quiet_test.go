//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// quietFilters is how many BloomFilters TestQuietMinuteCallsDoNotGrowWithFilters creates: with
// the operator's passes every 5 s (--filter-resync of the suite), passes that called the pods would
// make 12 calls a minute per filter and pod.
const quietFilters = 300

// operatorCalls counts, from a pod's bloomery_http_requests_total, the requests the operator makes
// about filters: one filter's status, its create, and the polls of every filter's status.
type operatorCalls struct{ perFilter, polls float64 }

func (p podAPI) operatorCalls() operatorCalls {
	p.t.Helper()
	status, body, err := p.call(http.MethodGet, "/metrics", nil)
	if err != nil || status != http.StatusOK {
		p.t.Fatalf("GET /metrics on pod %s: %d %v", p.pod, status, err)
	}
	fs, err := metricstest.Parse(body, "text/plain", "")
	if err != nil {
		p.t.Fatalf("pod %s's /metrics: %v", p.pod, err)
	}
	sum := func(route, method string) float64 {
		var total float64
		for _, m := range fs.Samples("bloomery_http_requests_total", "route", route, "method", method) {
			total += m.GetCounter().GetValue()
		}
		return total
	}
	return operatorCalls{
		perFilter: sum(wire.FilterStatusPath(":"+wire.NameParam), http.MethodGet) + sum(wire.InternalPath(wire.FilterRoute), http.MethodPut),
		polls:     sum(wire.FilterStatusesPath, http.MethodGet),
	}
}

// A few hundred BloomFilters on the sample cluster, all Ready: over a quiet minute the operator
// calls no pod about any one filter, and polls each pod a few times, whatever the number of
// filters: the pods tell, the operator listens.
func TestQuietMinuteCallsDoNotGrowWithFilters(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	var manifest strings.Builder
	for i := range quietFilters {
		fmt.Fprintf(&manifest, `---
apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: quiet-%03d
spec:
  clusterRef:
    name: example
  capacity: 1000
  falsePositiveRate: "0.01"
`, i)
	}
	created := time.Now()
	n.apply(manifest.String())
	n.wait("condition=Ready", "bloomfilter", "--all")
	t.Logf("%d BloomFilters Ready %v after kubectl apply", quietFilters, time.Since(created).Round(time.Millisecond))

	pods := n.apis(podNames(sampleReplicas)...)
	before := make([]operatorCalls, len(pods))
	for i, p := range pods {
		before[i] = p.operatorCalls()
	}
	time.Sleep(time.Minute)
	for i, p := range pods {
		after := p.operatorCalls()
		perFilter, polls := after.perFilter-before[i].perFilter, after.polls-before[i].polls
		t.Logf("pod %s over a quiet minute: %v calls about one filter, %v polls of all filters", p.pod, perFilter, polls)
		if perFilter != 0 {
			t.Errorf("pod %s: the operator called it %v times about one filter in a quiet minute, want none", p.pod, perFilter)
		}
		// A poll lasts 30 s without a change: 2 a minute, one more for a change the minute began with.
		if polls > 3 {
			t.Errorf("pod %s: %v polls in a quiet minute, want at most 3", p.pod, polls)
		}
	}
}
