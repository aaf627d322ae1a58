package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// countingDataPlane counts the memberships the operator sends, so a test can tell a steady state
// (GETs only) from one that pushes.
type countingDataPlane struct {
	DataPlane
	sets atomic.Int64
}

func (d *countingDataPlane) SetMembership(ctx context.Context, pod Pod, m wire.Membership) error {
	d.sets.Add(1)
	return d.DataPlane.SetMembership(ctx, pod, m)
}

// startMembershipReconciler runs the BloomCluster reconciler in ns with a short resync, so that a
// pod that forgets its membership without a Pod event (a data plane restarted behind the same
// Pod object) is found within a fraction of a second.
func startMembershipReconciler(t *testing.T, ns string) (*writeCounter, *countingDataPlane) {
	t.Helper()
	dp := &countingDataPlane{DataPlane: NewHTTPDataPlane(2 * time.Second)}
	writes := startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomClusterReconciler{
			Client:         mgr.GetClient(),
			Scheme:         mgr.GetScheme(),
			Recorder:       mgr.GetEventRecorder("bloomcluster"),
			DefaultImage:   testImage,
			Resync:         100 * time.Millisecond,
			DataPlane:      dp,
			PodParallelism: 2,
		}).SetupWithManager(mgr)
	})
	return writes, dp
}

func getCluster(t *testing.T, ns, name string) *bloomeryv1alpha1.BloomCluster {
	t.Helper()
	var c bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// waitMembership waits until the cluster's status records exactly members, with a placement that
// moves nothing, and every member's data plane holds that membership, with its own name as Self
// and the recorded placement; it returns the epoch.
func waitMembership(t *testing.T, ns, cluster string, members ...*fakePod) uint64 {
	t.Helper()
	want := make([]wire.Member, len(members))
	for i, p := range members {
		want[i] = wire.Member{Name: p.name, URL: p.internalURL()}
	}
	var epoch uint64
	await.Until(t, 20*time.Second, fmt.Sprintf("membership %v on every member", want), func() (bool, string) {
		c := getCluster(t, ns, cluster)
		recorded := make([]wire.Member, len(c.Status.Members))
		for i, m := range c.Status.Members {
			recorded[i] = wire.Member{Name: m.Pod, URL: m.URL}
		}
		if !slices.Equal(recorded, want) {
			return false, fmt.Sprintf("status.members %v at epoch %d", recorded, c.Status.MembershipEpoch)
		}
		epoch = uint64(c.Status.MembershipEpoch)
		p := c.Status.Placement
		if p == nil || p.Previous != nil {
			return false, fmt.Sprintf("status.placement %+v at epoch %d: a move is under way", p, epoch)
		}
		placement := wire.Placement{Owners: p.Owners, ReplicationFactor: int(p.ReplicationFactor)}
		for _, p := range members {
			held, err := p.internal.Membership(t.Context())
			if err != nil {
				return false, fmt.Sprintf("pod %s: %v", p.name, err)
			}
			if held.Epoch != epoch || held.Self != p.name || !slices.Equal(held.Members, want) ||
				held.Previous != nil || !samePlacement(held.Placement, placement) {
				return false, fmt.Sprintf("pod %s holds %+v; status has epoch %d", p.name, held, epoch)
			}
		}
		return true, ""
	})
	return epoch
}

// Not parallel: the steady-state check counts the passes of every bloomcluster controller in the
// process.
func TestMembershipFollowsThePods(t *testing.T) {
	ns := newNamespace(t)
	createBloomCluster(t, ns, "m", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(3)) })
	writes, dp := startMembershipReconciler(t, ns)

	// A pod without an IP yet (scheduled, not started) is not a member.
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "m-9", Namespace: ns, Labels: clusterLabels("m")},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: "bloomery:test"}}},
	}
	ownedByStatefulSet(t, pending, ns, "m")
	if err := k8s.Create(t.Context(), pending); err != nil {
		t.Fatal(err)
	}
	p0, p1 := addPod(t, ns, "m", "m-0"), addPod(t, ns, "m", "m-1")
	first := waitMembership(t, ns, "m", p0, p1)
	if first == 0 {
		t.Fatal("a membership with members must have an epoch above 0")
	}

	// Scale up: the new pod and the old ones get the three of them, in a newer epoch.
	p2 := addPod(t, ns, "m", "m-2")
	scaledUp := waitMembership(t, ns, "m", p0, p1, p2)
	if scaledUp <= first {
		t.Errorf("scale up: epoch %d, want above %d", scaledUp, first)
	}

	// Scale down: the pod goes (unscheduled pods are deleted at once), and the remaining ones
	// get a membership without it.
	if err := k8s.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m-1", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	p1.kill(t)
	scaledDown := waitMembership(t, ns, "m", p0, p2)
	if scaledDown <= scaledUp {
		t.Errorf("scale down: epoch %d, want above %d", scaledDown, scaledUp)
	}

	// A data plane restarted without its state (epoch 0) gets the current membership again; the
	// set of pods did not change, so neither does the epoch.
	p0.restartEmpty(t)
	if again := waitMembership(t, ns, "m", p0, p2); again != scaledDown {
		t.Errorf("after a restart of m-0: epoch %d, want still %d", again, scaledDown)
	}

	// Steady state: passes read the pods and write nothing, to the API server or to the pods.
	waitPasses(t, 3)
	writesBefore, setsBefore := writes.Load(), dp.sets.Load()
	waitPasses(t, 10)
	if w, s := writes.Load()-writesBefore, dp.sets.Load()-setsBefore; w != 0 || s != 0 {
		t.Errorf("10 passes over unchanged pods sent %d writes to the API server and %d memberships to the pods", w, s)
	}

	// Status lost or rolled back: the pods hold a higher epoch than status says. The operator
	// moves past theirs rather than reuse a lower one, which the pods would refuse.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns, "m")
		c.Status.MembershipEpoch = 1
		return k8s.Status().Update(t.Context(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if past := waitMembership(t, ns, "m", p0, p2); past != scaledDown+1 {
		t.Errorf("after status fell behind the pods at %d: epoch %d, want %d", scaledDown, past, scaledDown+1)
	}

	// A pod whose API listens (its container passed the startup probe) but does not answer
	// makes the cluster Degraded, by name; once it answers, it gets the membership.
	p2.kill(t)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "m-2"}, &pod); err != nil {
			return err
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: containerName, Image: "bloomery:test", ImageID: "bloomery@sha256:0", Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}}
		return k8s.Status().Update(t.Context(), &pod)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitClusterCondition(t, ns, "m", ConditionDegraded, "True/"+ReasonMembershipNotDelivered, "m-2")
	if msg := clusterCondition(got, ConditionDegraded); strings.Contains(msg, "m-0") {
		t.Errorf("Degraded names a pod that answers: %s", msg)
	}
	p2.restartEmpty(t)
	current := waitMembership(t, ns, "m", p0, p2)
	waitClusterCondition(t, ns, "m", ConditionDegraded, "False/"+ReasonAsExpected, "")

	// A pod told the largest epoch there is, by someone else: the operator cannot go past it, and
	// says so by name instead of counting past the end; a restart of the pod heals it.
	held, err := p0.internal.Membership(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	held.Epoch = wire.MaxEpoch
	if err := p0.internal.SetMembership(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	waitClusterCondition(t, ns, "m", ConditionDegraded, "True/"+ReasonMembershipEpochExhausted, "m-0")
	if c := getCluster(t, ns, "m"); uint64(c.Status.MembershipEpoch) != current {
		t.Errorf("status.membershipEpoch moved from %d to %d", current, c.Status.MembershipEpoch)
	}
	p0.restartEmpty(t)
	waitMembership(t, ns, "m", p0, p2)
	waitClusterCondition(t, ns, "m", ConditionDegraded, "False/"+ReasonAsExpected, "")
}

func TestMembersOf(t *testing.T) {
	t.Parallel()
	pod := func(name, ip string, port int32, mutate ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: containerName, Ports: []corev1.ContainerPort{
					{Name: httpPortName, ContainerPort: 8080}, {Name: internalPortName, ContainerPort: port}, {Name: opsPortName, ContainerPort: 9090},
				},
			}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
		}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	pods := []corev1.Pod{
		pod("c-2", "10.0.0.2", 8090),
		pod("c-1", "", 8090), // no IP yet
		pod("c-0", "10.0.0.1", 8091),
		pod("c-3", "10.0.0.3", 8090, func(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.Now()) }),
		pod("c-4", "10.0.0.4", 8090, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), // evicted
		pod("c-10", "fd00::a", 8090, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, Started: new(true)}}
		}),
	}
	members, targets := membersOf(pods, "secret", nil)
	// Members are reached on their internal port.
	want := []bloomeryv1alpha1.ClusterMember{
		{Pod: "c-0", URL: "http://10.0.0.1:8091"},
		{Pod: "c-10", URL: "http://[fd00::a]:8090"},
		{Pod: "c-2", URL: "http://10.0.0.2:8090"},
	}
	if !slices.Equal(members, want) {
		t.Errorf("members %+v, want %+v", members, want)
	}
	if len(targets) != len(want) {
		t.Fatalf("targets %+v, want one per member", targets)
	}
	for i, target := range targets {
		if target.addr.Name != want[i].Pod || target.addr.baseURL() != want[i].URL || target.addr.Token != "secret" || target.started != (want[i].Pod == "c-10") {
			t.Errorf("target %d: %+v, want pod %s at %s", i, target, want[i].Pod, want[i].URL)
		}
	}

	// With the cluster's TLS, members are reached, and reach each other, over https.
	podTLS := &ClusterTLS{Secret: "ns/c-tls", Version: "1"}
	members, targets = membersOf(pods, "secret", podTLS)
	for i, m := range members {
		if wantURL := strings.Replace(want[i].URL, "http:", "https:", 1); m.URL != wantURL || targets[i].addr.TLS != podTLS {
			t.Errorf("member %+v, TLS %v; want %s with the cluster's TLS", m, targets[i].addr.TLS, wantURL)
		}
	}
}
