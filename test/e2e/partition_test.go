//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// TestPartitionedScaleOutAndIn runs the samples on 4 pods with spec.replication.factor 2 and a
// BloomFilter of 8 partitions, then scales 4 → 6 → 4 with kubectl scale while an application
// writes and reads through the client Service. The BloomCluster's status shows the move to the new
// pods and the drain before the scale-in, each pod holds the partitions placed on it (no more than
// the bound), and at the end no acknowledged value is missing through any pod.
func TestPartitionedScaleOutAndIn(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamplesPatched(`- op: replace
  path: /spec/replicas
  value: 4
- op: add
  path: /spec/replication/factor
  value: 2`)
	n.apply(`apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: events
spec:
  clusterRef:
    name: example
  capacity: 400000
  falsePositiveRate: "0.001"
  partitions: 8
`)
	n.wait("condition=Ready", "bloomfilter/events")
	four, six := podNames(4), podNames(6)
	n.waitPlacement(four, "Stable")
	if got := n.jsonpath("bloomfilter/events", "{.status.partitions}"); got != "8" {
		t.Errorf("BloomFilter status.partitions %q, want 8", got)
	}
	requireOwnShare(t, n, four, 8)

	phases := n.watchPlacementPhases()
	traffic := n.startClientTraffic(t, "events", "while-scaling")
	traffic.w.waitAcked(t, 100)

	n.run("scale", "bloomcluster", "example", "--replicas=6")
	n.waitServedBy("events", six)
	n.waitPlacement(six, "Stable")
	traffic.w.waitAcked(t, 100)
	requireOwnShare(t, n, six, 8)
	requireFilterShowsItsOwners(t, n, "events", 2*8)

	n.run("scale", "bloomcluster", "example", "--replicas=4")
	n.wait("delete", "pod/example-4", "pod/example-5")
	n.waitServedBy("events", four)
	n.waitPlacement(four, "Stable")
	traffic.w.waitAcked(t, 100)
	traffic.halt(t)

	seen := phases.stop()
	t.Logf("placement phases seen: %s", strings.Join(seen, " → "))
	for _, want := range []string{"Moving", "Draining"} {
		if !slices.Contains(seen, want) {
			t.Errorf("the BloomCluster's status.placement.phase was never %s during the scaling (seen: %v)", want, seen)
		}
	}
	if got := n.jsonpath("bloomcluster/example", "{.status.placement.partitionsUnderReplicated}"); got != "0" {
		t.Errorf("status.placement.partitionsUnderReplicated %q after the scaling, want 0", got)
	}
	requireOwnShare(t, n, four, 8)
	requireFilterShowsItsOwners(t, n, "events", 2*8)
	requireEverywhere(t, "events", traffic.w.values(), n.apis(four...))
}

// requireFilterShowsItsOwners waits until the BloomFilter's status shows, per pod, the partitions
// it owns, copies of them in all, each pod holding those it owns.
func requireFilterShowsItsOwners(t *testing.T, n namespace, name string, copies int) {
	t.Helper()
	await.Until(t, waitTimeout, fmt.Sprintf("status.pods of bloomfilter/%s owning %d partitions in all and holding them", name, copies), func() (bool, string) {
		owned := n.jsonpath("bloomfilter/"+name, "{.status.pods[*].partitionsOwned}")
		held := n.jsonpath("bloomfilter/"+name, "{.status.pods[*].partitionsHeld}")
		sum := 0
		for field := range strings.FieldsSeq(owned) {
			v, _ := strconv.Atoi(field)
			sum += v
		}
		return sum == copies && owned == held, fmt.Sprintf("owned %q, held %q", owned, held)
	})
}

// requireOwnShare checks every pod's placement status: each owns some of the partitions, no more
// than the bound of R = 2 over the pods, and holds only those.
func requireOwnShare(t *testing.T, n namespace, pods []string, partitions int) {
	t.Helper()
	bound := placement.Bound(partitions, 2, len(pods))
	await.Until(t, waitTimeout, fmt.Sprintf("every pod of %v holds its share of the partitions", pods), func() (bool, string) {
		var wrong []string
		owned := 0
		for _, pod := range pods {
			status, data, err := n.internalAPI(pod).call(http.MethodGet, wire.PlacementStatusPath, nil)
			var st wire.PlacementStatus
			if err == nil && status == http.StatusOK {
				err = json.Unmarshal(data, &st)
			}
			switch {
			case err != nil || status != http.StatusOK:
				wrong = append(wrong, fmt.Sprintf("%s: %d %v", pod, status, err))
			case st.PartitionsOwned == 0 || st.PartitionsOwned > bound+1 || st.PartitionsHeld != st.PartitionsOwned || !st.CaughtUp:
				// +1: the sample's filter users, of one partition, may be on the pod too.
				wrong = append(wrong, fmt.Sprintf("%s: %+v", pod, st))
			}
			owned += st.PartitionsOwned
		}
		if owned != 2*(partitions+1) {
			wrong = append(wrong, fmt.Sprintf("%d partitions owned in all, want 2 × (%d + 1)", owned, partitions))
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
}

// phaseWatch records the phases status.placement goes through.
type phaseWatch struct {
	mu   sync.Mutex
	seen []string
	done chan struct{}
	wg   sync.WaitGroup
}

// watchPlacementPhases polls the BloomCluster's status.placement.phase until stop.
func (n namespace) watchPlacementPhases() *phaseWatch {
	w := &phaseWatch{done: make(chan struct{})}
	w.wg.Go(func() {
		for {
			select {
			case <-w.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			out, err := n.try("get", "bloomcluster", "example", "-o", "jsonpath={.status.placement.phase}")
			if err != nil || out == "" {
				continue
			}
			w.mu.Lock()
			if len(w.seen) == 0 || w.seen[len(w.seen)-1] != out {
				w.seen = append(w.seen, out)
			}
			w.mu.Unlock()
		}
	})
	return w
}

func (w *phaseWatch) stop() []string {
	close(w.done)
	w.wg.Wait()
	return w.seen
}
