// Package image tests the release image that `make image` writes (Dockerfile.scratch, an OCI
// archive): what it holds, read from the archive, and how it runs, in containers started with
// podman. make test-image builds the archive and names it in BLOOMERY_IMAGE_ARCHIVE.
package image

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/internal/testassets"
)

// The image under test, from the environment make test-image sets.
var (
	archive = os.Getenv("BLOOMERY_IMAGE_ARCHIVE") // the OCI archive
	name    = os.Getenv("BLOOMERY_IMAGE")         // the image's name and tag inside it
	version = os.Getenv("BLOOMERY_IMAGE_VERSION") // what `bloomery version` and the label say
)

// needImage skips in -short and otherwise fails when the archive is not named, or a program the
// test runs is missing: make test-image builds the one and make node-deps installs the others.
func needImage(t *testing.T, programs ...string) {
	t.Helper()
	testassets.SkipInShort(t, "the image archive (make image)")
	if archive == "" || name == "" || version == "" {
		t.Fatal("BLOOMERY_IMAGE_ARCHIVE, BLOOMERY_IMAGE and BLOOMERY_IMAGE_VERSION are not all set: run make test-image, which builds the image and sets them")
	}
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("the image archive: %v (make image writes it)", err)
	}
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s not on PATH (make node-deps installs them)", strings.Join(missing, ", "))
	}
	if len(programs) > 0 && os.Geteuid() != 0 {
		// The containers run with the uid the image names; a rootless podman would map it to
		// another, and the checks of the process's uid would not hold.
		msg := fmt.Sprintf("needs root to run containers with podman (running as uid %d)", os.Geteuid())
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}
