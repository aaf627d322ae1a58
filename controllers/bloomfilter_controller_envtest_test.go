package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// fakePod is a data-plane pod for envtest: a Pod object of the cluster's StatefulSet whose status
// the test sets, and a real data-plane server on loopback ports that stands for the pod's
// container, with the cluster's token.
type fakePod struct {
	name  string
	ports dataPlanePorts
	token string
	// tls, when set, serves the client and internal ports over TLS with the cluster's certificate.
	tls  *testTLS
	stop context.CancelFunc
	done chan error
	// client calls the public API on the client port, as applications do; internal calls the
	// internal port with the token, as the operator and the peers do.
	client, internal *client.Client
}

// internalURL is the pod's internal port, as a member of a membership.
func (p *fakePod) internalURL() string {
	return fmt.Sprintf("%s://127.0.0.1:%d", p.tls.scheme(), p.ports.internal)
}

// dataPlanePorts are the loopback ports of a test's data plane; 0 picks a free one.
type dataPlanePorts struct{ client, internal int }

// startDataPlaneServer runs a data plane with token on 127.0.0.1 (its ops port on a free port), in
// memory unless dataDir is given; then it snapshots every 100 ms after any write. With certs, it
// serves TLS from the files of the cluster's Secret.
func startDataPlaneServer(t testing.TB, ports dataPlanePorts, dataDir, token string, certs *testTLS) (dataPlanePorts, context.CancelFunc, chan error) {
	t.Helper()
	cfg := config.Default()
	cfg.InMemory = dataDir == ""
	cfg.DataDir = dataDir
	cfg.InternalTokenFile = tokenFile(t, token)
	if certs != nil {
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = certs.files.Cert, certs.files.Key, certs.files.CA
	}
	cfg.TriggerPersistenceCriteria = []config.TriggerPersistenceCriterion{{Period: 100 * time.Millisecond, UpdatesMoreThan: 0}}
	// Shutdown waits up to 5 s for a connection dialed but not yet used (net/http treats it as
	// active): the operator's keep-alive dials make that likely.
	cfg.GracefulShutdownTimeout = 10 * time.Second
	srv, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	listen := func(port int) net.Listener {
		ln, err := new(net.ListenConfig).Listen(t.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	ls := run.Listeners{Client: listen(ports.client), Internal: listen(ports.internal), Ops: listen(0)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ls) }()
	return dataPlanePorts{client: ls.Client.Addr().(*net.TCPAddr).Port, internal: ls.Internal.Addr().(*net.TCPAddr).Port}, cancel, done
}

// tokenFile writes token into a file of the test's and returns its path.
func tokenFile(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// addPod creates a ready Pod of the cluster's StatefulSet backed by a fresh data plane with the
// cluster's token, persistent if dataDir is given.
func addPod(t testing.TB, ns, cluster, name string, dataDir ...string) *fakePod {
	t.Helper()
	p := startFakePod(t, name, testToken(t, ns, cluster), strings.Join(dataDir, ""), nil)
	createPodOf(t, ns, cluster, p)
	return p
}

// createPodOf creates the ready Pod of the cluster's StatefulSet that p's data plane stands for.
func createPodOf(t testing.TB, ns, cluster string, p *fakePod) {
	t.Helper()
	name := p.name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: clusterLabels(cluster)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "dataplane", Image: "bloomery:test",
			Ports: []corev1.ContainerPort{
				{Name: httpPortName, ContainerPort: int32(p.ports.client)},
				{Name: internalPortName, ContainerPort: int32(p.ports.internal)},
			},
		}}},
	}
	ownedByStatefulSet(t, pod, ns, cluster)
	if err := k8s.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// startFakePod starts the data plane of a pod with token, over TLS with certs, stopped when the
// test ends.
func startFakePod(t testing.TB, name, token, dataDir string, certs *testTLS) *fakePod {
	t.Helper()
	ports, stop, done := startDataPlaneServer(t, dataPlanePorts{}, dataDir, token, certs)
	p := &fakePod{name: name, ports: ports, token: token, tls: certs, stop: stop, done: done}
	var opts []client.Option
	if certs != nil {
		opts = append(opts, client.WithHTTPClient(certs.httpClient()))
	}
	p.client = client.New(fmt.Sprintf("%s://127.0.0.1:%d", certs.scheme(), ports.client), opts...)
	p.internal = client.New(p.internalURL(), append(opts, client.Internal(token))...)
	t.Cleanup(func() { p.kill(t) })
	return p
}

// ownedByStatefulSet makes pod one of the cluster's StatefulSet, as the StatefulSet controller
// would.
func ownedByStatefulSet(t testing.TB, pod *corev1.Pod, ns, cluster string) {
	t.Helper()
	sts := testStatefulSet(t, ns, cluster)
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
}

// testStatefulSet returns the cluster's StatefulSet, and creates it as the operator would when
// its reconciler has not (or does not run in the test).
func testStatefulSet(t testing.TB, ns, cluster string) *appsv1.StatefulSet {
	t.Helper()
	c := &bloomeryv1alpha1.BloomCluster{}
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: cluster}, c); err != nil {
		t.Fatal(err)
	}
	return getOrCreateChild(t, c, buildStatefulSet(c, testImage, "", "", ""))
}

// testToken returns the cluster's token, and creates its Secret as the operator would when its
// reconciler has not (or does not run in the test).
func testToken(t testing.TB, ns, cluster string) string {
	t.Helper()
	c := &bloomeryv1alpha1.BloomCluster{}
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: cluster}, c); err != nil {
		t.Fatal(err)
	}
	desired, err := buildTokenSecret(c)
	if err != nil {
		t.Fatal(err)
	}
	token, err := tokenOf(getOrCreateChild(t, c, desired), c)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// getOrCreateChild creates desired, owned by the cluster, or returns the object of its name that
// exists already (the cluster's reconciler may have created it first).
func getOrCreateChild[T crclient.Object](t testing.TB, c *bloomeryv1alpha1.BloomCluster, desired T) T {
	t.Helper()
	if err := ctrl.SetControllerReference(c, desired, testScheme); err != nil {
		t.Fatal(err)
	}
	err := k8s.Create(t.Context(), desired)
	if apierrors.IsAlreadyExists(err) {
		err = k8s.Get(t.Context(), crclient.ObjectKeyFromObject(desired), desired)
	}
	if err != nil {
		t.Fatal(err)
	}
	return desired
}

// kill stops the pod's data plane: the pod stops answering.
func (p *fakePod) kill(t testing.TB) {
	t.Helper()
	if p.stop != nil {
		p.stop()
		if err := <-p.done; err != nil {
			t.Errorf("data plane of pod %s: %v", p.name, err)
		}
		p.stop = nil
	}
}

// restartEmpty starts a new, empty data plane on the same ports: a pod restarted without its volume.
func (p *fakePod) restartEmpty(t *testing.T) {
	t.Helper()
	p.kill(t)
	_, p.stop, p.done = startDataPlaneServer(t, p.ports, "", p.token, p.tls)
}

func createCluster(t testing.TB, ns, name string, replicas int32) {
	t.Helper()
	bc := &bloomeryv1alpha1.BloomCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       bloomeryv1alpha1.BloomClusterSpec{Replicas: new(replicas)},
	}
	if err := k8s.Create(t.Context(), bc); err != nil {
		t.Fatal(err)
	}
}

func createBloomFilter(t testing.TB, ns, name, cluster string, mutate ...func(*bloomeryv1alpha1.BloomFilter)) {
	t.Helper()
	bf := &bloomeryv1alpha1.BloomFilter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: bloomeryv1alpha1.BloomFilterSpec{
			ClusterRef:        bloomeryv1alpha1.ClusterReference{Name: cluster},
			Capacity:          10_000,
			FalsePositiveRate: "0.001",
		},
	}
	for _, m := range mutate {
		m(bf)
	}
	if err := k8s.Create(t.Context(), bf); err != nil {
		t.Fatal(err)
	}
}

func getBloomFilter(t testing.TB, ns, name string) *bloomeryv1alpha1.BloomFilter {
	t.Helper()
	var bf bloomeryv1alpha1.BloomFilter
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &bf); err != nil {
		t.Fatal(err)
	}
	return &bf
}

// startFilterReconciler runs the BloomFilter reconciler, with a short resync and counts written
// as soon as they move, in namespace ns.
func startFilterReconciler(t testing.TB, ns string) *writeCounter {
	t.Helper()
	return startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomFilterReconciler{
			Client:                  mgr.GetClient(),
			DataPlane:               NewHTTPDataPlane(2 * time.Second),
			Recorder:                mgr.GetEventRecorder("bloomfilter"),
			Resync:                  200 * time.Millisecond,
			CountsRefresh:           time.Nanosecond,
			PodParallelism:          4,
			MaxConcurrentReconciles: 4,
			DeleteGiveUp:            3 * time.Second,
		}).SetupWithManager(mgr)
	})
}

// condition returns "Status/Reason: message" of a condition, for waiting and for messages.
func condition(bf *bloomeryv1alpha1.BloomFilter, typ string) (metav1.ConditionStatus, string) {
	c := meta.FindStatusCondition(bf.Status.Conditions, typ)
	if c == nil {
		return "", "no " + typ + " condition"
	}
	return c.Status, fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
}

func waitCondition(t *testing.T, ns, name, typ string, want metav1.ConditionStatus, contains string) *bloomeryv1alpha1.BloomFilter {
	t.Helper()
	var bf *bloomeryv1alpha1.BloomFilter
	await.Until(t, 20*time.Second, fmt.Sprintf("BloomFilter %s %s=%s", name, typ, want), func() (bool, string) {
		bf = getBloomFilter(t, ns, name)
		status, detail := condition(bf, typ)
		return status == want && strings.Contains(detail, contains) && bf.Status.ObservedGeneration == bf.Generation, detail
	})
	return bf
}

func TestBloomFilterOnEveryPod(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 3)
	pods := []*fakePod{addPod(t, ns, "c", "c-0"), addPod(t, ns, "c", "c-1"), addPod(t, ns, "c", "c-2")}
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "users", "c")

	bf := waitCondition(t, ns, "users", ConditionReady, metav1.ConditionTrue, "all 3 pods")
	// Its copies carry its UID: it needs no finalizer.
	if len(bf.Finalizers) > 0 {
		t.Errorf("finalizers %v, want none", bf.Finalizers)
	}
	if want := "http://c." + ns + ".svc:8080/v1/bloomfilter/users"; bf.Status.URL != want {
		t.Errorf("url %q, want %q", bf.Status.URL, want)
	}
	for _, p := range pods {
		f, err := p.client.Get(t.Context(), "users")
		if err != nil || f.ExpectedInsertions != 10_000 || f.FPP != 0.001 || !f.Scalable || f.Expiration != "" || f.Owner != string(bf.UID) {
			t.Errorf("pod %s holds %+v, %v; want the spec's shape without expiry, owned by the BloomFilter's UID %s", p.name, f, err, bf.UID)
		}
	}
	// Values added on a pod show in status.
	if err := pods[1].client.MultiSet(t.Context(), "users", []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "items in status", func() (bool, string) {
		bf = getBloomFilter(t, ns, "users")
		return bf.Status.Items == 3 && len(bf.Status.Pods) == 3, fmt.Sprintf("items %d, pods %+v", bf.Status.Items, bf.Status.Pods)
	})
	if bf.Status.SizeBytes == 0 || bf.Status.FillRatio == "0" || bf.Status.EstimatedFalsePositiveRate == "" {
		t.Errorf("status %+v: want size, fill ratio and estimated rate", bf.Status)
	}
	if bf.Status.Partitions != 1 {
		t.Errorf("status.partitions %d, want 1: a filter of 10,000 values is not split", bf.Status.Partitions)
	}
	if bf.Status.LastSnapshotTime != nil {
		t.Errorf("lastSnapshotTime %v on pods that keep nothing on disk", bf.Status.LastSnapshotTime)
	}
}

// spec.partitions reaches the pods, and status reports what they hold. It needs a data plane that
// takes partitions in a create.
func TestBloomFilterWithPartitions(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "split", "c", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Spec.Partitions = new(int32(4)) })

	bf := waitCondition(t, ns, "split", ConditionReady, metav1.ConditionTrue, "all 2 pods")
	await.Until(t, 10*time.Second, "partitions in status", func() (bool, string) {
		bf = getBloomFilter(t, ns, "split")
		return bf.Status.Partitions == 4, fmt.Sprintf("status.partitions %d", bf.Status.Partitions)
	})
	for _, p := range pods {
		if f, err := p.client.Get(t.Context(), "split"); err != nil || f.Partitions != 4 {
			t.Errorf("pod %s holds %+v, %v; want 4 partitions", p.name, f, err)
		}
	}
	for _, p := range bf.Status.Pods {
		if p.PartitionsHeld != 4 || p.PartitionsOwned != 4 {
			t.Errorf("pod %s reports %d partitions held and %d owned; want all 4 without placement", p.Pod, p.PartitionsHeld, p.PartitionsOwned)
		}
	}
}

// heldDataPlane is the real data plane whose filter status plays a placement on its pods: pod
// c-0 holds 1 of the filter's 4 partitions, c-1 3 and c-2 2, with items and bytes in proportion;
// c-0 owns 2, as a new owner still pulling one, and c-1 and c-2 own 3.
type heldDataPlane struct{ DataPlane }

func (d heldDataPlane) FilterStatus(ctx context.Context, pod Pod, name string) (wire.FilterStatus, error) {
	f, err := d.DataPlane.FilterStatus(ctx, pod, name)
	if err != nil {
		return f, err
	}
	return placedOn(pod, f), nil
}

func (d heldDataPlane) FilterStatuses(ctx context.Context, pod Pod, version string, wait time.Duration) (wire.FilterStatuses, error) {
	st, err := d.DataPlane.FilterStatuses(ctx, pod, version, wait)
	for i := range st.Filters {
		st.Filters[i] = placedOn(pod, st.Filters[i])
	}
	return st, err
}

func placedOn(pod Pod, f wire.FilterStatus) wire.FilterStatus {
	held := map[string]int{"c-0": 1, "c-1": 3, "c-2": 2}[pod.Name]
	f.PartitionsHeld, f.Items, f.SizeBytes = held, 1000*uint64(held), 4096*uint64(held)
	f.PartitionsOwned = map[string]int{"c-0": 2, "c-1": 3, "c-2": 3}[pod.Name]
	return f
}

// With partitions placed on some pods only, each pod's status says how many it holds, and the
// filter's items and bytes are the pods' sums over the average number of copies of a partition.
func TestBloomFilterStatusOfPartitionsPlacedOnSomePods(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 3)
	addPod(t, ns, "c", "c-0")
	addPod(t, ns, "c", "c-1")
	addPod(t, ns, "c", "c-2")
	startManager(t, ns, func(mgr ctrl.Manager) error {
		return (&BloomFilterReconciler{
			Client:         mgr.GetClient(),
			DataPlane:      heldDataPlane{NewHTTPDataPlane(2 * time.Second)},
			Recorder:       mgr.GetEventRecorder("bloomfilter"),
			Resync:         200 * time.Millisecond,
			PodParallelism: 4,
		}).SetupWithManager(mgr)
	})
	createBloomFilter(t, ns, "placed", "c", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Spec.Partitions = new(int32(4)) })

	// 6 partitions held of 4: 1.5 copies of each; 6000 items and 24576 bytes summed.
	await.Until(t, 10*time.Second, "the sums over 1.5 copies in status", func() (bool, string) {
		bf := getBloomFilter(t, ns, "placed")
		held, owned := map[string]int32{}, map[string]int32{}
		for _, p := range bf.Status.Pods {
			held[p.Pod], owned[p.Pod] = p.PartitionsHeld, p.PartitionsOwned
		}
		return bf.Status.Items == 4000 && bf.Status.SizeBytes == 16384 && held["c-0"] == 1 && held["c-1"] == 3 && held["c-2"] == 2 &&
				owned["c-0"] == 2 && owned["c-1"] == 3 && owned["c-2"] == 3,
			fmt.Sprintf("items %d, size %d, pods %+v", bf.Status.Items, bf.Status.SizeBytes, bf.Status.Pods)
	})
}

// A snapshot changes when each pod last snapshotted, which status no longer copies: passes after
// one write nothing. (Each snapshot used to patch every filter of the cluster at once.)
func TestASnapshotPatchesNoFilter(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	pod := addPod(t, ns, "c", "c-0", t.TempDir())
	dp := newPassCounter()
	_, writes := startCountedFilterReconciler(t, ns, dp, 200*time.Millisecond)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 1 pods")
	// The status of a Ready filter on a pod without writes settles at once; the snapshot of the
	// filter's create may still be on its way.
	snapshotOf := func() string {
		f, err := pod.internal.FilterStatus(t.Context(), "f")
		if err != nil {
			t.Fatal(err)
		}
		return f.LastSnapshot
	}
	await.Until(t, 20*time.Second, "a first snapshot", func() (bool, string) { return snapshotOf() != "", "none" })
	awaitMorePasses(t, dp, "f", 2)
	before, first := writes.Load(), snapshotOf()

	// A write to another filter of the pod makes it snapshot: a new time for every filter.
	if _, _, err := pod.client.Create(t.Context(), "other", client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "a later snapshot", func() (bool, string) {
		if err := pod.client.Set(t.Context(), "other", "v"); err != nil {
			t.Fatal(err)
		}
		at := snapshotOf()
		return at > first, at
	})
	awaitMorePasses(t, dp, "f", 3)
	if got := writes.Load(); got != before {
		t.Errorf("%d writes after the snapshot, want none", got-before)
	}
	if bf := getBloomFilter(t, ns, "f"); bf.Status.LastSnapshotTime != nil {
		t.Errorf("lastSnapshotTime %v, which is no longer written", bf.Status.LastSnapshotTime)
	}
}

// awaitMorePasses waits for n more passes of the filter than it has made.
func awaitMorePasses(t *testing.T, dp *passCounter, name string, n int) {
	t.Helper()
	want := dp.passes(name) + n
	await.Until(t, 20*time.Second, fmt.Sprintf("%d more passes of %s", n, name), func() (bool, string) {
		return dp.passes(name) >= want, fmt.Sprint(dp.passes(name))
	})
}

func TestBloomFilterComesBackOnARestartedPod(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 2 pods")

	pods[1].restartEmpty(t)
	await.Until(t, 20*time.Second, "the filter back on the restarted pod", func() (bool, string) {
		_, err := pods[1].client.Get(t.Context(), "f")
		return err == nil, fmt.Sprint(err)
	})
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 2 pods")
}

// TestExpiryWorksAsRotation: a filter that expires on the pods is recreated empty, and status
// says when.
func TestExpiryWorksAsRotation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	pod := addPod(t, ns, "c", "c-0")
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "daily", "c", func(bf *bloomeryv1alpha1.BloomFilter) {
		bf.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterCreate: &metav1.Duration{Duration: time.Second}}
	})
	waitCondition(t, ns, "daily", ConditionReady, metav1.ConditionTrue, "")
	first, err := pod.client.Get(t.Context(), "daily")
	if err != nil || first.Expiration == "" {
		t.Fatalf("filter on the pod: %+v, %v; want one with an expiration", first, err)
	}
	if err := pod.client.Set(t.Context(), "daily", "old"); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "the filter recreated after it expired", func() (bool, string) {
		bf := getBloomFilter(t, ns, "daily")
		f, err := pod.client.Get(t.Context(), "daily")
		return bf.Status.LastRecreationTime != nil && err == nil && f.Created != first.Created,
			fmt.Sprintf("lastRecreationTime %v, pod %+v %v", bf.Status.LastRecreationTime, f.Created, err)
	})
}

func TestBloomFilterDegradedNamesThePodThatStopsAnswering(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 2 pods")

	pods[0].kill(t)
	bf := waitCondition(t, ns, "f", ConditionDegraded, metav1.ConditionTrue, "c-0")
	if status, detail := condition(bf, ConditionReady); status != metav1.ConditionFalse || !strings.Contains(detail, "c-0") {
		t.Errorf("Ready = %s, want False naming c-0", detail)
	}
	if status, detail := condition(bf, ConditionDegraded); strings.Contains(detail, "c-1") {
		t.Errorf("Degraded %s names the healthy pod c-1", status)
	}
}

func TestBloomFilterShapeMismatchIsReportedNotOverwritten(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 1)
	pod := addPod(t, ns, "c", "c-0")
	if _, _, err := pod.client.Create(t.Context(), "f", client.CreateOptions{ExpectedInsertions: new(uint64(5)), ValidPeriodAfterCreate: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := pod.client.Set(t.Context(), "f", "precious"); err != nil {
		t.Fatal(err)
	}
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionDegraded, metav1.ConditionTrue, "another shape")
	if present, err := pod.client.Check(t.Context(), "f", "precious"); err != nil || !present {
		t.Errorf("the pod's own filter was overwritten: %v, %v", present, err)
	}
}

func TestBloomFilterDeletion(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "deleted", "c")
	createBloomFilter(t, ns, "retained", "c", func(bf *bloomeryv1alpha1.BloomFilter) { bf.Spec.DeletionPolicy = bloomeryv1alpha1.Retain })
	deleted := waitCondition(t, ns, "deleted", ConditionReady, metav1.ConditionTrue, "")
	retained := waitCondition(t, ns, "retained", ConditionReady, metav1.ConditionTrue, "")
	// Under Delete its copies carry its UID, under Retain none: neither needs a finalizer.
	for _, bf := range []*bloomeryv1alpha1.BloomFilter{deleted, retained} {
		if len(bf.Finalizers) > 0 {
			t.Errorf("%s has finalizers %v, want none", bf.Name, bf.Finalizers)
		}
	}
	for _, p := range pods {
		if f, err := p.client.Get(t.Context(), "deleted"); err != nil || f.Owner != string(deleted.UID) {
			t.Errorf("pod %s holds %+v, %v; want the filter owned by %s", p.name, f, err, deleted.UID)
		}
		if f, err := p.client.Get(t.Context(), "retained"); err != nil || f.Owner != "" {
			t.Errorf("pod %s holds %+v, %v; want the retained filter without an owner", p.name, f, err)
		}
	}

	for _, name := range []string{"deleted", "retained"} {
		if err := k8s.Delete(t.Context(), getBloomFilter(t, ns, name)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ns, name)
	}
	waitCopies(t, pods, "deleted", false)
	for _, p := range pods {
		if _, err := p.client.Get(t.Context(), "retained"); err != nil {
			t.Errorf("pod %s lost the retained filter: %v", p.name, err)
		}
	}
}

// twoPodCluster makes a namespace holding the cluster c of two pods, c-0 and c-1.
func twoPodCluster(t *testing.T) (string, []*fakePod) {
	t.Helper()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 2)
	return ns, []*fakePod{addPod(t, ns, "c", "c-0"), addPod(t, ns, "c", "c-1")}
}

// waitCopies waits until every pod holds the filter name, or none does.
func waitCopies(t *testing.T, pods []*fakePod, name string, held bool) {
	t.Helper()
	await.Until(t, 20*time.Second, fmt.Sprintf("filter %s held %v on every pod", name, held), func() (bool, string) {
		for _, p := range pods {
			f, err := p.client.Get(t.Context(), name)
			if (err == nil) != held {
				return false, fmt.Sprintf("pod %s: %+v, %v", p.name, f, err)
			}
		}
		return true, ""
	})
}

// The copies of a BloomFilter that went while no operator saw it go (stopped, or the pod did not
// answer) are deleted once the pods' polls list them: those that carry a UID no BloomFilter of
// their name has. A copy without an owner, or of a BloomFilter retained, stays.
func TestCopiesOfABloomFilterThatIsGoneAreDeleted(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	const gone, retained = "0d7c5d2a-54a0-4c4e-8a37-6a1f2f1f0b9e", "5b0f4a8e-2c71-4d0e-9f3a-3e2d1c0b9a87"
	modify(t, &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}}, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Annotations = map[string]string{retainedAnnotationPrefix + retained: "kept"}
	})
	for _, p := range pods {
		for name, owner := range map[string]string{"orphan": gone, "kept": retained, "theirs": ""} {
			if _, _, err := p.client.Create(t.Context(), name, client.CreateOptions{Owner: owner}); err != nil {
				t.Fatal(err)
			}
		}
	}
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "users", "c") // its passes start the pods' polls
	waitCondition(t, ns, "users", ConditionReady, metav1.ConditionTrue, "")

	waitCopies(t, pods, "orphan", false)
	for _, name := range []string{"kept", "theirs", "users"} {
		waitCopies(t, pods, name, true)
	}
}

// A BloomFilter deleted and made again under its name gets new copies: those of the one deleted
// carry its UID, and go first.
func TestABloomFilterMadeAgainGetsItsOwnCopies(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "f", "c")
	first := waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "")
	if err := pods[0].client.MultiSet(t.Context(), "f", []string{"old"}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "f")
	createBloomFilter(t, ns, "f", "c")
	second := getBloomFilter(t, ns, "f")
	await.Until(t, 20*time.Second, "the new BloomFilter's copies on every pod", func() (bool, string) {
		for _, p := range pods {
			if f, err := p.client.Get(t.Context(), "f"); err != nil || f.Owner != string(second.UID) {
				return false, fmt.Sprintf("pod %s: %+v, %v", p.name, f, err)
			}
		}
		return true, ""
	})
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "")
	if present, err := pods[0].client.Check(t.Context(), "f", "old"); err != nil || present {
		t.Errorf("the new filter holds a value of the one deleted: %v, %v", present, err)
	}
}

// A BloomFilter whose policy becomes Retain after its copies were made with its UID gets the
// finalizer, and its deletion records the copies as retained on the cluster: they stay, where the
// copies of a BloomFilter deleted beside it go.
func TestRetainAfterTheCopiesWereMadeKeepsThem(t *testing.T) {
	t.Parallel()
	ns, pods := twoPodCluster(t)
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "kept", "c")
	createBloomFilter(t, ns, "dropped", "c")
	kept := waitCondition(t, ns, "kept", ConditionReady, metav1.ConditionTrue, "")
	waitCondition(t, ns, "dropped", ConditionReady, metav1.ConditionTrue, "")
	modify(t, kept, func(bf *bloomeryv1alpha1.BloomFilter) { bf.Spec.DeletionPolicy = bloomeryv1alpha1.Retain })
	waitFor(t, &bloomeryv1alpha1.BloomFilter{}, ns, "kept", func(bf *bloomeryv1alpha1.BloomFilter) (bool, string) {
		return slices.Contains(bf.Finalizers, filterFinalizer), fmt.Sprintf("finalizers %v", bf.Finalizers)
	})

	for _, name := range []string{"kept", "dropped"} {
		if err := k8s.Delete(t.Context(), getBloomFilter(t, ns, name)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ns, name)
	}
	var cluster bloomeryv1alpha1.BloomCluster
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "c"}, &cluster); err != nil {
		t.Fatal(err)
	}
	if got := cluster.Annotations[retainedAnnotationPrefix+string(kept.UID)]; got != "kept" {
		t.Errorf("cluster annotations %v, want %s%s: kept", cluster.Annotations, retainedAnnotationPrefix, kept.UID)
	}
	waitCopies(t, pods, "dropped", false)
	for _, p := range pods {
		if f, err := p.client.Get(t.Context(), "kept"); err != nil || f.Owner != string(kept.UID) {
			t.Errorf("pod %s holds %+v, %v; want the retained filter, still owned by %s", p.name, f, err, kept.UID)
		}
	}
}

func TestBloomFilterDeletionNeverHangs(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "gone", 1)
	pod := addPod(t, ns, "gone", "gone-0")
	// A filter the BloomFilter adopts carries no owner: the BloomFilter gets the finalizer.
	if _, _, err := pod.client.Create(t.Context(), "stuck", client.CreateOptions{ExpectedInsertions: new(uint64(10_000)), FPP: new(0.001)}); err != nil {
		t.Fatal(err)
	}
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "orphan", "gone")
	createBloomFilter(t, ns, "stuck", "gone")
	waitCondition(t, ns, "orphan", ConditionReady, metav1.ConditionTrue, "")
	if stuck := waitCondition(t, ns, "stuck", ConditionReady, metav1.ConditionTrue, ""); !slices.Contains(stuck.Finalizers, filterFinalizer) {
		t.Fatalf("a BloomFilter that adopted a filter has finalizers %v, want %s", stuck.Finalizers, filterFinalizer)
	}

	// The pod stops answering: the delete retries, then gives up after DeleteGiveUp.
	pod.kill(t)
	if err := k8s.Delete(t.Context(), getBloomFilter(t, ns, "stuck")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "stuck")

	// The cluster and its pods are gone: nothing to delete from.
	if err := k8s.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gone-0", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(t.Context(), &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "orphan", ConditionReady, metav1.ConditionFalse, ReasonClusterNotFound)
	if err := k8s.Delete(t.Context(), getBloomFilter(t, ns, "orphan")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "orphan")
}

func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	await.Until(t, 20*time.Second, "BloomFilter "+name+" deleted", func() (bool, string) {
		var bf bloomeryv1alpha1.BloomFilter
		err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &bf)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v, err %v", bf.Finalizers, err)
	})
}

// A pod that holds the filter but is not Ready (restarting, catching up from its peers) does not
// count as serving it: the filter is Degraded, served by the others, until the pod is Ready.
func TestBloomFilterNotServedByAPodThatIsNotReady(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createCluster(t, ns, "c", 2)
	addPod(t, ns, "c", "c-0")
	addPod(t, ns, "c", "c-1")
	startFilterReconciler(t, ns)
	createBloomFilter(t, ns, "f", "c")
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 2 pods")

	setPodReady(t, ns, "c-1", corev1.ConditionFalse)
	bf := waitCondition(t, ns, "f", ConditionDegraded, metav1.ConditionTrue, "served by 1 of 2 pods; not serving yet: c-1")
	if status, reason := condition(bf, ConditionReady); status != metav1.ConditionFalse {
		t.Errorf("Ready = %s (%s), want False while c-1 is not Ready", status, reason)
	}
	if c := meta.FindStatusCondition(bf.Status.Conditions, ConditionDegraded); c.Reason != ReasonPodsNotReady {
		t.Errorf("Degraded reason = %s, want %s", c.Reason, ReasonPodsNotReady)
	}

	setPodReady(t, ns, "c-1", corev1.ConditionTrue)
	waitCondition(t, ns, "f", ConditionReady, metav1.ConditionTrue, "all 2 pods")
	waitCondition(t, ns, "f", ConditionDegraded, metav1.ConditionFalse, "")
}

func setPodReady(t *testing.T, ns, name string, status corev1.ConditionStatus) {
	t.Helper()
	var pod corev1.Pod
	if err := k8s.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := k8s.Status().Update(t.Context(), &pod); err != nil {
		t.Fatal(err)
	}
}
