package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bloomery/bloomery/internal/testassets"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy code, the CRDs and the operator's RBAC
// role into a temporary directory and compares them with the committed files: a marker changed
// without `make generate manifests` fails here, not in a cluster.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	testassets.SkipInShort(t, "controller-gen")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gen := os.Getenv("CONTROLLER_GEN")
	if gen == "" {
		gen = filepath.Join(root, "bin", "controller-gen")
	}
	if _, err := os.Stat(gen); err != nil {
		t.Fatalf("controller-gen not found at %s: run `make controller-gen` (make test does)", gen)
	}
	out := t.TempDir()
	for _, args := range [][]string{
		{"object:headerFile=hack/boilerplate.go.txt", "paths=./api/...", "output:object:dir=" + filepath.Join(out, "object")},
		{"rbac:roleName=operator", "crd", "paths=./...", "output:crd:dir=" + filepath.Join(out, "crd"), "output:rbac:dir=" + filepath.Join(out, "rbac")},
	} {
		cmd := exec.CommandContext(t.Context(), gen, args...)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, msg)
		}
	}
	for generated, committed := range map[string]string{
		"object/zz_generated.deepcopy.go":    "api/v1alpha1/zz_generated.deepcopy.go",
		"crd/bloomery.io_bloomclusters.yaml": "config/crd/bases/bloomery.io_bloomclusters.yaml",
		"crd/bloomery.io_bloomfilters.yaml":  "config/crd/bases/bloomery.io_bloomfilters.yaml",
		"rbac/role.yaml":                     "config/rbac/role.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(out, generated))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate manifests` and commit the result", committed)
		}
	}
}
