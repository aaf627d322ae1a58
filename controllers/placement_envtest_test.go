package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// placementDataPlane is the real data plane with the placement status that pods do not serve yet
// played by the test: each pod reports the epoch it holds, caught up or not as the test says, 8
// partitions owned (3 of them moving until caught up) and bytes of the test's.
type placementDataPlane struct {
	DataPlane
	caughtUp atomic.Bool
	bytes    atomic.Uint64
	// underReplicated is the PartitionsUnderReplicated every pod reports; lagging names a pod
	// that reports it has not caught up whatever caughtUp says.
	underReplicated atomic.Int64
	lagging         atomic.Value
	mu              sync.Mutex
	pushed          []wire.Membership
}

func (d *placementDataPlane) PlacementStatus(ctx context.Context, pod Pod) (wire.PlacementStatus, error) {
	held, err := d.GetMembership(ctx, pod)
	if err != nil {
		return wire.PlacementStatus{}, err
	}
	caughtUp := d.caughtUp.Load() && d.lagging.Load() != pod.Name
	st := wire.PlacementStatus{Epoch: held.Epoch, CaughtUp: caughtUp, PartitionsOwned: 8, PartitionsHeld: 8, Bytes: d.bytes.Load(),
		PartitionsUnderReplicated: int(d.underReplicated.Load())}
	if !st.CaughtUp {
		st.PartitionsMoving = 3
	}
	return st, nil
}

func (d *placementDataPlane) SetMembership(ctx context.Context, pod Pod, m wire.Membership) error {
	d.mu.Lock()
	d.pushed = append(d.pushed, m)
	d.mu.Unlock()
	return d.DataPlane.SetMembership(ctx, pod, m)
}

// startPlacementReconciler runs the BloomCluster reconciler in ns over a placementDataPlane whose
// pods report caught up until the test says otherwise.
func startPlacementReconciler(t *testing.T, ns string) *placementDataPlane {
	t.Helper()
	dp := &placementDataPlane{DataPlane: NewHTTPDataPlane(2 * time.Second)}
	dp.caughtUp.Store(true)
	startPlacementReconcilerOn(t, ns, dp)
	return dp
}

// startPlacementReconcilerOn runs the BloomCluster reconciler in ns over dp until the returned
// function stops it.
func startPlacementReconcilerOn(t *testing.T, ns string, dp *placementDataPlane) func() {
	t.Helper()
	_, stop := startStoppableManager(t, restConfig, ns, func(mgr ctrl.Manager) error {
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
	return stop
}

// waitPlacement waits until status records members and want, and every member holds that
// membership; it returns the cluster.
func waitPlacement(t *testing.T, ns, cluster string, members []*fakePod, want bloomeryv1alpha1.ClusterPlacement) *bloomeryv1alpha1.BloomCluster {
	t.Helper()
	var got *bloomeryv1alpha1.BloomCluster
	await.Until(t, 20*time.Second, fmt.Sprintf("placement %+v on every member", want), func() (bool, string) {
		c := getCluster(t, ns, cluster)
		p := c.Status.Placement
		if names := memberNames(c.Status.Members); len(names) != len(members) {
			return false, fmt.Sprintf("members %v", names)
		}
		if p == nil || p.Phase != want.Phase || p.ReplicationFactor != want.ReplicationFactor || !slices.Equal(p.Owners, want.Owners) ||
			(p.Previous == nil) != (want.Previous == nil) ||
			(p.Previous != nil && (p.Previous.ReplicationFactor != want.Previous.ReplicationFactor || !slices.Equal(p.Previous.Owners, want.Previous.Owners))) {
			return false, fmt.Sprintf("status.placement %+v (previous %+v) at epoch %d", p, p.Previous, c.Status.MembershipEpoch)
		}
		for _, pod := range members {
			held, err := pod.internal.Membership(t.Context())
			if err != nil {
				return false, fmt.Sprintf("pod %s: %v", pod.name, err)
			}
			wantPrev := want.Previous != nil
			if held.Epoch != uint64(c.Status.MembershipEpoch) || held.ReplicationFactor != int(want.ReplicationFactor) ||
				!slices.Equal(held.Owners, want.Owners) || (held.Previous != nil) != wantPrev ||
				(wantPrev && (held.Previous.ReplicationFactor != int(want.Previous.ReplicationFactor) || !slices.Equal(held.Previous.Owners, want.Previous.Owners))) {
				return false, fmt.Sprintf("pod %s holds %+v (previous %+v); status epoch %d", pod.name, held, held.Previous, c.Status.MembershipEpoch)
			}
		}
		got = c
		return true, ""
	})
	return got
}

func placementOn(phase bloomeryv1alpha1.PlacementPhase, factor int32, owners ...string) bloomeryv1alpha1.ClusterPlacement {
	return bloomeryv1alpha1.ClusterPlacement{Phase: phase, PartitionPlacement: bloomeryv1alpha1.PartitionPlacement{Owners: owners, ReplicationFactor: factor}}
}

func movingFrom(p bloomeryv1alpha1.ClusterPlacement, factor int32, owners ...string) bloomeryv1alpha1.ClusterPlacement {
	p.Previous = &bloomeryv1alpha1.PartitionPlacement{Owners: owners, ReplicationFactor: factor}
	return p
}

// A cluster of three pods places every partition on all three (R defaults to 3); a new
// spec.replication.factor is pushed with the placement it moves from, and once every pod reports
// it holds its partitions, the next epoch drops it. An operator that restarts in between resumes
// the move from status.
func TestPlacementMovesToANewFactor(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBloomCluster(t, ns, "p", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(3)) })
	dp := &placementDataPlane{DataPlane: NewHTTPDataPlane(2 * time.Second)}
	dp.caughtUp.Store(true)
	stop := startPlacementReconcilerOn(t, ns, dp)
	dp.bytes.Store(1 << 20)
	pods := []*fakePod{addPod(t, ns, "p", "p-0"), addPod(t, ns, "p", "p-1"), addPod(t, ns, "p", "p-2")}
	all := []string{"p-0", "p-1", "p-2"}

	waitPlacement(t, ns, "p", pods, placementOn(bloomeryv1alpha1.PlacementStable, 3, all...))
	await.Until(t, 10*time.Second, "bytes of each pod in status", func() (bool, string) {
		got := getCluster(t, ns, "p").Status.Placement.BytesPerPod
		return len(got) == 3 && got[0] == (bloomeryv1alpha1.PodBytes{Pod: "p-0", Bytes: 1 << 20}), fmt.Sprintf("%+v", got)
	})
	dp.mu.Lock()
	for _, m := range dp.pushed {
		if m.ReplicationFactor == 0 || len(m.Owners) == 0 {
			t.Errorf("a membership pushed without its placement: %+v", m)
		}
	}
	dp.mu.Unlock()

	// R 3 to 2: the move stays under way, read from the pods, while they have not caught up.
	dp.caughtUp.Store(false)
	modify(t, &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}},
		func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replication.Factor = new(int32(2)) })
	moving := waitPlacement(t, ns, "p", pods, movingFrom(placementOn(bloomeryv1alpha1.PlacementMoving, 2, all...), 3, all...))
	await.Until(t, 10*time.Second, "partitions moving in status", func() (bool, string) {
		p := getCluster(t, ns, "p").Status.Placement
		return p.PartitionsMoving == 9 && p.PartitionsOwned == 24, fmt.Sprintf("%+v", p)
	})
	waitPasses(t, 5)
	if c := getCluster(t, ns, "p"); c.Status.MembershipEpoch != moving.Status.MembershipEpoch || c.Status.Placement.Previous == nil {
		t.Fatalf("the move ended before the pods caught up: epoch %d, placement %+v", c.Status.MembershipEpoch, c.Status.Placement)
	}

	// The operator restarts: the new one pushes the recorded move, and no new epoch.
	stop()
	startPlacementReconcilerOn(t, ns, dp)
	waitPasses(t, 5)
	if c := getCluster(t, ns, "p"); c.Status.MembershipEpoch != moving.Status.MembershipEpoch || c.Status.Placement.Previous == nil {
		t.Fatalf("after a restart of the operator: epoch %d, placement %+v; want the move of epoch %d", c.Status.MembershipEpoch, c.Status.Placement, moving.Status.MembershipEpoch)
	}
	waitPlacement(t, ns, "p", pods, movingFrom(placementOn(bloomeryv1alpha1.PlacementMoving, 2, all...), 3, all...))

	// Caught up: the next epoch moves nothing.
	dp.caughtUp.Store(true)
	done := waitPlacement(t, ns, "p", pods, placementOn(bloomeryv1alpha1.PlacementStable, 2, all...))
	if done.Status.MembershipEpoch != moving.Status.MembershipEpoch+1 {
		t.Errorf("the move ended at epoch %d, want %d", done.Status.MembershipEpoch, moving.Status.MembershipEpoch+1)
	}
}

// A scale-down whose remaining pods could not hold the data is refused, naming the numbers; one
// that fits first drains the leaving pod (a member, no longer an owner), and the StatefulSet
// keeps it until the pods caught up and hold the membership that moves nothing.
func TestPlacementScaleDownDrainsFirst(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBloomCluster(t, ns, "d", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(3))
		c.Spec.Replication.Factor = new(int32(1))
		c.Spec.Limits.MaxTotalBytes = new(resource.MustParse("1Gi"))
		c.Spec.Storage.Size = new(resource.MustParse("4Gi"))
	})
	dp := startPlacementReconciler(t, ns)
	dp.bytes.Store(700 << 20)
	pods := []*fakePod{addPod(t, ns, "d", "d-0"), addPod(t, ns, "d", "d-1"), addPod(t, ns, "d", "d-2")}
	all := []string{"d-0", "d-1", "d-2"}
	waitPlacement(t, ns, "d", pods, placementOn(bloomeryv1alpha1.PlacementStable, 1, all...))
	stsReplicas := func() int32 {
		var sts appsv1.StatefulSet
		if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "d"}, &sts); err != nil {
			t.Fatal(err)
		}
		return *sts.Spec.Replicas
	}
	if got := stsReplicas(); got != 3 {
		t.Fatalf("StatefulSet replicas %d, want 3", got)
	}

	// 3 × 700Mi at R 1 on two pods is 1050Mi each: more than maxTotalBytes.
	modify(t, &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"}},
		func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(2)) })
	waitClusterCondition(t, ns, "d", ConditionDegraded, "True/"+ReasonScaleDownRefused, "about 1.0Gi each (1101004800 bytes), more than maxTotalBytes 1Gi")
	waitPasses(t, 5)
	waitPlacement(t, ns, "d", pods, placementOn(bloomeryv1alpha1.PlacementStable, 1, all...))
	if got := stsReplicas(); got != 3 {
		t.Fatalf("a refused scale-down set the StatefulSet's replicas to %d", got)
	}

	// Less data: the drain starts, and holds the StatefulSet while the pods pull.
	dp.caughtUp.Store(false)
	dp.bytes.Store(500 << 20)
	draining := movingFrom(placementOn(bloomeryv1alpha1.PlacementDraining, 1, "d-0", "d-1"), 1, all...)
	waitPlacement(t, ns, "d", pods, draining)
	waitClusterCondition(t, ns, "d", ConditionDegraded, "False/"+ReasonAsExpected, "")
	waitPasses(t, 5)
	if got := stsReplicas(); got != 3 {
		t.Fatalf("the StatefulSet was scaled to %d before the drain completed", got)
	}

	// Caught up: the final membership keeps d-2 a member that owns nothing, then the StatefulSet
	// drops it.
	dp.caughtUp.Store(true)
	waitPlacement(t, ns, "d", pods, placementOn(bloomeryv1alpha1.PlacementDraining, 1, "d-0", "d-1"))
	await.Until(t, 20*time.Second, "StatefulSet scaled down", func() (bool, string) {
		got := stsReplicas()
		return got == 2, fmt.Sprintf("replicas %d", got)
	})
	for _, p := range pods {
		held, err := p.internal.Membership(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if held.Previous != nil || len(held.Members) != 3 || slices.Contains(held.Owners, "d-2") {
			t.Errorf("pod %s holds %+v once the StatefulSet is scaled down; want d-2 a member without partitions and no move", p.name, held)
		}
	}

	// The StatefulSet controller deletes d-2: the placement is stable on the two left.
	if err := k8s.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d-2", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	pods[2].kill(t)
	waitPlacement(t, ns, "d", pods[:2], placementOn(bloomeryv1alpha1.PlacementStable, 1, "d-0", "d-1"))
}

// HTTPDataPlane.PlacementStatus reads the internal endpoint with the token; a data plane without
// it (404, no such route) is ErrPlacementUnsupported.
func TestHTTPDataPlanePlacementStatus(t *testing.T) {
	t.Parallel()
	var auth, mode atomic.Value
	mode.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		switch {
		case r.URL.Path != wire.PlacementStatusPath:
			w.WriteHeader(http.StatusBadRequest)
		case mode.Load() == "old":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no such route","code":5}`))
		case mode.Load() == "busy":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"recovering","code":7}`))
		default:
			_, _ = w.Write([]byte(`{"epoch":7,"caughtUp":true,"partitionsOwned":4,"partitionsMoving":1,"partitionsHeld":5,"bytes":1024,"movedBytes":10}`))
		}
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	pod := Pod{Name: "c-0", IP: u.Hostname(), Port: port, Token: "tok"}
	dp := NewHTTPDataPlane(2 * time.Second)

	st, err := dp.PlacementStatus(t.Context(), pod)
	want := wire.PlacementStatus{Epoch: 7, CaughtUp: true, PartitionsOwned: 4, PartitionsMoving: 1, PartitionsHeld: 5, Bytes: 1024, MovedBytes: 10}
	if err != nil || st != want {
		t.Errorf("PlacementStatus = %+v, %v; want %+v", st, err, want)
	}
	if got := auth.Load(); got != "Bearer tok" {
		t.Errorf("Authorization %q, want the cluster's token", got)
	}
	mode.Store("old")
	if _, err := dp.PlacementStatus(t.Context(), pod); !errors.Is(err, ErrPlacementUnsupported) {
		t.Errorf("a data plane without the endpoint: %v, want ErrPlacementUnsupported", err)
	}
	mode.Store("busy")
	if _, err := dp.PlacementStatus(t.Context(), pod); err == nil || errors.Is(err, ErrPlacementUnsupported) {
		t.Errorf("a 503: %v, want an error other than ErrPlacementUnsupported", err)
	}
}

// A pod of the data plane as it is answers its placement status or, from before placement,
// ErrPlacementUnsupported.
func TestHTTPDataPlanePlacementStatusOfARealPod(t *testing.T) {
	t.Parallel()
	p := startFakePod(t, "r-0", "the-token-of-the-test-0123456789", "", nil)
	pod := Pod{Name: p.name, IP: "127.0.0.1", Port: p.ports.internal, Token: p.token}
	st, err := NewHTTPDataPlane(2*time.Second).PlacementStatus(t.Context(), pod)
	if err != nil && !errors.Is(err, ErrPlacementUnsupported) {
		t.Errorf("PlacementStatus = %+v, %v; want a status or ErrPlacementUnsupported", st, err)
	}
	t.Logf("placement status %+v, %v", st, err)
}

// R is spec.replication.factor, or the smaller of 3 and replicas, and never more than the owners.
func TestReplicationFactor(t *testing.T) {
	t.Parallel()
	cluster := func(replicas int32, factor *int32) *bloomeryv1alpha1.BloomCluster {
		c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
		c.Spec.Replicas, c.Spec.Replication.Factor = new(replicas), factor
		return c
	}
	tests := []struct {
		replicas int32
		factor   *int32
		owners   int
		want     int32
	}{
		{1, nil, 1, 1}, {3, nil, 3, 3}, {5, nil, 5, 3}, {2, nil, 2, 2},
		{5, new(int32(2)), 5, 2}, {5, new(int32(5)), 5, 5},
		{3, nil, 2, 2},           // a pod is away: at most the owners
		{5, new(int32(4)), 3, 3}, // draining to 3 of 5 (the CRD keeps factor <= replicas)
		{0, nil, 2, 2},           // scaled to 0, pods still stopping
		{3, nil, 0, 0},
	}
	for _, tt := range tests {
		if got := replicationFactor(cluster(tt.replicas, tt.factor), tt.owners); got != tt.want {
			t.Errorf("replicas %d, factor %v, %d owners: R %d, want %d", tt.replicas, tt.factor, tt.owners, got, tt.want)
		}
	}
}

// The pods a scale-down removes are the StatefulSet's highest ordinals; a scale to 0 drains none.
func TestLeavingPod(t *testing.T) {
	t.Parallel()
	c := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	c.Spec.Replicas = new(int32(2))
	for pod, want := range map[string]bool{"c-0": false, "c-1": false, "c-2": true, "c-10": true, "c-x": false, "other-5": false, "c--1": false} {
		if got := leavingPod(c, pod); got != want {
			t.Errorf("leavingPod(%s) with 2 replicas = %v, want %v", pod, got, want)
		}
	}
	c.Spec.Replicas = new(int32(0))
	if leavingPod(c, "c-0") {
		t.Error("a scale to 0 drains c-0")
	}
}

// A new epoch moves from the last placement whose owners hold everything: the recorded one, the
// previous one while a move is under way, every member for an epoch from before placement, and
// none when the new placement is that one.
func TestPreviousFor(t *testing.T) {
	t.Parallel()
	members := []bloomeryv1alpha1.ClusterMember{{Pod: "c-0"}, {Pod: "c-1"}, {Pod: "c-2"}, {Pod: "c-3"}}
	all := placement{owners: []string{"c-0", "c-1", "c-2", "c-3"}, factor: 3}
	three := placement{owners: []string{"c-0", "c-1", "c-2"}, factor: 3}
	c := &bloomeryv1alpha1.BloomCluster{}
	if p := previousFor(c, all); p != nil {
		t.Errorf("first epoch: previous %+v, want none", p)
	}
	c.Status.MembershipEpoch, c.Status.Members = 4, members
	if p := previousFor(c, all); p == nil || !p.equal(placement{owners: all.owners, factor: 4}) {
		t.Errorf("after an epoch from before placement: previous %+v, want every member at R 4", p)
	}
	setPlacement(c, members, all, nil)
	if p := previousFor(c, three); p == nil || !p.equal(all) {
		t.Errorf("from a stable placement: previous %+v, want %+v", p, all)
	}
	setPlacement(c, members, three, &all)
	if c.Status.Placement.Phase != bloomeryv1alpha1.PlacementDraining {
		t.Errorf("c-3 a member without partitions: phase %s, want Draining", c.Status.Placement.Phase)
	}
	two := placement{owners: []string{"c-0", "c-1"}, factor: 2}
	if p := previousFor(c, two); p == nil || !p.equal(all) {
		t.Errorf("during a move: previous %+v, want the held %+v", p, all)
	}
	if p := previousFor(c, all); p != nil {
		t.Errorf("back to the held placement: previous %+v, want none", p)
	}
}

// status.placement.partitionsUnderReplicated takes the largest count the pods report, plus what
// an owner that has not caught up owns while nothing moves; above 0 the cluster is Degraded,
// naming the count, R and the pods.
func TestPlacementReportsUnderReplication(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBloomCluster(t, ns, "u", func(c *bloomeryv1alpha1.BloomCluster) { c.Spec.Replicas = new(int32(3)) })
	dp := startPlacementReconciler(t, ns)
	pods := []*fakePod{addPod(t, ns, "u", "u-0"), addPod(t, ns, "u", "u-1"), addPod(t, ns, "u", "u-2")}
	all := []string{"u-0", "u-1", "u-2"}
	waitPlacement(t, ns, "u", pods, placementOn(bloomeryv1alpha1.PlacementStable, 3, all...))
	waitClusterCondition(t, ns, "u", ConditionDegraded, "False/"+ReasonAsExpected, "")
	underReplicated := func(want int64) {
		t.Helper()
		await.Until(t, 10*time.Second, fmt.Sprintf("%d partitions under-replicated in status", want), func() (bool, string) {
			p := getCluster(t, ns, "u").Status.Placement
			return p.PartitionsUnderReplicated == want, fmt.Sprintf("%+v", p)
		})
	}

	// An owner is not a member: the pods count its pairs.
	dp.underReplicated.Store(5)
	underReplicated(5)
	waitClusterCondition(t, ns, "u", ConditionDegraded, "True/"+ReasonPartitionsUnderReplicated,
		"5 partitions are held by fewer pods than the replication factor 3")

	// A restarted pod catches up from its peers: the 8 pairs it owns count too.
	dp.lagging.Store("u-1")
	underReplicated(13)
	waitClusterCondition(t, ns, "u", ConditionDegraded, "True/"+ReasonPartitionsUnderReplicated, "not answering: u-1")

	dp.underReplicated.Store(0)
	dp.lagging.Store("")
	underReplicated(0)
	waitClusterCondition(t, ns, "u", ConditionDegraded, "False/"+ReasonAsExpected, "")
}

// underReplicated adds to the largest count the pods report the pairs of each owner that has not
// caught up while nothing moves (its own count at the recorded epoch, else the average of the
// owners that report it) and of each owner that does not answer, and leaves out pods that own
// nothing, data planes from before placement, and pods that pull during a move.
func TestUnderReplicated(t *testing.T) {
	t.Parallel()
	targets := []memberPod{{addr: Pod{Name: "c-0"}}, {addr: Pod{Name: "c-1"}}, {addr: Pod{Name: "c-2"}}, {addr: Pod{Name: "c-3"}}}
	ok := func(epoch uint64, caughtUp bool, owned, under int) placementReport {
		return placementReport{status: wire.PlacementStatus{Epoch: epoch, CaughtUp: caughtUp, PartitionsOwned: owned, PartitionsUnderReplicated: under}}
	}
	down := placementReport{err: errors.New("connection refused")}
	old := placementReport{err: fmt.Errorf("pod c-x: %w", ErrPlacementUnsupported)}
	three := bloomeryv1alpha1.PartitionPlacement{Owners: []string{"c-0", "c-1", "c-2"}, ReplicationFactor: 2}
	four := bloomeryv1alpha1.PartitionPlacement{Owners: []string{"c-0", "c-1", "c-2", "c-3"}, ReplicationFactor: 2}
	tests := []struct {
		name      string
		placement bloomeryv1alpha1.PartitionPlacement
		previous  *bloomeryv1alpha1.PartitionPlacement
		reports   []placementReport
		lastOwned int64
		want      int64
		wantPods  []string
	}{
		{"all caught up", four, nil, []placementReport{ok(5, true, 10, 0), ok(5, true, 10, 0), ok(5, true, 10, 0), ok(5, true, 10, 0)}, 0, 0, nil},
		{"the largest reported", four, nil, []placementReport{ok(5, true, 10, 3), ok(4, true, 10, 7), ok(5, true, 10, 3), ok(5, true, 10, 0)}, 0, 7, nil},
		{"catching up at the epoch", four, nil, []placementReport{ok(5, true, 10, 2), ok(5, false, 12, 2), ok(5, true, 10, 2), ok(5, true, 10, 2)}, 0, 14, []string{"c-1"}},
		{"catching up, not told the epoch yet: the average", four, nil, []placementReport{ok(5, true, 10, 0), ok(0, false, 80, 0), ok(5, true, 11, 0), ok(5, true, 12, 0)}, 0, 11, []string{"c-1"}},
		{"not answering: the average", four, nil, []placementReport{ok(5, true, 10, 0), down, ok(5, true, 10, 0), ok(5, true, 10, 0)}, 0, 10, []string{"c-1"}},
		{"none answers at the epoch: the last sum over the owners", four, nil, []placementReport{down, down, ok(4, false, 30, 0), old}, 40, 30, []string{"c-0", "c-1", "c-2"}},
		{"a member that owns nothing", three, nil, []placementReport{ok(5, true, 10, 0), ok(5, true, 10, 0), ok(5, true, 10, 0), down}, 0, 0, nil},
		{"a data plane from before placement", four, nil, []placementReport{ok(5, true, 10, 0), old, ok(5, true, 10, 0), ok(5, true, 10, 0)}, 0, 0, nil},
		{"pulling during a move", three, &four, []placementReport{ok(5, false, 10, 0), ok(5, false, 10, 0), ok(5, true, 10, 0), ok(5, true, 0, 0)}, 0, 0, nil},
		{"not answering during a move, a previous owner", three, &four, []placementReport{ok(5, false, 10, 0), ok(5, true, 10, 0), ok(5, true, 10, 0), down}, 0, 10, []string{"c-3"}},
	}
	for _, tt := range tests {
		c := &bloomeryv1alpha1.BloomCluster{}
		c.Status.MembershipEpoch = 5
		c.Status.Placement = &bloomeryv1alpha1.ClusterPlacement{PartitionPlacement: tt.placement, Previous: tt.previous}
		got, pods := underReplicated(c, targets, tt.reports, tt.lastOwned)
		if got != tt.want || !slices.Equal(pods, tt.wantPods) {
			t.Errorf("%s: %d, pods %v; want %d, pods %v", tt.name, got, pods, tt.want, tt.wantPods)
		}
	}
}
