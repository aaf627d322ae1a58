//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/e2e/agent"
)

// TestVolumesGrow raises spec.storage.size of a cluster whose StorageClass allows expansion: the
// operator patches each pod's claim, the node agent (standing for the storage driver) expands
// each volume, and the StatefulSet is made anew with the larger claim template (its template is
// immutable) without restarting a pod. A smaller size afterwards is refused with a condition and
// changes nothing.
func TestVolumesGrow(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	class := n.storageClass("expandable", true)
	n.applySamplesPatched(storageClassPatch(class))
	pods := podNames(sampleReplicas)
	for _, pod := range pods {
		n.wait("jsonpath={.status.capacity.storage}=1Gi", "pvc/data-"+pod)
	}
	values := n.api(samplePod).addValues("users", "before-growth", 100)
	podUIDs := n.podUIDs()
	statefulSet := n.jsonpath("statefulset/example", "{.metadata.uid}")

	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"storage":{"size":"2Gi"}}}`)
	for _, pod := range pods {
		n.wait("jsonpath={.status.capacity.storage}=2Gi", "pvc/data-"+pod)
	}
	await.Until(t, waitTimeout, "the StatefulSet is made anew with a claim template of 2Gi", func() (bool, string) {
		got := n.jsonpath("statefulset/example", `{.metadata.uid} {.spec.volumeClaimTemplates[0].spec.resources.requests.storage}`)
		return got != statefulSet+" 1Gi" && strings.HasSuffix(got, " 2Gi"), got
	})
	await.Until(t, waitTimeout, "the cluster reports its volumes at size, Ready and not Degraded", func() (bool, string) {
		got := n.jsonpath("bloomcluster/example", `{.status.conditions[?(@.type=="VolumesResizing")].reason} `+
			`{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Degraded")].status}`)
		return got == "AtRequestedSize True False", got
	})
	if after := n.podUIDs(); fmt.Sprint(after) != fmt.Sprint(podUIDs) {
		t.Errorf("pods were replaced while the volumes grew: UIDs %v, were %v", after, podUIDs)
	}
	if restarts := n.jsonpath("pods", `{.items[*].status.containerStatuses[0].restartCount}`); restarts != "0 0 0" {
		t.Errorf("containers restarted while the volumes grew: restart counts %s", restarts)
	}
	requireEverywhere(t, "users", values, n.apis(pods...))

	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"storage":{"size":"1Gi"}}}`)
	await.Until(t, waitTimeout, "the smaller size is refused", func() (bool, string) {
		got := n.jsonpath("bloomcluster/example", `{.status.conditions[?(@.type=="Degraded")].reason}: {.status.conditions[?(@.type=="Degraded")].message}`)
		return strings.HasPrefix(got, "VolumeShrinkRefused: ") && strings.Contains(got, "cannot shrink"), got
	})
	for _, pod := range pods {
		if got := n.jsonpath("pvc/data-"+pod, "{.spec.resources.requests.storage} {.status.capacity.storage}"); got != "2Gi 2Gi" {
			t.Errorf("claim data-%s after the refused shrink: request and capacity %s, want 2Gi 2Gi", pod, got)
		}
	}
}

// TestVolumesOfAFixedClassDoNotGrow raises spec.storage.size of a cluster whose StorageClass does
// not allow expansion: the operator says so in a condition naming the class, and leaves the
// claims and the StatefulSet as they are.
func TestVolumesOfAFixedClassDoNotGrow(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	class := n.storageClass("fixed", false)
	n.applySamplesPatched(onePodPatch + "\n" + storageClassPatch(class))
	n.wait("jsonpath={.status.capacity.storage}=1Gi", "pvc/data-"+samplePod)
	statefulSet := n.jsonpath("statefulset/example", "{.metadata.uid}")

	n.run("patch", "bloomcluster", "example", "--type=merge", "-p", `{"spec":{"storage":{"size":"2Gi"}}}`)
	await.Until(t, waitTimeout, "the growth is refused", func() (bool, string) {
		got := n.jsonpath("bloomcluster/example", `{.status.conditions[?(@.type=="Degraded")].reason}: {.status.conditions[?(@.type=="Degraded")].message}`)
		return strings.HasPrefix(got, "VolumeExpansionNotAllowed: ") && strings.Contains(got, fmt.Sprintf("StorageClass %q does not allow volume expansion", class)), got
	})
	if got := n.jsonpath("pvc/data-"+samplePod, "{.spec.resources.requests.storage}"); got != "1Gi" {
		t.Errorf("the claim requests %s after the refused growth, want 1Gi", got)
	}
	if got := n.jsonpath("statefulset/example", "{.metadata.uid}"); got != statefulSet {
		t.Errorf("the StatefulSet was made anew (UID %s, was %s) though its volumes cannot grow", got, statefulSet)
	}
}

// storageClass makes a StorageClass of the node agent's provisioner for this test, deleted when it
// ends, and returns its name.
func (n namespace) storageClass(kind string, expandable bool) string {
	n.t.Helper()
	name := n.name + "-" + kind
	n.apply(fmt.Sprintf(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %s
provisioner: %s
allowVolumeExpansion: %t
`, name, agent.Provisioner, expandable))
	n.t.Cleanup(func() {
		if _, err := n.try("delete", "storageclass", name, "--wait=false"); err != nil {
			n.t.Logf("deleting StorageClass %s: %v", name, err)
		}
	})
	return name
}

// storageClassPatch sets the sample BloomCluster's storage class.
func storageClassPatch(class string) string {
	return `- op: add
  path: /spec/storage/storageClassName
  value: ` + class
}
