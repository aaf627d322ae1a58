package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// respContainerPort is the data-plane container's port named resp; 0 without one.
func respContainerPort(sts *appsv1.StatefulSet) int32 {
	for _, p := range sts.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "resp" {
			return p.ContainerPort
		}
	}
	return 0
}

// respServicePort is the client Service's port named resp, as "port->target"; "" without one.
func respServicePort(svc *corev1.Service) string {
	for _, p := range svc.Spec.Ports {
		if p.Name == "resp" {
			return fmt.Sprintf("%d->%s", p.Port, p.TargetPort.String())
		}
	}
	return ""
}

// clientRulePorts are the ports of the NetworkPolicy's first ingress rule, the client port's.
func clientRulePorts(p *networkingv1.NetworkPolicy) []string {
	var ports []string
	for _, port := range p.Spec.Ingress[0].Ports {
		ports = append(ports, port.Port.String())
	}
	return ports
}

// By default the RESP port is open on 6379: on the container, the client Service, the client
// port's NetworkPolicy rule and in config.yaml. Another port moves all four; disabled, none has it.
func TestRESPPortFollowsTheSpec(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startPolicyReconciler(t, ns)
	cluster := createBloomCluster(t, ns, "r", nil)

	want := func(port int32) {
		t.Helper()
		waitFor(t, &appsv1.StatefulSet{}, ns, "r", func(s *appsv1.StatefulSet) (bool, string) {
			return respContainerPort(s) == port, fmt.Sprintf("resp container port %d", respContainerPort(s))
		})
		wantSvc := ""
		if port != 0 {
			wantSvc = fmt.Sprintf("%d->resp", port)
		}
		waitFor(t, &corev1.Service{}, ns, "r", func(s *corev1.Service) (bool, string) {
			return respServicePort(s) == wantSvc, fmt.Sprintf("client Service ports %+v", s.Spec.Ports)
		})
		wantRule := []string{"8080"}
		if port != 0 {
			wantRule = append(wantRule, fmt.Sprint(port))
		}
		waitFor(t, &networkingv1.NetworkPolicy{}, ns, "r", func(p *networkingv1.NetworkPolicy) (bool, string) {
			return slices.Equal(clientRulePorts(p), wantRule), fmt.Sprintf("client rule ports %v", clientRulePorts(p))
		})
		waitFor(t, &corev1.ConfigMap{}, ns, "r-config", func(cm *corev1.ConfigMap) (bool, string) {
			config := cm.Data["config.yaml"]
			has := strings.Contains(config, "respPort:")
			if port == 0 {
				return !has, config
			}
			return strings.Contains(config, fmt.Sprintf("respPort: %d\n", port)) && !strings.Contains(config, "respPasswordFile"), config
		})
	}
	want(6379)
	var stored bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "r"}, &stored); err != nil {
		t.Fatal(err)
	}
	if r := stored.Spec.RESP; r.Enabled == nil || !*r.Enabled || r.Port == nil || *r.Port != 6379 || r.PasswordSecret != nil {
		t.Errorf("spec.resp defaulted to %+v, want enabled on 6379 without a password", r)
	}

	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.RESP.Port = new(int32(16379)) })
	want(16379)
	modify(t, cluster, func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.RESP.Enabled = new(false) })
	want(0)
}

// The schema keeps the port in range and off the data plane's other ports.
func TestRESPSchemaRejectsInvalidPorts(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	for i, tt := range []struct {
		mutate  func(*bloomeryv1alpha1.BloomCluster)
		message string
	}{
		{func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.RESP.Port = new(int32(0)) }, "spec.resp.port in body should be greater than or equal to 1"},
		{func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.RESP.Port = new(int32(65536)) }, "spec.resp.port in body should be less than or equal to 65535"},
		{func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.RESP.Port = new(int32(8090)) }, "port must not be one of the data plane's other ports"},
		{func(c *bloomeryv1alpha1.BloomCluster) {
			c.Spec.RESP.PasswordSecret = &bloomeryv1alpha1.RESPPasswordSecret{Name: "Not_A_Name"}
		}, "spec.resp.passwordSecret.name in body should match"},
	} {
		c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Namespace: ns}}
		tt.mutate(c)
		expectRejected(t, tt.message, k8s.Create(t.Context(), c), tt.message)
	}
}

// createPasswordSecret makes the user's Secret, without the operator's labels.
func createPasswordSecret(t *testing.T, ns, name, key, password string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{key: []byte(password)}}
	if err := k8s.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// spec.resp.passwordSecret: the user's Secret, which carries no label, is mounted read-only with
// its key as the file config.yaml names, and an HMAC of the password in the pod template rolls
// the pods when the password changes.
func TestRESPPasswordSecretIsMountedAndRollsThePods(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	secret := createPasswordSecret(t, ns, "redis-auth", "pw", "first-password\n")
	startClusterReconciler(t, ns, 200*time.Millisecond) // the Secret is not watched: the resync finds a new password
	createBloomCluster(t, ns, "auth", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.RESP.PasswordSecret = &bloomeryv1alpha1.RESPPasswordSecret{Name: "redis-auth", Key: "pw"}
	})
	token := string(waitFor(t, &corev1.Secret{}, ns, "auth-internal-token", exists).Data["token"])

	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "auth", func(s *appsv1.StatefulSet) (bool, string) {
		return s.Spec.Template.Annotations[respPasswordHashAnnotation] == respPasswordHash(token, "first-password"), fmt.Sprint(s.Spec.Template.Annotations)
	})
	pod := sts.Spec.Template.Spec
	wantSecretMounted(t, pod, "resp-password", "redis-auth", "/var/run/secrets/bloomery-resp")
	vol := pod.Volumes[slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "resp-password" })]
	if items := vol.Secret.Items; len(items) != 1 || items[0].Key != "pw" || items[0].Path != "password" {
		t.Errorf("password volume items %+v, want key pw as the file password", items)
	}
	if data, err := json.Marshal(sts); err != nil || strings.Contains(string(data), "first-password") {
		t.Errorf("the StatefulSet holds the password itself (%v)", err)
	}
	if args := strings.Join(pod.Containers[0].Args, " "); !strings.Contains(args, "--resp-password-file /var/run/secrets/bloomery-resp/password") {
		t.Errorf("args %q do not point the data plane at the mounted password", args)
	}
	waitFor(t, &corev1.ConfigMap{}, ns, "auth-config", func(cm *corev1.ConfigMap) (bool, string) {
		return strings.Contains(cm.Data["config.yaml"], "respPort: 6379\n"), cm.Data["config.yaml"]
	})
	waitClusterCondition(t, ns, "auth", ConditionDegraded, "False/"+ReasonAsExpected, "")

	// A new password: a new hash in the template, which rolls the pods.
	modify(t, secret, func(s *corev1.Secret) { s.Data["pw"] = []byte("second-password") })
	waitFor(t, &appsv1.StatefulSet{}, ns, "auth", func(s *appsv1.StatefulSet) (bool, string) {
		return s.Spec.Template.Annotations[respPasswordHashAnnotation] == respPasswordHash(token, "second-password"), fmt.Sprint(s.Spec.Template.Annotations)
	})
	// The operator only read the user's Secret.
	var after corev1.Secret
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "redis-auth"}, &after); err != nil {
		t.Fatal(err)
	}
	if len(after.OwnerReferences) != 0 || len(after.Labels) != 0 {
		t.Errorf("the user's Secret was changed: owners %v, labels %v", after.OwnerReferences, after.Labels)
	}
}

// A password Secret that is missing, lacks its key or holds a short password is refused: the
// cluster is Degraded with a Warning event, no StatefulSet or ConfigMap is made, and the cluster
// starts once the Secret is right.
func TestRESPPasswordSecretNotUsable(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	createBloomCluster(t, ns, "locked", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.RESP.PasswordSecret = &bloomeryv1alpha1.RESPPasswordSecret{Name: "missing"}
	})
	missing := "Secret missing (spec.resp.passwordSecret) does not exist"
	waitClusterCondition(t, ns, "locked", ConditionDegraded, "True/"+ReasonRESPPasswordSecretNotUsable, missing)
	waitEvent(t, ns, "locked", ReasonRESPPasswordSecretNotUsable, missing)
	waitFor(t, &corev1.Service{}, ns, "locked", exists) // the rest of the pass goes on
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "locked"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet without its password Secret: %v, want not found", err)
	}
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "locked-config"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap without its password Secret: %v, want not found", err)
	}

	secret := createPasswordSecret(t, ns, "missing", "other", "a-long-enough-password")
	waitClusterCondition(t, ns, "locked", ConditionDegraded, "True/"+ReasonRESPPasswordSecretNotUsable,
		"Secret missing (spec.resp.passwordSecret) has no key password")
	modify(t, secret, func(s *corev1.Secret) { s.Data = map[string][]byte{"password": []byte("short\n")} })
	waitClusterCondition(t, ns, "locked", ConditionDegraded, "True/"+ReasonRESPPasswordSecretNotUsable,
		"holds a password of 5 characters under key password, fewer than the 8 the pods require")
	modify(t, secret, func(s *corev1.Secret) { s.Data = map[string][]byte{"password": []byte("now-long-enough")} })
	waitFor(t, &appsv1.StatefulSet{}, ns, "locked", exists)
	waitClusterCondition(t, ns, "locked", ConditionDegraded, "False/"+ReasonAsExpected, "")
}
