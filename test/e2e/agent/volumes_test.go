//go:build e2e

package agent

import (
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPathMapper(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "config", MountPath: "/etc/bloomery"},
		{Name: "certs", MountPath: "/etc/bloomery/tls"},
	}}
	dirs := volumeDirs{"data": "/host/claims/data-0", "config": "/host/pod/config", "certs": "/host/pod/certs"}
	m, err := newPathMapper(c, dirs)
	if err != nil {
		t.Fatal(err)
	}
	got := m.all([]string{"dataplane", "-c", "/etc/bloomery/config.yaml", "--data-dir", "/data", "--cert=/etc/bloomery/tls/tls.crt",
		"/database", "/data/sub/dir", "relative/data", "--flag=value"})
	want := []string{"dataplane", "-c", "/host/pod/config/config.yaml", "--data-dir", "/host/claims/data-0", "--cert=/host/pod/certs/tls.crt",
		"/database", "/host/claims/data-0/sub/dir", "relative/data", "--flag=value"}
	if !slices.Equal(got, want) {
		t.Errorf("mapped\n %q\nwant\n %q", got, want)
	}

	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "nowhere", MountPath: "/x"})
	if _, err := newPathMapper(c, dirs); err == nil {
		t.Error("a mount of a volume the pod does not have was accepted")
	}
}

func TestSubPathStaysInsideItsVolume(t *testing.T) {
	dir := t.TempDir()
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "../../escape"}}}
	m, err := newPathMapper(c, volumeDirs{"data": dir})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.path("/data"), filepath.Join(dir, "escape"); got != want {
		t.Errorf("subPath ../../escape maps /data to %s, want %s", got, want)
	}
}

func TestWriteVolumeRefusesPathsOutsideIt(t *testing.T) {
	dir := t.TempDir()
	if err := writeVolume(filepath.Join(dir, "vol"), map[string][]byte{"../outside": []byte("x")}); err == nil {
		t.Error("a key path leaving the volume was written")
	}
	if err := writeVolume(filepath.Join(dir, "vol"), map[string][]byte{"sub/config.yaml": []byte("x")}); err != nil {
		t.Errorf("a key path in a subdirectory: %v", err)
	}
}
