//go:build e2e

package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// retainedFilter stays on the pods when its BloomFilter is deleted.
const retainedFilter = `
apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: kept
spec:
  clusterRef:
    name: example
  capacity: 10000
  falsePositiveRate: "0.01"
  deletionPolicy: Retain
`

// TestDeletedFilterLeavesThePod deletes two BloomFilters: the one with the default deletionPolicy
// (Delete) is removed from the pod, the one with Retain stays, values included.
func TestDeletedFilterLeavesThePod(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	n.apply(retainedFilter)
	n.wait("condition=Ready", "bloomfilter/kept")
	api := n.api(samplePod)
	kept := api.addValues("kept", "kept", 10)

	n.run("delete", "bloomfilter", "users", "kept") // waits for the operator's finalizer
	if status, body := api.filter("users"); status != http.StatusNotFound {
		t.Errorf("GET users on the pod after its BloomFilter was deleted: %d %v, want 404", status, body)
	}
	if status, body := api.filter("kept"); status != http.StatusOK {
		t.Errorf("GET kept (deletionPolicy Retain) on the pod after its BloomFilter was deleted: %d %v, want 200", status, body)
	}
	api.requireAllPresent("kept", kept)
}

// TestDeletedClusterIsGarbageCollected deletes the BloomCluster: the garbage collector deletes
// its StatefulSet, Services, ConfigMap and PodDisruptionBudget, and with the StatefulSet its pod;
// the volume stays (storage.whenDeleted defaults to Retain). A BloomFilter of the deleted cluster
// says so, and can still be deleted.
func TestDeletedClusterIsGarbageCollected(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	api := n.api(samplePod)
	children := strings.Fields(n.run("get", "statefulsets,services,configmaps,poddisruptionbudgets",
		"-l", "app.kubernetes.io/instance=example", "-o", "name"))
	slices.Sort(children)
	want := []string{"configmap/example-config", "poddisruptionbudget.policy/example", "service/example", "service/example-headless", "statefulset.apps/example"}
	if !slices.Equal(children, want) {
		t.Fatalf("children of the BloomCluster: %v, want %v", children, want)
	}

	n.run("delete", "bloomcluster", "example")
	n.wait("delete", append(children, "pod/"+samplePod)...)
	if _, _, err := api.call(http.MethodGet, "/v1/ping", nil); err == nil {
		t.Errorf("the deleted pod's data plane still answers at %s", api.base)
	}
	if _, err := n.try("get", "persistentvolumeclaim", "data-"+samplePod); err != nil {
		t.Errorf("the pod's volume claim is gone, though storage.whenDeleted is Retain: %v", err)
	}

	n.wait(`jsonpath={.status.conditions[?(@.type=="Ready")].reason}=ClusterNotFound`, "bloomfilter/users")
	n.run("delete", "bloomfilter", "users", "--timeout=30s")
}
