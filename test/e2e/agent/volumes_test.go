//go:build e2e

package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	if err := writeVolume(filepath.Join(dir, "vol"), map[string][]byte{"../outside": []byte("x")}, 0o644); err == nil {
		t.Error("a key path leaving the volume was written")
	}
	if err := writeVolume(filepath.Join(dir, "vol"), map[string][]byte{"sub/config.yaml": []byte("x")}, 0o644); err != nil {
		t.Errorf("a key path in a subdirectory: %v", err)
	}
}

// A Secret volume holds one file per key, with the volume's mode, as the kubelet writes it: the
// operator mounts the internal token so.
func TestSecretVolume(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "example-internal-token", Namespace: "ns"},
		Data:       map[string][]byte{"token": []byte("abc123"), "other": []byte("x")},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "example-0", Namespace: "ns"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
			Name:         "internal-token",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name, DefaultMode: new(int32(0o440))}},
		}}},
	}
	dirs, err := prepareVolumes(t.Context(), fake.NewClientset(secret), pod, podNetwork{}, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range secret.Data {
		path := filepath.Join(dirs["internal-token"], key)
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %q, %v; want %q", key, got, err, want)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o440 {
			t.Errorf("%s: mode %v, want 0440", key, mode)
		}
	}
}
