//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestScaleOutAndIn scales the sample BloomCluster from 3 pods to 5 and back to 3 with kubectl
// scale (the CRD's scale subresource), while an
// application writes and reads through the client Service (startClientTraffic): through the new
// pods too once they are ready, and no longer through the removed ones. The new pods catch up before
// their /readyz answers 200 and then hold every value acknowledged before the scale-out; the
// membership epoch grows at each change, the remaining pods' memberships drop the removed pods,
// and no acknowledged value is lost.
func TestScaleOutAndIn(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	three, five := podNames(3), podNames(5)
	epoch3 := n.waitMembership(three)
	stay := n.apis(three...)
	var initial []string
	for _, api := range stay {
		initial = append(initial, api.addValues("users", "before-scale-out-"+api.pod, 100)...)
	}
	podEvents := n.watchPods()
	traffic := n.startClientTraffic(t, "users", "while-scaling")
	w := traffic.w
	w.waitAcked(t, 50)

	scaled := time.Now()
	n.run("scale", "bloomcluster", "example", "--replicas=5")
	previous := append(append([]string(nil), initial...), w.ackedIn(time.Time{}, scaled)...)
	// Both new pods start at once (the StatefulSet's pod management is Parallel): follow each.
	newPods := five[3:]
	var wg sync.WaitGroup
	reports := make([]string, len(newPods))
	errs := make([]error, len(newPods))
	for i, pod := range newPods {
		api := n.awaitNewPod(podEvents, pod, "")
		wg.Go(func() { reports[i], errs[i] = newPodCaughtUp(api, previous, scaled) })
	}
	wg.Wait()
	for i := range newPods {
		if errs[i] != nil {
			t.Error(errs[i])
		} else {
			t.Log(reports[i])
		}
	}
	n.waitServedBy("users", five)
	t.Logf("BloomCluster and BloomFilter Ready on 5 pods %v after the scale-out", time.Since(scaled).Round(time.Millisecond))
	epoch5 := n.waitMembership(five)
	if epoch5 <= epoch3 {
		t.Errorf("membership epoch %d with 5 pods, not past the epoch of 3 pods (%d)", epoch5, epoch3)
	}

	// Values added through the pods about to be removed are kept by the others: each was
	// acknowledged by a quorum of five, so at least one of the three remaining pods holds it.
	var throughRemoved []string
	for _, pod := range newPods {
		throughRemoved = append(throughRemoved, n.api(pod).addValues("users", "through-"+pod, 100)...)
	}

	shrunk := time.Now()
	n.run("scale", "bloomcluster", "example", "--replicas=3")
	n.wait("delete", "pod/example-3", "pod/example-4")
	n.waitServedBy("users", three)
	t.Logf("BloomCluster and BloomFilter Ready on 3 pods %v after the scale-in", time.Since(shrunk).Round(time.Millisecond))
	epochBack := n.waitMembership(three)
	if epochBack <= epoch5 {
		t.Errorf("membership epoch %d after the scale-in, not past the epoch of 5 pods (%d)", epochBack, epoch5)
	}
	t.Logf("membership epochs: %d with 3 pods, %d with 5, %d with 3 again", epoch3, epoch5, epochBack)
	// The volumes of removed pods stay (storage.whenScaled defaults to Retain).
	for _, pod := range newPods {
		if _, err := n.try("get", "pvc", "data-"+pod); err != nil {
			t.Errorf("the volume claim of removed pod %s is gone, though storage.whenScaled is Retain: %v", pod, err)
		}
	}

	traffic.halt(t)
	requireEverywhere(t, "users", slices.Concat(initial, throughRemoved, w.values()), stay)
}

// newPodCaughtUp polls a new pod's /readyz and, as soon as it answers 200, checks its own copy for
// every value acknowledged before the scale-out. It runs beside the test's goroutine: it returns
// what it saw, or an error.
func newPodCaughtUp(api podAPI, previous []string, scaled time.Time) (string, error) {
	ready, said, err := api.pollReadyz()
	if err != nil {
		return "", err
	}
	missing, err := api.missing("users", previous, "")
	switch {
	case err != nil:
		return "", err
	case len(missing) > 0:
		return "", fmt.Errorf("new pod %s answered /readyz 200 lacking %d of the %d values acknowledged before the scale-out, such as %q",
			api.pod, len(missing), len(previous), missing[0])
	}
	return fmt.Sprintf("new pod %s answered /readyz 200 %v after the scale-out (before: %s), holding the %d values acknowledged before it",
		api.pod, ready.Sub(scaled).Round(time.Millisecond), strings.Join(said, " | "), len(previous)), nil
}
