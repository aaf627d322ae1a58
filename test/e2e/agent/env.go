//go:build e2e

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// objectReader reads the ConfigMaps and Secrets that environment variables and volumes name.
// optional says whether a missing object or key is an error.
type objectReader interface {
	configMap(ctx context.Context, namespace, name string) (map[string][]byte, error)
	secret(ctx context.Context, namespace, name string) (map[string][]byte, error)
}

// podNetwork is what a pod's downward API can say about where it runs.
type podNetwork struct {
	podIP, hostIP netip.Addr
	nodeName      string
}

// containerEnv resolves a container's environment as the kubelet does: envFrom first, then env
// in order, later entries winning, each value expanded against the variables defined before it.
// It returns the variables in the order a process receives them.
func containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, network podNetwork, objects objectReader) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	for _, from := range c.EnvFrom {
		data, err := envFromSource(ctx, pod.Namespace, from, objects)
		if err != nil {
			return nil, nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		value, found, err := envValueFrom(ctx, pod, e, network, objects)
		if err != nil {
			return nil, nil, fmt.Errorf("environment variable %s: %w", e.Name, err)
		}
		if found {
			set(e.Name, value)
		}
	}
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env, vars, nil
}

func envFromSource(ctx context.Context, namespace string, from corev1.EnvFromSource, objects objectReader) (map[string][]byte, error) {
	switch {
	case from.ConfigMapRef != nil:
		data, err := objects.configMap(ctx, namespace, from.ConfigMapRef.Name)
		if err != nil && optional(from.ConfigMapRef.Optional) {
			return nil, nil
		}
		return data, err
	case from.SecretRef != nil:
		data, err := objects.secret(ctx, namespace, from.SecretRef.Name)
		if err != nil && optional(from.SecretRef.Optional) {
			return nil, nil
		}
		return data, err
	}
	return nil, fmt.Errorf("envFrom: unsupported source %+v", from)
}

// envValueFrom resolves one valueFrom; found is false for an optional key that is absent.
func envValueFrom(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar, network podNetwork, objects objectReader) (value string, found bool, err error) {
	src := e.ValueFrom
	switch {
	case src.FieldRef != nil:
		value, err := podField(pod, src.FieldRef.FieldPath, network)
		return value, err == nil, err
	case src.ConfigMapKeyRef != nil:
		return keyOf(objects.configMap(ctx, pod.Namespace, src.ConfigMapKeyRef.Name))(src.ConfigMapKeyRef.Key, optional(src.ConfigMapKeyRef.Optional))
	case src.SecretKeyRef != nil:
		return keyOf(objects.secret(ctx, pod.Namespace, src.SecretKeyRef.Name))(src.SecretKeyRef.Key, optional(src.SecretKeyRef.Optional))
	}
	return "", false, fmt.Errorf("unsupported valueFrom %+v: the e2e agent resolves fieldRef, configMapKeyRef and secretKeyRef", *src)
}

// keyOf turns an object read into a lookup of one key that honours optional.
func keyOf(data map[string][]byte, readErr error) func(key string, optional bool) (string, bool, error) {
	return func(key string, optional bool) (string, bool, error) {
		if readErr != nil {
			if optional {
				return "", false, nil
			}
			return "", false, readErr
		}
		v, ok := data[key]
		if !ok && !optional {
			return "", false, fmt.Errorf("key %q not found", key)
		}
		return string(v), ok, nil
	}
}

// podField answers the downward API's fieldRef paths.
func podField(pod *corev1.Pod, path string, network podNetwork) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return network.nodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return network.podIP.String(), nil
	case "status.hostIP", "status.hostIPs":
		return network.hostIP.String(), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if key, ok := subscript(path, prefix); ok {
			return m[key], nil
		}
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the e2e agent", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

func optional(b *bool) bool { return b != nil && *b }

// expand replaces $(VAR) by the value of VAR when it is defined and turns $$ into $, as the kubelet
// expands command, args and env values; a reference to an undefined variable stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
