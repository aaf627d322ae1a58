// Package testassets finds, for tests, what they take from outside the module, and says alike
// when a test goes without it: in -short a test skips ("needs X, which -short leaves out"), and
// otherwise it fails, so that CI cannot pass by not running what it was meant to run.
//
// The Kubernetes test binaries (etcd, kube-apiserver, kube-controller-manager, kubectl) are built
// by hack/envtest-assets.sh into a cache outside the tree; every test that starts an API server
// finds them here.
package testassets

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// KubernetesVersion is the Kubernetes that hack/envtest-assets.sh builds by default (its
// K8S_VERSION); a test checks that the two agree.
const KubernetesVersion = "v1.37.2"

// SkipInShort skips the test in -short, which leaves out what needs more than Go and a C
// compiler: what names that need ("an API server", "helm").
func SkipInShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s, which -short leaves out", what)
	}
}

// KubernetesDir returns the directory of the Kubernetes test binaries, and an error when one of
// bins is not in it. The directory is $KUBEBUILDER_ASSETS when set (make sets it), or else where
// hack/envtest-assets.sh builds them: ${BLOOMERY_CACHE:-~/.cache/bloomery}/k8s/<version>, the
// version being $BLOOMERY_K8S_VERSION or KubernetesVersion, as for the script.
func KubernetesDir(bins ...string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	hint := "KUBEBUILDER_ASSETS names it; unset, the tests look where `make envtest-assets` builds them"
	if dir == "" {
		hint = "run `make envtest-assets`, which builds them there once"
		cache := os.Getenv("BLOOMERY_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("finding the Kubernetes test binaries: %w (set KUBEBUILDER_ASSETS or BLOOMERY_CACHE)", err)
			}
			cache = filepath.Join(home, ".cache", "bloomery")
		}
		version := os.Getenv("BLOOMERY_K8S_VERSION")
		if version == "" {
			version = KubernetesVersion
		}
		dir = filepath.Join(cache, "k8s", version)
	}
	var missing []string
	for _, bin := range bins {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return dir, fmt.Errorf("no %s in %s: %s", strings.Join(missing, ", "), dir, hint)
	}
	return dir, nil
}

// Kubernetes returns the directory of etcd and kube-apiserver, for an envtest.Environment's
// BinaryAssetsDirectory. It skips the test in -short and fails it when they are missing.
func Kubernetes(t testing.TB) string {
	t.Helper()
	SkipInShort(t, "an API server (etcd and kube-apiserver)")
	dir, err := KubernetesDir("etcd", "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
