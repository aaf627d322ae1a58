package controllers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/internal/await"
)

// The admission policy of config/admission has the API server create a BloomFilter with the
// finalizer the operator would otherwise write: the operator then has nothing to add.
func TestTheAdmissionPolicyCreatesBloomFiltersWithTheFinalizer(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	data, err := os.ReadFile(filepath.Join("..", "config", "admission", "filter_finalizer_policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var policy, binding *unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch obj.GetKind() {
		case "MutatingAdmissionPolicy":
			policy = obj
		case "MutatingAdmissionPolicyBinding":
			binding = obj
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("the file holds policy %v and binding %v, want both", policy, binding)
	}
	// Cluster-wide objects: named for this test, and bound to its namespace alone, so that the
	// other tests' filters are created as without the policy.
	name := "filter-finalizer-" + ns
	policy.SetName(name)
	binding.SetName(name)
	if err := unstructured.SetNestedField(binding.Object, name, "spec", "policyName"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(binding.Object, map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
	}, "spec", "matchResources"); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []*unstructured.Unstructured{policy, binding} {
		if err := k8s.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(t.Context(), obj) })
	}

	// The API server applies a policy once its informer holds it: filters created before get none.
	var tries int
	await.Until(t, 30*time.Second, "a BloomFilter created with the operator's finalizer", func() (bool, string) {
		tries++
		bf := &bloomeryv1alpha1.BloomFilter{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f-%d", tries), Namespace: ns},
			Spec: bloomeryv1alpha1.BloomFilterSpec{
				ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "c"}, Capacity: 1000, FalsePositiveRate: "0.01",
			},
		}
		if err := k8s.Create(t.Context(), bf); err != nil {
			return false, err.Error()
		}
		return slices.Equal(bf.Finalizers, []string{filterFinalizer}), fmt.Sprintf("created with finalizers %v", bf.Finalizers)
	})
}
