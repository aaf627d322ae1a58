package controllers

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"

	"github.com/bloomery/bloomery/internal/await"
)

// The cluster's token: made once, at random, in a Secret the cluster owns, mounted into the pods
// and named by its hash in the pod template; deleting the Secret makes a new one and rolls the pods.
func TestInternalTokenSecret(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	cluster := createBloomCluster(t, ns, "tok", nil)

	secret := waitFor(t, &corev1.Secret{}, ns, "tok-internal-token", exists)
	checkOwnedBy(t, secret, cluster)
	token := string(secret.Data["token"])
	if b, err := hex.DecodeString(token); err != nil || len(b) != 32 {
		t.Fatalf("token %q, want 64 hexadecimal characters", token)
	}

	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "tok", func(s *appsv1.StatefulSet) (bool, string) {
		return s.Spec.Template.Annotations[tokenHashAnnotation] == tokenHash(token), fmt.Sprint(s.Spec.Template.Annotations)
	})
	pod := sts.Spec.Template.Spec
	wantSecretMounted(t, pod, "internal-token", "tok-internal-token", "/var/run/secrets/bloomery")
	ctr := pod.Containers[0]
	if !strings.Contains(strings.Join(ctr.Args, " "), "--internal-token-file /var/run/secrets/bloomery/token") {
		t.Errorf("args %q do not point the data plane at the mounted token", ctr.Args)
	}
	if data, err := json.Marshal(sts); err != nil || strings.Contains(string(data), token) {
		t.Errorf("the StatefulSet holds the token itself (%v)", err)
	}

	// Rotation: the Secret deleted, a new token, and a pod template that rolls the pods onto it.
	if err := k8s.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	rotated := waitFor(t, &corev1.Secret{}, ns, "tok-internal-token", func(s *corev1.Secret) (bool, string) {
		return s.UID != secret.UID, "the old Secret"
	})
	newToken := string(rotated.Data["token"])
	if newToken == token || len(newToken) != 64 {
		t.Fatalf("token after rotation %q, want a new one of 64 characters", newToken)
	}
	checkOwnedBy(t, rotated, cluster)
	waitFor(t, &appsv1.StatefulSet{}, ns, "tok", func(s *appsv1.StatefulSet) (bool, string) {
		return s.Spec.Template.Annotations[tokenHashAnnotation] == tokenHash(newToken), fmt.Sprint(s.Spec.Template.Annotations)
	})
}

// A Secret of the token's name that the cluster does not own is not used: the cluster says why.
func TestInternalTokenSecretOfSomeoneElse(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "labelled-internal-token", Namespace: ns, Labels: clusterLabels("labelled")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain-internal-token", Namespace: ns}},
	} {
		s.Data = map[string][]byte{"token": []byte(strings.Repeat("ab", 32))}
		if err := k8s.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	startClusterReconciler(t, ns, 0)
	createBloomCluster(t, ns, "labelled", nil)
	createBloomCluster(t, ns, "plain", nil)
	waitClusterCondition(t, ns, "labelled", ConditionDegraded, "True/"+ReasonChildObjectFailure, "is not this BloomCluster's")
	waitClusterCondition(t, ns, "plain", ConditionDegraded, "True/"+ReasonChildObjectFailure, "exists without the labels")
}

// Only pods of the cluster's StatefulSet are members: one that merely carries its labels, or one
// of the StatefulSet whose name is not <statefulset>-<ordinal>, is counted, named in a Warning
// event, and told nothing.
func TestMembershipIgnoresPodsTheStatefulSetDoesNotOwn(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBloomCluster(t, ns, "i", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })
	startMembershipReconciler(t, ns)
	member := addPod(t, ns, "i", "i-0")

	intruders := map[string]*fakePod{}
	for _, name := range []string{"i-1", "i-x"} {
		p := startFakePod(t, name, member.token, "", nil) // even a pod that knows the token
		intruders[name] = p
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: selectorLabels("i")},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: containerName, Image: "bloomery:test",
				Ports: []corev1.ContainerPort{{Name: internalPortName, ContainerPort: int32(p.ports.internal)}},
			}}},
		}
		if name == "i-x" {
			ownedByStatefulSet(t, pod, ns, "i")
		}
		if err := k8s.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := k8s.Status().Update(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}

	waitMembership(t, ns, "i", member)
	waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "i", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		return c.Status.IgnoredPods == 2, fmt.Sprintf("status.ignoredPods %d, want 2", c.Status.IgnoredPods)
	})
	await.Until(t, 20*time.Second, "a Warning event naming the ignored pods", func() (bool, string) {
		var events eventsv1.EventList
		if err := k8s.List(t.Context(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var notes []string
		for _, e := range events.Items {
			if e.Reason == "IgnoredPods" && e.Type == corev1.EventTypeWarning && e.Regarding.Name == "i" {
				notes = append(notes, e.Note)
				if strings.Contains(e.Note, "i-1, i-x") {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("IgnoredPods events: %q", notes)
	})
	for name, p := range intruders {
		if held, err := p.internal.Membership(t.Context()); err != nil || held.Epoch != 0 {
			t.Errorf("pod %s was told a membership (%+v, %v)", name, held, err)
		}
	}
}

// A Pod formatted into an error or a log line shows where it is, never the token it carries.
func TestPodNeverPrintsItsToken(t *testing.T) {
	t.Parallel()
	pod := Pod{Name: "c-0", IP: "10.0.0.7", Port: 8090, Token: strings.Repeat("ab", 32)}
	for _, s := range []string{fmt.Sprint(pod), fmt.Sprintf("%+v", pod), fmt.Sprintf("%v", []Pod{pod}), fmt.Errorf("pod %v: %w", pod, errNoToken).Error()} {
		if strings.Contains(s, pod.Token) || !strings.Contains(s, "c-0 at http://10.0.0.7:8090") {
			t.Errorf("%q: want the pod's name and address, without its token", s)
		}
	}
}

// wantSecretMounted checks that the pod mounts the Secret secret as volume, read-only with mode
// 0440, at path in its data-plane container.
func wantSecretMounted(t *testing.T, pod corev1.PodSpec, volume, secret, path string) {
	t.Helper()
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == volume })
	if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != secret ||
		pod.Volumes[i].Secret.DefaultMode == nil || *pod.Volumes[i].Secret.DefaultMode != 0o440 {
		t.Errorf("volumes %+v, want %s from Secret %s, mode 0440", pod.Volumes, volume, secret)
	}
	if !slices.ContainsFunc(pod.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == volume && m.MountPath == path && m.ReadOnly
	}) {
		t.Errorf("volume mounts %+v, want %s read-only at %s", pod.Containers[0].VolumeMounts, volume, path)
	}
}
