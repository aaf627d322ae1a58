package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The data-plane pods run the operator's image: `kustomize edit set image`, as `make
// build-installer` runs it, must reach DATAPLANE_IMAGE, the default of --dataplane-image.
func TestKustomizeDataPlaneImageFollowsTheOperatorImage(t *testing.T) {
	kustomize := tool(t, "KUSTOMIZE", "kustomize")
	config := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(config, os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	const image = "registry.example.com/bloomery:v9.9.9"
	run(t, filepath.Join(config, "manager"), kustomize, "edit", "set", "image", "bloomery="+image)
	deps := find(decode(t, run(t, config, kustomize, "build", "default")), "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	containers, _, _ := unstructured.NestedSlice(deps[0].Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	container := containers[0].(map[string]any)
	if container["image"] != image {
		t.Errorf("operator image %v, want %s", container["image"], image)
	}
	env, _, _ := unstructured.NestedSlice(container, "env")
	var got []any
	for _, e := range env {
		if e := e.(map[string]any); e["name"] == "DATAPLANE_IMAGE" {
			got = append(got, e["value"])
		}
	}
	if len(got) != 1 || got[0] != image {
		t.Errorf("DATAPLANE_IMAGE %v, want %s once", got, image)
	}
	for _, arg := range container["args"].([]any) {
		if s, _ := arg.(string); strings.HasPrefix(s, "--dataplane-image") {
			t.Errorf("the install passes %s, which overrides DATAPLANE_IMAGE", s)
		}
	}
}
