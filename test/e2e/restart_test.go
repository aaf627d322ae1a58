//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// everySecondSyncBound is how long after its acknowledgement a write is on disk under the
// sample's logSync: EverySecond (the log is fsynced once a second): the time is the guarantee
// under test, so the tests wait it out rather than for a condition.
const everySecondSyncBound = 2 * time.Second

// The tests of this file run a one-pod cluster: what the pod's volume keeps is all there is, no
// peer brings a lost value back. catchup_test.go has the same disruptions with three pods.

// TestDeletedPodRecoversFromItsVolume deletes the pod with kubectl: the StatefulSet recreates
// it, the new pod recovers from its volume, the filter's status goes not Ready and back, and
// every acknowledged value is still there (a graceful stop writes a final snapshot).
func TestDeletedPodRecoversFromItsVolume(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applyOnePodSamples()
	before := n.api(samplePod)
	values := before.addValues("users", "before-delete", 200)
	oldUID := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")
	filterConditions := n.watch("bloomfilter/users", conditionStatuses)

	n.run("delete", "pod", samplePod) // waits until the pod is gone: stopped within its grace period
	n.wait("create", "pod/"+samplePod)
	if uid := n.jsonpath("pod/"+samplePod, "{.metadata.uid}"); uid == oldUID {
		t.Fatalf("pod %s still has UID %s after its deletion", samplePod, uid)
	}
	n.wait("condition=Ready", "pod/"+samplePod)
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	await.Until(t, waitTimeout, "the BloomFilter goes not Ready (Progressing or Degraded) while its pod is replaced, then Ready", func() (bool, string) {
		return filterConditions.sawInOrder(startsWith("True"), notReadyButSaysWhy, startsWith("True")), strings.Join(filterConditions.seen(), " | ")
	})

	after := n.api(samplePod)
	t.Logf("pod %s moved from %s to %s", samplePod, before.base, after.base)
	after.requireAllPresent("users", values)
	requireRecovered(t, n, samplePod, "users")
}

// TestForceDeletedPodWaitsForItsPredecessor force-deletes the pod (kubectl delete --force
// --grace-period=0): the pod object goes at once and the StatefulSet creates its successor while
// the old process still runs on the node, as a kubelet gives it SIGTERM and 2 s before SIGKILL.
// The successor's data plane cannot take its volume's lock until the old one has exited,
// restarts until it can, and then recovers every value that reached the log: under EverySecond,
// all those acknowledged before the force delete, since the log is flushed during those 2 s.
//
// Whether the successor starts within those 2 s is a race: on a loaded machine starting it can
// take longer, and it then finds the volume free. Every force delete must lose nothing; the test
// deletes again, up to forceDeletes times, until one successor has found the volume locked.
func TestForceDeletedPodWaitsForItsPredecessor(t *testing.T) {
	t.Parallel()
	const forceDeletes = 3
	n := newNamespace(t)
	n.applyOnePodSamples()
	var values []string
	for attempt := 1; attempt <= forceDeletes; attempt++ {
		values = append(values, n.api(samplePod).addValues("users", fmt.Sprintf("before-force-delete-%d", attempt), 200)...)
		oldUID := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")

		n.run("delete", "pod", samplePod, "--force", "--grace-period=0")
		n.wait("create", "pod/"+samplePod)
		if uid := n.jsonpath("pod/"+samplePod, "{.metadata.uid}"); uid == oldUID {
			t.Fatalf("pod %s still has UID %s after its deletion", samplePod, uid)
		}
		n.wait("condition=Ready", "pod/"+samplePod)
		n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
		n.api(samplePod).requireAllPresent("users", values)
		requireRecovered(t, n, samplePod, "users")

		restarts := n.jsonpath("pod/"+samplePod, "{.status.containerStatuses[0].restartCount}")
		if restarts == "0" {
			t.Logf("force delete %d: the successor started after its predecessor had exited", attempt)
			continue
		}
		// The old process lived on for 2 s: its successor, started at once, found the volume locked.
		if exitCode := n.jsonpath("pod/"+samplePod, "{.status.containerStatuses[0].lastState.terminated.exitCode}"); exitCode != "1" {
			t.Fatalf("the successor restarted %s times, last exit code %q; want exit 1 while the volume was locked", restarts, exitCode)
		}
		t.Logf("force delete %d: the successor found the volume locked and restarted %s times", attempt, restarts)
		return
	}
	t.Errorf("in %d force deletes no successor found the volume locked by its predecessor", forceDeletes)
}

// TestKilledProcessIsRestarted kills the data plane with SIGKILL: the pod's container restarts in
// place, recovers its snapshot and log, and keeps every value acknowledged before the log's last
// fsync.
func TestKilledProcessIsRestarted(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applyOnePodSamples()
	api := n.api(samplePod)
	values := api.addValues("users", "before-kill", 200)
	uid := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")
	clusterReady := n.watch("bloomcluster/example", readyStatus)
	filterReady := n.watch("bloomfilter/users", readyStatus)
	time.Sleep(everySecondSyncBound)

	killContainer(t, n, samplePod)
	n.wait("jsonpath={.status.containerStatuses[0].restartCount}=1", "pod/"+samplePod)
	n.wait("condition=Ready", "pod/"+samplePod)
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	if got := n.jsonpath("pod/"+samplePod, "{.metadata.uid}"); got != uid {
		t.Errorf("the pod was replaced (UID %s, was %s): a killed process restarts in place", got, uid)
	}
	if reason := n.jsonpath("pod/"+samplePod, "{.status.containerStatuses[0].lastState.terminated.exitCode}"); reason != "137" {
		t.Errorf("lastState.terminated.exitCode = %q, want 137 (SIGKILL)", reason)
	}
	await.Until(t, waitTimeout, "the BloomCluster goes not Ready while its pod restarts, then Ready", func() (bool, string) {
		return clusterReady.sawInOrder(startsWith("True"), startsWith("False"), startsWith("True")), strings.Join(clusterReady.seen(), " | ")
	})
	t.Logf("BloomFilter Ready while the process restarted: %s", strings.Join(filterReady.seen(), " | "))

	api = n.api(samplePod)
	api.requireAllPresent("users", values)
	requireRecovered(t, n, samplePod, "users")
}
