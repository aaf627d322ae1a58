package image

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/config"
)

// The parts of an OCI archive these tests read (image-spec's index, manifest and config).
type (
	ociIndex struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	ociManifest struct {
		Config struct {
			Digest string `json:"digest"`
		} `json:"config"`
		Layers []struct {
			Digest    string `json:"digest"`
			MediaType string `json:"mediaType"`
		} `json:"layers"`
	}
	ociConfig struct {
		Config struct {
			User         string              `json:"User"`
			Entrypoint   []string            `json:"Entrypoint"`
			Cmd          []string            `json:"Cmd"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
			Labels       map[string]string   `json:"Labels"`
		} `json:"config"`
	}
)

// readArchive returns the files of the OCI archive at p, by name.
func readArchive(t *testing.T, p string) map[string][]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean(h.Name)] = b
	}
}

// blob returns the blob of digest ("sha256:...") of an archive's files, decoded as JSON into v
// when v is not nil.
func blob(t *testing.T, files map[string][]byte, digest string, v any) []byte {
	t.Helper()
	algo, hex, ok := strings.Cut(digest, ":")
	b, found := files[path.Join("blobs", algo, hex)]
	if !ok || !found {
		t.Fatalf("no blob %q in the archive", digest)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("blob %s: %v", digest, err)
		}
	}
	return b
}

// layerFile is one entry of an image's layers.
type layerFile struct {
	header *tar.Header
	body   []byte
}

// image reads the archive's one image: its config and the files of its layers, the later layers
// winning.
func image(t *testing.T) (ociConfig, map[string]layerFile) {
	t.Helper()
	files := readArchive(t, archive)
	var index ociIndex
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("the archive holds %d images, want 1", len(index.Manifests))
	}
	if ref := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != name {
		t.Errorf("the archive names its image %q, want %q", ref, name)
	}
	var manifest ociManifest
	blob(t, files, index.Manifests[0].Digest, &manifest)
	var cfg ociConfig
	blob(t, files, manifest.Config.Digest, &cfg)
	entries := map[string]layerFile{}
	for _, l := range manifest.Layers {
		var r io.Reader = strings.NewReader(string(blob(t, files, l.Digest, nil)))
		if strings.HasSuffix(l.MediaType, "+gzip") {
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			r = zr
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			entries["/"+strings.TrimSuffix(path.Clean(h.Name), "/")] = layerFile{h, body}
		}
	}
	return cfg, entries
}

// TestImageConfig checks what a user of the image relies on without opening it: the
// entrypoint, the user, the ports and the version label.
func TestImageConfig(t *testing.T) {
	needImage(t)
	cfg, _ := image(t)
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/bloomery"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q; want [/bloomery] and none (the chart and the operator set only args)", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot, which the chart's security contexts expect)", c.User)
	}
	if got := c.Labels["org.opencontainers.image.version"]; got != version {
		t.Errorf("version label %q, want %q", got, version)
	}
	got := slices.Sorted(maps.Keys(c.ExposedPorts))
	if want := exposedPorts(t); !slices.Equal(got, want) {
		t.Errorf("exposed ports %v, want %v", got, want)
	}
}

// exposedPorts returns the ports the image must expose ("8080/tcp"...), sorted: the data plane's
// defaults, the RESP port a BloomCluster defaults to, and the operator's probe and metrics
// ports. It checks on the way that both Dockerfiles name exactly these.
func exposedPorts(t *testing.T) []string {
	t.Helper()
	def := config.Default()
	ports := []int{def.Port, def.InternalPort, def.OpsPort, v1alpha1.DefaultRESPPort, operatorProbePort, operatorMetricsPort}
	want := make([]string, 0, len(ports))
	for _, p := range ports {
		want = append(want, fmt.Sprintf("%d/tcp", p))
	}
	slices.Sort(want)
	for _, file := range []string{"../../Dockerfile", "../../Dockerfile.scratch"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range regexp.MustCompile(`(?m)^EXPOSE (.*)$`).FindAllStringSubmatch(string(b), -1) {
			for p := range strings.FieldsSeq(m[1]) {
				got = append(got, p+"/tcp")
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s exposes %v, want %v", path.Base(file), got, want)
		}
	}
	return want
}

// The operator's default probe and metrics ports (operator/command.go's flags), which the chart
// sets too.
const (
	operatorProbePort   = 8081
	operatorMetricsPort = 8443
)

// TestImageFiles checks the files that distroless would bring and the binary.
func TestImageFiles(t *testing.T) {
	needImage(t)
	_, files := image(t)
	check := func(p string, mode os.FileMode, uid int) *layerFile {
		t.Helper()
		f, ok := files[p]
		if !ok {
			t.Errorf("no %s in the image", p)
			return nil
		}
		if got := f.header.FileInfo().Mode() & (os.ModePerm | os.ModeSticky); got != mode {
			t.Errorf("%s: mode %v, want %v", p, got, mode)
		}
		if f.header.Uid != uid || f.header.Gid != uid {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, f.header.Uid, f.header.Gid, uid, uid)
		}
		return &f
	}
	check("/bloomery", 0o755, 0)
	check("/tmp", 0o777|os.ModeSticky, 0)
	check("/home/nonroot", 0o755, 65532)
	if f := check("/etc/passwd", 0o644, 0); f != nil && !strings.Contains(string(f.body), "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user of uid 65532:\n%s", f.body)
	}
	if f := check("/etc/group", 0o644, 0); f != nil && !strings.Contains(string(f.body), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group of gid 65532:\n%s", f.body)
	}
	if f := check("/etc/ssl/certs/ca-certificates.crt", 0o644, 0); f != nil && strings.Count(string(f.body), "BEGIN CERTIFICATE") < 10 {
		t.Errorf("the CA bundle holds %d certificates", strings.Count(string(f.body), "BEGIN CERTIFICATE"))
	}
	for p, f := range files {
		if strings.HasPrefix(p, "/bin/") || strings.HasSuffix(p, "/sh") {
			t.Errorf("the image holds %s (%d bytes): no shell or tools expected", p, len(f.body))
		}
	}
}
