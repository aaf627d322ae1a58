//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// TestSettingChangeRollsThePod changes a data-plane setting of the BloomCluster (logSync from
// EverySecond to Always): the operator rewrites the configuration, the StatefulSet rolls the pod,
// the new pod runs with the new setting and keeps the values. Under Always, a value is on disk
// when it is acknowledged, so even a SIGKILL right after the write loses nothing.
func TestSettingChangeRollsThePod(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	values := n.api(samplePod).addValues("users", "before-roll", 200)
	oldUID := n.jsonpath("pod/"+samplePod, "{.metadata.uid}")
	oldRevision := n.jsonpath("pod/"+samplePod, "{.metadata.labels.controller-revision-hash}")
	progressing := n.watch("bloomcluster/example", `{.status.conditions[?(@.type=="Progressing")].status}{"\n"}`)

	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"persistence":{"logSync":"Always"}}}`)
	eventually(t, "the pod is replaced", func() (bool, string) {
		uid, err := n.try("get", "pod/"+samplePod, "-o", "jsonpath={.metadata.uid}")
		return err == nil && uid != "" && uid != oldUID, "UID " + uid
	})
	n.run("rollout", "status", "statefulset/example", "--timeout="+waitTimeout.String())
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	eventually(t, "the BloomCluster reports the rollout, then its end", func() (bool, string) {
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
