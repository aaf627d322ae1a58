//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/internal/await"
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

// TestDeletedFilterLeavesEveryPod deletes two BloomFilters: the one with the default
// deletionPolicy (Delete) is removed from every pod, the one with Retain stays on every pod,
// values included.
func TestDeletedFilterLeavesEveryPod(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	n.apply(retainedFilter)
	n.wait("condition=Ready", "bloomfilter/kept")
	apis := n.apis(podNames(sampleReplicas)...)
	kept := apis[0].addValues("kept", "kept", 10)

	n.run("delete", "bloomfilter", "users", "kept")
	// Neither has a finalizer: the operator deletes the copies that carry the UID of users once it
	// is gone.
	await.Until(t, waitTimeout, "users gone from every pod", func() (bool, string) {
		for _, api := range apis {
			if status, body := api.filter("users"); status != http.StatusNotFound {
				return false, fmt.Sprintf("GET users on pod %s: %d %v", api.pod, status, body)
			}
		}
		return true, ""
	})
	for _, api := range apis {
		if status, body := api.filter("kept"); status != http.StatusOK {
			t.Errorf("GET kept (deletionPolicy Retain) on pod %s after its BloomFilter was deleted: %d %v, want 200", api.pod, status, body)
		}
	}
	requireEverywhere(t, "kept", kept, apis)
}

// TestDeletedClusterIsGarbageCollected deletes the BloomCluster: the garbage collector deletes
// its StatefulSet, Services, ConfigMap, token Secret and PodDisruptionBudget, and with the
// StatefulSet its pods;
// the volumes stay (storage.whenDeleted defaults to Retain). A BloomFilter of the deleted cluster
// says so, and can still be deleted.
func TestDeletedClusterIsGarbageCollected(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	apis := n.apis(pods...)
	children := strings.Fields(n.run("get", "statefulsets,services,configmaps,secrets,poddisruptionbudgets",
		"-l", "app.kubernetes.io/instance=example", "-o", "name"))
	slices.Sort(children)
	want := []string{"configmap/example-config", "poddisruptionbudget.policy/example", "secret/example-internal-token",
		"service/example", "service/example-headless", "statefulset.apps/example"}
	if !slices.Equal(children, want) {
		t.Fatalf("children of the BloomCluster: %v, want %v", children, want)
	}

	n.run("delete", "bloomcluster", "example")
	gone := slices.Clone(children)
	for _, pod := range pods {
		gone = append(gone, "pod/"+pod)
	}
	n.wait("delete", gone...)
	for _, api := range apis {
		if _, _, err := api.call(http.MethodGet, "/v1/ping", nil); err == nil {
			t.Errorf("the deleted pod %s's data plane still answers at %s", api.pod, api.base)
		}
		if _, err := n.try("get", "persistentvolumeclaim", "data-"+api.pod); err != nil {
			t.Errorf("the volume claim of pod %s is gone, though storage.whenDeleted is Retain: %v", api.pod, err)
		}
	}

	n.wait(`jsonpath={.status.conditions[?(@.type=="Ready")].reason}=ClusterNotFound`, "bloomfilter/users")
	n.run("delete", "bloomfilter", "users", "--timeout=30s")
}
