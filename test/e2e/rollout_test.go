//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// TestSettingChangeRollsThePod changes a data-plane setting of a one-pod BloomCluster (logSync
// from EverySecond to Always): the operator rewrites the configuration, the StatefulSet rolls the
// pod, the new pod runs with the new setting and keeps the values. Under Always, a value is on
// disk when it is acknowledged, so even a SIGKILL right after the write loses nothing: with one
// pod, no peer could have given it back.
func TestSettingChangeRollsThePod(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applyOnePodSamples()
	values := n.api(samplePod).addValues("users", "before-roll", 200)
	oldUID := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")
	oldRevision := n.jsonpath("pod/"+samplePod, "{.metadata.labels.controller-revision-hash}")
	progressing := n.watch("bloomcluster/example", `{.status.conditions[?(@.type=="Progressing")].status}{"\n"}`)

	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"persistence":{"logSync":"Always"}}}`)
	await.Until(t, waitTimeout, "the pod is replaced", func() (bool, string) {
		uid, err := n.try("get", "pod/"+samplePod, "-o", "jsonpath={.metadata.uid}")
		return err == nil && uid != "" && uid != oldUID, "UID " + uid
	})
	n.run("rollout", "status", "statefulset/example", "--timeout="+waitTimeout.String())
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	await.Until(t, waitTimeout, "the BloomCluster reports the rollout, then its end", func() (bool, string) {
		return progressing.sawInOrder(startsWith("True"), startsWith("False")), strings.Join(progressing.seen(), " | ")
	})
	if rev := n.jsonpath("pod/"+samplePod, "{.metadata.labels.controller-revision-hash}"); rev == oldRevision {
		t.Errorf("pod %s still runs revision %s", samplePod, rev)
	}
	if cfg := n.jsonpath("configmap/example-config", `{.data.config\.yaml}`); !strings.Contains(cfg, "logSync: always") {
		t.Errorf("ConfigMap example-config does not say logSync: always:\n%s", cfg)
	}
	uid := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")
	if log := podLog(t, n, samplePod, uid); !strings.Contains(log, `"logSync":"always"`) {
		t.Errorf("the new pod's data plane did not start with logSync always; its log:\n%s", log)
	}

	api := n.api(samplePod)
	api.requireAllPresent("users", values)
	unsynced := api.addValues("users", "just-before-kill", 100)
	killContainer(t, n, samplePod)
	n.wait("jsonpath={.status.containerStatuses[0].restartCount}=1", "pod/"+samplePod)
	n.wait("condition=Ready", "pod/"+samplePod)
	api = n.api(samplePod)
	api.requireAllPresent("users", values)
	api.requireAllPresent("users", unsynced)
}

// TestSettingChangeRollsThePodsOneAtATime changes a data-plane setting of the three-pod sample
// (logSync from EverySecond to Always) while an application streams check-and-sets through the
// client Service. The StatefulSet replaces the pods one at a time: at no moment, as `kubectl get
// pods --watch` shows it, is more than one pod not Ready, and the PodDisruptionBudget never counts
// fewer healthy pods than it requires. Each pod catches up before it is Ready, so no acknowledged
// value is lost: at the end every pod holds all of them.
//
// The application writes and reads through the client Service (startClientTraffic), and no
// request fails beyond the retries the README advises.
func TestSettingChangeRollsThePodsOneAtATime(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	initial := n.api(samplePod).addValues("users", "before-roll", 200)
	oldUIDs := n.podUIDs()
	podStates := n.watchPods()
	budget := n.watch("poddisruptionbudget/example", `{.status.currentHealthy} {.status.desiredHealthy}{"\n"}`)

	traffic := n.startClientTraffic(t, "users", "while-rolling")
	w := traffic.w
	w.waitAcked(t, 50)
	patched := time.Now()
	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"persistence":{"logSync":"Always"}}}`)
	await.Until(t, waitTimeout, "every pod is replaced", func() (bool, string) {
		uids := n.podUIDs()
		for _, pod := range pods {
			if uids[pod] == "" || uids[pod] == oldUIDs[pod] {
				return false, fmt.Sprintf("UIDs %v, were %v", uids, oldUIDs)
			}
		}
		return true, ""
	})
	n.run("rollout", "status", "statefulset/example", "--timeout="+waitTimeout.String())
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	t.Logf("the three pods rolled in %v", time.Since(patched).Round(time.Millisecond))
	traffic.halt(t)

	worst, timeline := mostNotReady(podStates.seen(), pods)
	t.Logf("pods as kubectl get pods --watch showed them (pods not Ready at that moment: event):\n%s", strings.Join(timeline, "\n"))
	if worst > 1 {
		t.Errorf("%d pods were not Ready at once during the roll, want at most 1", worst)
	}
	if deleted := strings.Count(strings.Join(timeline, "\n"), ": DELETED "); deleted != len(pods) {
		t.Errorf("the watch of the pods showed %d deletions during the roll, want %d", deleted, len(pods))
	}
	t.Logf("PodDisruptionBudget (currentHealthy desiredHealthy): %s", compact(budget.seen()))
	for _, line := range budget.seen() {
		var healthy, desired int
		if _, err := fmt.Sscan(line, &healthy, &desired); err == nil && healthy < desired {
			t.Errorf("the PodDisruptionBudget counted %d healthy pods, fewer than the %d it requires (its states: %s)",
				healthy, desired, compact(budget.seen()))
			break
		}
	}
	if cfg := n.jsonpath("configmap/example-config", `{.data.config\.yaml}`); !strings.Contains(cfg, "logSync: always") {
		t.Errorf("ConfigMap example-config does not say logSync: always:\n%s", cfg)
	}
	for pod, uid := range n.podUIDs() {
		if log := podLog(t, n, pod, uid); !strings.Contains(log, `"logSync":"always"`) {
			t.Errorf("the new pod %s's data plane did not start with logSync always; its log:\n%s", pod, log)
		}
	}
	requireEverywhere(t, "users", append(initial, w.values()...), n.apis(pods...))
}

// podUIDs returns the UID of each data-plane pod, by name.
func (n namespace) podUIDs() map[string]string {
	n.t.Helper()
	uids := map[string]string{}
	out := n.run("get", "pods", "-l", dataPlaneSelector, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}`)
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if name, uid, ok := strings.Cut(line, "="); ok {
			uids[name] = uid
		}
	}
	return uids
}

// mostNotReady replays the lines of a watchPods watcher and returns the most of pods that were
// not Ready at one moment (absent, being deleted, or without a True Ready condition), once every
// one of them had been seen, and the timeline of their changes.
func mostNotReady(lines, pods []string) (int, []string) {
	states := map[string]podEvent{}
	worst, listed := 0, false
	var timeline []string
	for _, line := range lines {
		e, ok := parsePodEvent(line)
		if !ok || !slices.Contains(pods, e.pod) {
			continue
		}
		if e.kind == "DELETED" {
			delete(states, e.pod)
		} else {
			states[e.pod] = e
		}
		notReady := 0
		for _, pod := range pods {
			if s, ok := states[pod]; !ok || s.ready != "True" || s.deleting != "" {
				notReady++
			}
		}
		if listed = listed || len(states) == len(pods); !listed {
			continue // the watch's initial listing
		}
		worst = max(worst, notReady)
		timeline = append(timeline, fmt.Sprintf("%d: %s", notReady, line))
	}
	return worst, timeline
}
