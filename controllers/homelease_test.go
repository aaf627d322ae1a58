package controllers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The operator's clock starts when it first sees a version, whatever renewTime says, and a lease
// lapses the duration plus the drift bound later, not a nanosecond sooner.
func TestLeaseLapsesOnTheOperatorsClock(t *testing.T) {
	t.Parallel()
	var lc leaseClock
	start := time.Unix(2_000_000, 0)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "1"}}
	// renewTime an hour in the future (a pod's wall clock set ahead) changes nothing.
	l.Spec.RenewTime = &metav1.MicroTime{Time: start.Add(time.Hour)}
	if seen := lc.observe(l, start); !seen.Equal(start) {
		t.Fatalf("first seen %v, want %v", seen, start)
	}
	after := wire.LeaseLapsedAfter(10 * time.Second)
	if after != 10500*time.Millisecond {
		t.Fatalf("LeaseLapsedAfter(10s) = %v, want 10.5s with a 5%% drift bound", after)
	}
	// Seen again, unchanged: the clock runs on from the first sight.
	later := start.Add(after - time.Nanosecond)
	seen := lc.observe(l, later)
	if lapsed, left := lapse(seen, later, 10*time.Second); lapsed || left != time.Nanosecond {
		t.Errorf("at %v: lapsed %v, left %v; want not lapsed, 1ns left", after-time.Nanosecond, lapsed, left)
	}
	if lapsed, _ := lapse(seen, start.Add(after), 10*time.Second); !lapsed {
		t.Errorf("at %v: not lapsed", after)
	}
	// A new version (a renewal) starts it again.
	l.ResourceVersion = "2"
	if seen := lc.observe(l, later); !seen.Equal(later) {
		t.Errorf("renewal first seen %v, want %v", seen, later)
	}
	lc.forget(l)
	if seen := lc.observe(l, start.Add(time.Minute)); !seen.Equal(start.Add(time.Minute)) {
		t.Errorf("after forget: seen %v, want the new sight", seen)
	}
}

// The duration is the longer of the holder's and the spec's: a pod still renewing under a
// longer lease than the spec now sets is not taken for lapsed early.
func TestLeaseDurationIsTheLonger(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{}
	l := &coordinationv1.Lease{}
	if got := leaseDuration(l, c); got != 10*time.Second {
		t.Errorf("no duration claimed: %v, want the spec's default 10s", got)
	}
	l.Spec.LeaseDurationSeconds = new(int32(30))
	if got := leaseDuration(l, c); got != 30*time.Second {
		t.Errorf("30s claimed: %v, want 30s", got)
	}
	c.Spec.Replication.HomeLeaseSeconds = new(int32(60))
	if got := leaseDuration(l, c); got != time.Minute {
		t.Errorf("spec 60s: %v, want 60s", got)
	}
}

func TestLeaseStates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		holder      *string
		annotations map[string]string
		want        homeLeaseState
	}{
		{nil, nil, leaseUnclaimed},
		{new(""), nil, leaseUnclaimed},
		{new("c-0"), nil, leaseHeld},
		{new("c-0"), map[string]string{wire.LeaseRevokedAnnotation: "4"}, leaseHeld},
		{nil, map[string]string{wire.LeaseRevokedAnnotation: "4"}, leaseRevoked},
	} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: c.annotations}, Spec: coordinationv1.LeaseSpec{HolderIdentity: c.holder}}
		if got := stateOf(l); got != c.want {
			t.Errorf("holder %v, annotations %v: state %d, want %d", c.holder, c.annotations, got, c.want)
		}
	}
}

// The rule to the API server names each address once, as a single-address block, and the TCP
// ports of the endpoints.
func TestAPIServerRule(t *testing.T) {
	t.Parallel()
	udp := corev1.ProtocolUDP
	slices := []discoveryv1.EndpointSlice{
		{
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2", "not an address"}}},
			Ports:     []discoveryv1.EndpointPort{{Port: new(int32(6443))}, {Port: new(int32(53)), Protocol: &udp}},
		},
		{
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"fd00::1"}}},
			Ports:     []discoveryv1.EndpointPort{{Port: new(int32(6443))}},
		},
	}
	got := apiServerRule(slices)
	want := []string{"10.0.0.1/32", "10.0.0.2/32", "fd00::1/128"}
	var cidrs []string
	for _, p := range got.To {
		cidrs = append(cidrs, p.IPBlock.CIDR)
	}
	if !equality.Semantic.DeepEqual(cidrs, want) {
		t.Errorf("to %v, want %v", cidrs, want)
	}
	if len(got.Ports) != 1 || got.Ports[0].Port.IntVal != 6443 || *got.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports %+v, want TCP 6443 alone", got.Ports)
	}
	if empty := apiServerRule(nil); len(empty.To) != 0 || len(empty.Ports) != 0 {
		t.Errorf("no endpoints: %+v, want an empty rule (the caller falls back)", empty)
	}
}

// The pass that revokes a lapsed lease leaves its pod out of the members it goes on with, so
// that it neither waits for a pod that may be frozen nor starts the next epoch a pass late.
func TestRevokingPassLeavesThePodOut(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "cluster-uid"}}
	c.Status.MembershipEpoch = 4
	held := func(name string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Labels: selectorLabels("c")},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new(name)}}
		if err := controllerutil.SetControllerReference(c, l, testScheme); err != nil {
			t.Fatal(err)
		}
		return l
	}
	k := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(held("c-0"), held("c-1"), held("c-2")).Build()
	now := time.Unix(3_000_000, 0)
	r := &BloomClusterReconciler{Client: k, Clock: func() time.Time { return now }}
	for name, silent := range map[string]time.Duration{
		"c-0": time.Second,                             // renewed a second ago
		"c-1": wire.LeaseLapsedAfter(10 * time.Second), // lapsed just now
		"c-2": 6 * time.Second,                         // missed a renewal, not lapsed
	} {
		var l coordinationv1.Lease
		if err := k.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, &l); err != nil {
			t.Fatal(err)
		}
		r.leaseClock.observe(&l, now.Add(-silent))
	}
	members := []bloomeryv1alpha1.ClusterMember{{Pod: "c-0"}, {Pod: "c-1"}, {Pod: "c-2"}}
	targets := []memberPod{{addr: Pod{Name: "c-0"}}, {addr: Pod{Name: "c-1"}}, {addr: Pod{Name: "c-2"}}}
	kept, keptTargets, _, err := r.fenceHomes(t.Context(), &clusterState{cluster: c}, members, targets)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 2 || kept[0].Pod != "c-0" || kept[1].Pod != "c-2" || len(keptTargets) != 2 {
		t.Fatalf("members %v, targets %v after revoking c-1's lease: want c-0 and c-2", kept, keptTargets)
	}
	// The pod that missed a renewal is likely frozen: the pass's calls to it must not wait the
	// pod timeout.
	if keptTargets[0].quick || !keptTargets[1].quick {
		t.Errorf("quick calls: c-0 %v, c-2 %v; want false for the lease renewed, true for the one overdue", keptTargets[0].quick, keptTargets[1].quick)
	}
	ctx, cancel := keptTargets[1].callContext(t.Context())
	defer cancel()
	if deadline, ok := ctx.Deadline(); !ok || deadline.After(time.Now().Add(quickCallTimeout)) {
		t.Errorf("a call to c-2 has deadline %v (set: %v); want one within %v", deadline, ok, quickCallTimeout)
	}
	// Nor may a call to a pod that froze just before its lease was overdue outlast the lease: the
	// pass that revokes it would wait for that call.
	left := wire.LeaseLapsedAfter(10*time.Second) - time.Second
	ctx, cancel = keptTargets[0].callContext(t.Context())
	defer cancel()
	if deadline, ok := ctx.Deadline(); !ok || deadline.After(time.Now().Add(left)) {
		t.Errorf("a call to c-0 has deadline %v (set: %v); want one within %v, when its lease lapses", deadline, ok, left)
	}
	var l coordinationv1.Lease
	if err := k.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "c-1"}, &l); err != nil {
		t.Fatal(err)
	}
	if stateOf(&l) != leaseRevoked || l.Annotations[wire.LeaseRevokedAnnotation] != "5" {
		t.Errorf("c-1's lease: holder %v, annotations %v; want revoked for epoch 5", l.Spec.HolderIdentity, l.Annotations)
	}
}
