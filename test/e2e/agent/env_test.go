//go:build e2e

package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_IP": "127.0.1.7", "EMPTY": ""}
	for in, want := range map[string]string{
		"--advertise=$(POD_IP):8080": "--advertise=127.0.1.7:8080",
		"$(POD_IP)$(POD_IP)":         "127.0.1.7127.0.1.7",
		"$(UNDEFINED)":               "$(UNDEFINED)",
		"$$(POD_IP)":                 "$(POD_IP)",
		"[$(EMPTY)]":                 "[]",
		"cost: 5$":                   "cost: 5$",
		"$(unterminated":             "$(unterminated",
		"$x":                         "$x",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeObjects serves one ConfigMap, "settings", and no Secret.
type fakeObjects struct{}

func (fakeObjects) configMap(_ context.Context, _, name string) (map[string][]byte, error) {
	if name != "settings" {
		return nil, errors.New("not found")
	}
	return map[string][]byte{"level": []byte("debug"), "mode": []byte("fast")}, nil
}

func (fakeObjects) secret(context.Context, string, string) (map[string][]byte, error) {
	return nil, errors.New("not found")
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "example-0", Namespace: "ns", Labels: map[string]string{"app": "bloomery"}},
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: field("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
			{Name: "URL", Value: "http://$(POD_IP):8080/$(POD_NAME)"},
			{Name: "CFG_MODE", Value: "slow"}, // env wins over envFrom
			{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: new(true)}}},
		},
	}
	network := podNetwork{podIP: netip.MustParseAddr("127.0.1.7"), hostIP: hostIP, nodeName: "node"}
	env, _, err := containerEnv(t.Context(), pod, c, network, fakeObjects{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CFG_level=debug", "CFG_mode=fast", "POD_NAME=example-0", "POD_NAMESPACE=ns", "POD_IP=127.0.1.7",
		"APP=bloomery", "URL=http://127.0.1.7:8080/example-0", "CFG_MODE=slow"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %q\nwant  %q", env, want)
	}

	c.Env = append(c.Env, corev1.EnvVar{Name: "LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}})
	if _, _, err := containerEnv(t.Context(), pod, c, network, fakeObjects{}); err == nil {
		t.Error("a resourceFieldRef, which the agent does not resolve, was accepted")
	}
}
