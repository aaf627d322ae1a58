package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/bloomery/bloomery/operator"
)

// No registry publishes Bloomery's image: a user builds it with `make docker-build` and loads it
// into the cluster. Every place that names the image by default must then name the same one, the
// chart's image.repository at its appVersion: the Makefile's IMG, the kustomize install, the
// operator's --dataplane-image of that version, and the commands the READMEs give.
func TestEveryDefaultNamesTheSameImage(t *testing.T) {
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string } `json:"image"`
	}
	var kustomization struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	for path, into := range map[string]any{
		"charts/bloomery/Chart.yaml":        &chart,
		"charts/bloomery/values.yaml":       &values,
		"config/manager/kustomization.yaml": &kustomization,
	} {
		if err := yaml.Unmarshal(read(path), into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if values.Image.Tag != "" || values.Image.Digest != "" {
		t.Errorf("the chart's image.tag %q and image.digest %q: want both empty, so that the tag is the appVersion", values.Image.Tag, values.Image.Digest)
	}
	image := values.Image.Repository + ":" + chart.AppVersion

	if len(kustomization.Images) != 1 || kustomization.Images[0].NewName+":"+kustomization.Images[0].NewTag != image {
		t.Errorf("config/manager/kustomization.yaml images %+v, want %s", kustomization.Images, image)
	}

	t.Setenv("DATAPLANE_IMAGE", "")
	if got := operator.NewCommand(chart.AppVersion).Flags().Lookup("dataplane-image").DefValue; got != image {
		t.Errorf("bloomery operator %s: --dataplane-image defaults to %s, want %s", chart.AppVersion, got, image)
	}

	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), makeBin, "--no-print-directory", "-n", "docker-build", "VERSION=test")
	cmd.Dir = root
	// An IMG or CHART_DIR from the environment would hide the defaults.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "IMG=") || strings.HasPrefix(kv, "CHART_DIR=")
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n docker-build: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " -t "+image+" ") {
		t.Errorf("make docker-build runs %q, want it to tag %s", strings.TrimSpace(string(out)), image)
	}

	// The READMEs tell how to build and load that image, and name no other tag of the repository.
	tagged := regexp.MustCompile(regexp.QuoteMeta(values.Image.Repository) + `:([A-Za-z0-9_.-]+)`)
	for _, path := range []string{"README.md", "charts/bloomery/README.md", "Dockerfile"} {
		text := string(read(path))
		for _, m := range tagged.FindAllString(text, -1) {
			if m != image {
				t.Errorf("%s names %s, want %s", path, m, image)
			}
		}
		if path == "Dockerfile" {
			continue
		}
		for _, want := range []string{"make docker-build", "kind load docker-image " + image} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", path, want)
			}
		}
	}
}
