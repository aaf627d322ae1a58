//go:build e2e

package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The processes run on the host, so a pod's volumes are directories and a container's mount
// paths are rewritten to them wherever they appear in its command, arguments and environment.
//
// Persistent volume claims get a directory per claim (namespace, name and UID) that outlives the
// pod, which is what lets a restarted or recreated pod find its data. The claim's UID is part of
// the path so that a claim deleted and created again starts empty, as a new volume would. Claims
// of the agent's StorageClasses are bound and grown (provisioner.go); others stay Pending, which
// neither the StatefulSet controller nor the operator minds, so the agent only needs the claim to
// exist.
//
// ConfigMap, Secret and downward API volumes are written once, when the pod starts: the
// kubelet's later refresh of changed keys is not reproduced (the operator rolls pods when their
// configuration changes rather than relying on it).

// volumeDirs maps each volume of a pod to the directory that stands for it.
type volumeDirs map[string]string

// apiObjects is the objectReader of the API server.
type apiObjects struct{ client kubernetes.Interface }

func (o apiObjects) configMap(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	cm, err := o.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return data, nil
}

func (o apiObjects) secret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	s, err := o.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	return s.Data, nil
}

// prepareVolumes creates a directory for every volume of the pod under podDir, and one for every
// claim under claimsDir, and fills those whose content comes from the API.
func prepareVolumes(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, network podNetwork, podDir, claimsDir string) (volumeDirs, error) {
	objects := apiObjects{client: client}
	dirs := volumeDirs{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		var files map[string][]byte
		mode := os.FileMode(0o644) // the kubelet's default mode of ConfigMap and Secret files
		var err error
		switch {
		case v.PersistentVolumeClaim != nil:
			dir, err = claimDir(ctx, client, pod.Namespace, v.PersistentVolumeClaim.ClaimName, claimsDir)
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			var data map[string][]byte
			data, err = objects.configMap(ctx, pod.Namespace, v.ConfigMap.Name)
			if err != nil && apierrors.IsNotFound(err) && optional(v.ConfigMap.Optional) {
				data, err = nil, nil
			}
			if err == nil {
				files, err = selectKeys(data, v.ConfigMap.Items, optional(v.ConfigMap.Optional))
			}
			mode = fileMode(v.ConfigMap.DefaultMode, mode)
		case v.Secret != nil:
			var data map[string][]byte
			data, err = objects.secret(ctx, pod.Namespace, v.Secret.SecretName)
			if err != nil && apierrors.IsNotFound(err) && optional(v.Secret.Optional) {
				data, err = nil, nil
			}
			if err == nil {
				files, err = selectKeys(data, v.Secret.Items, optional(v.Secret.Optional))
			}
			// A token must not be readable by every user of the machine the tests run on.
			mode = fileMode(v.Secret.DefaultMode, mode)
		case v.DownwardAPI != nil:
			files, err = downwardAPIFiles(pod, v.DownwardAPI.Items, network)
		default:
			err = errors.New("only persistentVolumeClaim, emptyDir, configMap, secret and downwardAPI volumes are supported by the e2e agent")
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := writeVolume(dir, files, mode); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		dirs[v.Name] = dir
	}
	return dirs, nil
}

// claimDir is the directory of a claim, which must exist: the StatefulSet controller creates a
// pod's claims before the pod.
func claimDir(ctx context.Context, client kubernetes.Interface, namespace, name, claimsDir string) (string, error) {
	pvc, err := client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading PersistentVolumeClaim %s/%s: %w", namespace, name, err)
	}
	return filepath.Join(claimsDir, namespace, name+"-"+string(pvc.UID)), nil
}

// selectKeys picks the files of a ConfigMap or Secret volume: every key, or the listed items
// under their paths.
func selectKeys(data map[string][]byte, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	if len(items) == 0 {
		return data, nil
	}
	files := map[string][]byte{}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("key %q not found", item.Key)
		}
		files[item.Path] = v
	}
	return files, nil
}

func downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, network podNetwork) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, item := range items {
		if item.FieldRef == nil {
			return nil, fmt.Errorf("downwardAPI item %s: only fieldRef is supported by the e2e agent", item.Path)
		}
		var value string
		switch item.FieldRef.FieldPath {
		case "metadata.labels", "metadata.annotations":
			value = formatMap(pod.Labels)
			if item.FieldRef.FieldPath == "metadata.annotations" {
				value = formatMap(pod.Annotations)
			}
		default:
			var err error
			if value, err = podField(pod, item.FieldRef.FieldPath, network); err != nil {
				return nil, fmt.Errorf("downwardAPI item %s: %w", item.Path, err)
			}
		}
		files[item.Path] = []byte(value)
	}
	return files, nil
}

// formatMap writes labels or annotations as the kubelet does: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// fileMode is a volume's defaultMode, or def when it sets none.
func fileMode(defaultMode *int32, def os.FileMode) os.FileMode {
	if defaultMode == nil {
		return def
	}
	return os.FileMode(*defaultMode) & os.ModePerm
}

// writeVolume creates dir and writes files into it with mode; a file's path may not leave dir.
func writeVolume(dir string, files map[string][]byte, mode os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer func() { _ = root.Close() }() // read-only use of the handle; nothing to flush
	for name, content := range files {
		if parent := filepath.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("creating %s in %s: %w", parent, dir, err)
			}
		}
		if err := root.WriteFile(name, content, mode); err != nil {
			return fmt.Errorf("writing %s in %s: %w", name, dir, err)
		}
		// WriteFile's mode passes through the umask, and applies only to a new file.
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("writing %s in %s: %w", name, dir, err)
		}
	}
	return nil
}

// pathMapper rewrites container paths (a mount path or a path below one) to host paths.
type pathMapper struct {
	mounts []hostMount // longest container path first, so nested mounts win
}

type hostMount struct{ containerPath, hostPath string }

func newPathMapper(c *corev1.Container, dirs volumeDirs) (pathMapper, error) {
	var m pathMapper
	for _, vm := range c.VolumeMounts {
		dir, ok := dirs[vm.Name]
		if !ok {
			return m, fmt.Errorf("volume mount %s: the pod has no volume of that name", vm.Name)
		}
		host := dir
		if vm.SubPath != "" {
			host = filepath.Join(dir, filepath.Clean("/"+vm.SubPath))
			if err := os.MkdirAll(host, 0o755); err != nil {
				return m, fmt.Errorf("volume mount %s: %w", vm.Name, err)
			}
		}
		m.mounts = append(m.mounts, hostMount{containerPath: filepath.Clean(vm.MountPath), hostPath: host})
	}
	slices.SortFunc(m.mounts, func(a, b hostMount) int { return len(b.containerPath) - len(a.containerPath) })
	return m, nil
}

// path rewrites one value: a container path under a mount, or a --flag=path argument.
func (m pathMapper) path(value string) string {
	if flag, v, ok := strings.Cut(value, "="); ok && strings.HasPrefix(flag, "-") {
		return flag + "=" + m.path(v)
	}
	for _, mount := range m.mounts {
		if value == mount.containerPath {
			return mount.hostPath
		}
		if rest, ok := strings.CutPrefix(value, mount.containerPath+"/"); ok {
			return filepath.Join(mount.hostPath, rest)
		}
	}
	return value
}

// all rewrites every value.
func (m pathMapper) all(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = m.path(v)
	}
	return out
}
