//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// victim is the pod TestDeletedPodCatchesUpFromItsPeers deletes; the writer goes through the
// others.
const victim = "example-1"

// TestDeletedPodCatchesUpFromItsPeers deletes one pod of three with kubectl while an application
// streams check-and-sets through the two others. The StatefulSet recreates the pod with a new UID
// and address; it recovers from its volume, catches up from its peers before its /readyz answers
// 200, and the BloomFilter goes not Ready, then Ready again. The recreated pod then holds every
// acknowledged value, those written while it was gone included, and so does every other pod.
func TestDeletedPodCatchesUpFromItsPeers(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	n.waitMembership(pods)
	before := n.apis(pods...)
	initial := before[0].addValues("users", "before-delete", 200)
	oldUID := n.jsonpath("pod/"+victim, "{.metadata.uid}")
	claimUID := n.jsonpath("pvc/data-"+victim, "{.metadata.uid}")
	filterConditions := n.watch("bloomfilter/users", conditionStatuses)
	podEvents := n.watchPods()

	w := startWriter(t, "users", "while-deleted", fixedTargets(before[0], before[2]))
	w.waitAcked(t, 50)
	deleted := time.Now()
	n.run("delete", "pod", victim) // waits until the pod is gone: drained and stopped
	t.Logf("pod %s deleted and stopped in %v", victim, time.Since(deleted).Round(time.Millisecond))

	after := n.awaitNewPod(podEvents, victim, oldUID)
	if after.base == before[1].base {
		t.Errorf("the recreated pod %s has the address of its predecessor, %s", victim, after.base)
	}
	readyz, said := after.waitReadyz()
	// Every value acknowledged before the new process started was acknowledged before the operator
	// could tell it its peers: the pod had it on its volume or pulled it in its catch-up, before
	// its /readyz turned 200.
	started := processStarted(t, n, victim)
	caughtUp := append(append([]string(nil), initial...), w.ackedIn(time.Time{}, started)...)
	after.requirePresent("users", "", caughtUp)
	t.Logf("pod %s moved from %s to %s; its /readyz answered 200 %v after the deletion (before: %s), holding the %d values acknowledged before it started",
		victim, before[1].base, after.base, readyz.Sub(deleted).Round(time.Millisecond), strings.Join(said, " | "), len(caughtUp))
	// The values acknowledged while the pod was out of service, and after, are checked below.
	gone := w.count(deleted, readyz)
	if gone == 0 {
		t.Errorf("no value was acknowledged while pod %s was out of service: %s", victim, w.summary())
	}

	n.wait("condition=Ready", "pod/"+victim)
	t.Logf("pod %s Ready %v after its deletion", victim, time.Since(deleted).Round(time.Millisecond))
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	await.Until(t, waitTimeout, "the BloomFilter goes not Ready (Progressing or Degraded) while the pod is replaced, then Ready", func() (bool, string) {
		return filterConditions.sawInOrder(startsWith("True"), notReadyButSaysWhy, startsWith("True")), compact(filterConditions.seen())
	})
	t.Logf("BloomFilter conditions (Ready Progressing Degraded reason): %s", compact(filterConditions.seen()))

	w.halt()
	t.Logf("writer: %s", w.summary())
	requireEverywhere(t, "users", append(initial, w.values()...), n.apis(pods...))
	if uid := n.jsonpath("pvc/data-"+victim, "{.metadata.uid}"); uid != claimUID {
		t.Errorf("the volume claim of pod %s was replaced (UID %s, was %s)", victim, uid, claimUID)
	}
	requireCaughtUpLog(t, n, victim)
	requireRecovered(t, n, victim, "users")
}

// TestKilledPodCatchesUpFromItsPeers kills the data-plane process of the home pod of the filter
// (the pod that decides its check-and-sets) with SIGKILL while an application streams sets
// through the two other pods (check-and-sets would be answered 503 code 13 while the home is
// down: no other pod serves them in its place). The agent restarts the process in place; it recovers from its volume and catches up from
// its peers before its /readyz answers 200, and the BloomCluster and the BloomFilter go not Ready,
// then Ready again. Under EverySecond it may have lost the last second of its own log, but every
// write was acknowledged by a quorum, so the survivors hold every acknowledged value and give it
// back.
func TestKilledPodCatchesUpFromItsPeers(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	n.waitMembership(pods)
	var home podAPI
	var others []podAPI
	for _, api := range n.apis(pods...) {
		if api.pod == homeOf("users", pods) {
			home = api
		} else {
			others = append(others, api)
		}
	}
	requireHome(t, "users", home, others[0])
	initial := home.addValues("users", "before-kill", 200)
	uid := n.jsonpath("pod/"+home.pod, "{.metadata.uid}")
	clusterReady := n.watch("bloomcluster/example", readyStatus)
	filterConditions := n.watch("bloomfilter/users", conditionStatuses)

	w := startSetWriter(t, "users", "while-killed", fixedTargets(others...))
	w.waitAcked(t, 50)
	killed := time.Now()
	killContainer(t, n, home.pod)
	// The restart is reported once the killed process is gone: a 200 from then on is the new one's.
	n.wait("jsonpath={.status.containerStatuses[0].restartCount}=1", "pod/"+home.pod)
	readyz, said := home.waitReadyz()
	started := processStarted(t, n, home.pod)
	caughtUp := append(append([]string(nil), initial...), w.ackedIn(time.Time{}, started)...)
	home.requirePresent("users", "", caughtUp)
	t.Logf("pod %s (the home of users) restarted %v after the kill; its /readyz answered 200 %v after the kill (before: %s), holding the %d values acknowledged before the restart, %d of them while it was down",
		home.pod, started.Sub(killed).Round(time.Millisecond), readyz.Sub(killed).Round(time.Millisecond), strings.Join(said, " | "), len(caughtUp), w.count(killed, started))
	// The values acknowledged while the pod was out of service, and after, are checked below.
	if w.count(killed, readyz) == 0 {
		t.Errorf("no value was acknowledged while pod %s was out of service: %s", home.pod, w.summary())
	}

	n.wait("condition=Ready", "pod/"+home.pod)
	t.Logf("pod %s Ready %v after the kill", home.pod, time.Since(killed).Round(time.Millisecond))
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	if got := n.jsonpath("pod/"+home.pod, "{.metadata.uid}"); got != uid {
		t.Errorf("the pod was replaced (UID %s, was %s): a killed process restarts in place", got, uid)
	}
	if code := n.jsonpath("pod/"+home.pod, "{.status.containerStatuses[0].lastState.terminated.exitCode}"); code != "137" {
		t.Errorf("lastState.terminated.exitCode = %q, want 137 (SIGKILL)", code)
	}
	await.Until(t, waitTimeout, "the BloomCluster goes not Ready while its pod restarts, then Ready", func() (bool, string) {
		return clusterReady.sawInOrder(startsWith("True"), startsWith("False"), startsWith("True")), compact(clusterReady.seen())
	})
	await.Until(t, waitTimeout, "the BloomFilter goes not Ready (Progressing or Degraded) while the pod restarts, then Ready", func() (bool, string) {
		return filterConditions.sawInOrder(startsWith("True"), notReadyButSaysWhy, startsWith("True")), compact(filterConditions.seen())
	})
	t.Logf("BloomCluster Ready: %s; BloomFilter conditions (Ready Progressing Degraded reason): %s", compact(clusterReady.seen()), compact(filterConditions.seen()))

	w.halt()
	t.Logf("writer: %s", w.summary())
	requireEverywhere(t, "users", append(initial, w.values()...), n.apis(pods...))
	requireCaughtUpLog(t, n, home.pod)
	requireRecovered(t, n, home.pod, "users")
}
