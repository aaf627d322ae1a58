package testassets

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The version the tests look for is the one hack/envtest-assets.sh builds.
func TestKubernetesVersionIsTheScripts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "envtest-assets.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^K8S_VERSION=\$\{BLOOMERY_K8S_VERSION:-(\S+)\}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/envtest-assets.sh sets no K8S_VERSION=${BLOOMERY_K8S_VERSION:-...}")
	}
	if string(m[1]) != KubernetesVersion {
		t.Fatalf("hack/envtest-assets.sh builds Kubernetes %s, the tests look for %s", m[1], KubernetesVersion)
	}
}

func TestKubernetesDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("BLOOMERY_CACHE", cache)
	t.Setenv("BLOOMERY_K8S_VERSION", "")
	want := filepath.Join(cache, "k8s", KubernetesVersion)

	dir, err := KubernetesDir("etcd", "kube-apiserver")
	if dir != want || err == nil || !strings.Contains(err.Error(), "no etcd, kube-apiserver in "+want) {
		t.Fatalf("empty cache: %q, %v; want %s and an error naming both binaries", dir, err, want)
	}

	if err := os.MkdirAll(want, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(want, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if dir, err := KubernetesDir("etcd", "kube-apiserver"); dir != want || err != nil {
		t.Fatalf("complete cache: %q, %v; want %s", dir, err, want)
	}
	if _, err := KubernetesDir("etcd", "kubectl"); err == nil || !strings.Contains(err.Error(), "no kubectl in") {
		t.Fatalf("kubectl missing: %v; want an error naming it alone", err)
	}

	t.Setenv("BLOOMERY_K8S_VERSION", "v1.0.0")
	if dir, _ := KubernetesDir(); dir != filepath.Join(cache, "k8s", "v1.0.0") {
		t.Fatalf("BLOOMERY_K8S_VERSION=v1.0.0: %q", dir)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "/elsewhere")
	if dir, _ := KubernetesDir(); dir != "/elsewhere" {
		t.Fatalf("KUBEBUILDER_ASSETS=/elsewhere: %q, want it as it is", dir)
	}
}
