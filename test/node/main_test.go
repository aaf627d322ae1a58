// Package node runs Bloomery as a user would on a real single-node Kubernetes cluster
// (hack/node.sh): the image imported into the node's containerd, the chart installed with helm,
// the pods run by the kubelet through containerd and runc, reached through kube-proxy's rules.
// make test-node builds the image and names its archive in BLOOMERY_IMAGE_ARCHIVE.
//
// The tests share one cluster, started by the first test that needs it and stopped by TestMain;
// each test sets up what it needs that an earlier one did not (install, BloomCluster), so that
// one of them runs alone with -run too.
package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/internal/testassets"
)

// The image under test, from the environment make test-node sets.
var (
	archive = os.Getenv("BLOOMERY_IMAGE_ARCHIVE") // the OCI archive of make image
	image   = os.Getenv("BLOOMERY_IMAGE")         // its name and tag, repository:tag
)

// needNode skips in -short, and otherwise fails when the image or a program is missing; without
// root it skips, saying so, unless CI is set.
func needNode(t *testing.T) {
	t.Helper()
	testassets.SkipInShort(t, "a Kubernetes node (root, containerd, runc, the Kubernetes binaries)")
	if os.Geteuid() != 0 {
		msg := fmt.Sprintf("needs root for a node (network namespaces, mounts, containers); running as uid %d", os.Geteuid())
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if archive == "" || image == "" || !strings.Contains(image, ":") {
		t.Fatal("BLOOMERY_IMAGE_ARCHIVE and BLOOMERY_IMAGE (repository:tag) are not set: run make test-node, which builds the image and sets them")
	}
	var missing []string
	for _, p := range []string{"containerd", "runc", "ctr", "buildah", "nsenter", "openssl", "iptables", helmPath()} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = append(missing, "/usr/lib/cni/bridge (containernetworking-plugins)")
	}
	if len(missing) > 0 {
		t.Fatalf("missing: %s (make node-deps installs the Debian packages, make helm helm)", strings.Join(missing, ", "))
	}
}

// helmPath is $HELM, or bin/helm of the repository (make helm).
func helmPath() string {
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	return filepath.Join(repoRoot, "bin", "helm")
}

// repoRoot is the repository's root, from this package's directory.
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..")
}()

func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopCluster(code != 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
