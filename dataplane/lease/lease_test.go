package lease

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/tick/ticktest"
)

// fakeLeases keeps Leases as the API server does: every write a new resourceVersion, an update
// from another version a conflict.
type fakeLeases struct {
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease
	rv     int
	// err, when set, fails every call.
	err error
	// during runs inside Update, before the write: the time a request spends on its way.
	during func()
}

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func newFakeLeases(names ...string) *fakeLeases {
	f := &fakeLeases{leases: map[string]*coordinationv1.Lease{}}
	for _, n := range names {
		f.put(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return f
}

func (f *fakeLeases) put(l *coordinationv1.Lease) *coordinationv1.Lease {
	f.rv++
	stored := l.DeepCopy()
	stored.ResourceVersion = strconv.Itoa(f.rv)
	f.leases[l.Name] = stored
	return stored.DeepCopy()
}

func (f *fakeLeases) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	l, ok := f.leases[name]
	if !ok {
		return nil, apierrors.NewNotFound(leaseResource, name)
	}
	return l.DeepCopy(), nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if f.during != nil {
		f.during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	old, ok := f.leases[l.Name]
	if !ok {
		return nil, apierrors.NewNotFound(leaseResource, l.Name)
	}
	if old.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(leaseResource, l.Name, errors.New("the object has been modified"))
	}
	return f.put(l), nil
}

// revoke does what the operator does to a lapsed lease.
func (f *fakeLeases) revoke(t *testing.T, name string, epoch uint64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[name].DeepCopy()
	l.Spec.HolderIdentity = nil
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[wire.LeaseRevokedAnnotation] = strconv.FormatUint(epoch, 10)
	f.put(l)
}

func (f *fakeLeases) stored(name string) *coordinationv1.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leases[name].DeepCopy()
}

const duration = 10 * time.Second

type fixture struct {
	clock  *ticktest.Clock
	leases *fakeLeases
	epoch  uint64
	r      *Renewer
}

func newFixture() *fixture {
	f := &fixture{clock: ticktest.NewClock(time.Unix(1_000_000, 0)), leases: newFakeLeases("alpha-0", "alpha-1")}
	f.r = New(Options{Leases: f.leases, Name: "alpha-0", Namespace: "ns", Duration: duration,
		Epoch: func() uint64 { return f.epoch }, Now: f.clock.Now})
	return f
}

func (f *fixture) renew(t *testing.T) {
	t.Helper()
	if err := f.r.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
}

// A pod holds its lease from its first renewal, for the duration less the drift bound counted
// from when the renewal was sent: a renewal that spent 2 s on its way counts from its sending.
func TestHeldForTheDurationLessDriftFromTheSending(t *testing.T) {
	t.Parallel()
	f := newFixture()
	if f.r.Held() {
		t.Fatal("Held before any renewal")
	}
	f.leases.during = func() { f.clock.Advance(2 * time.Second) }
	f.renew(t)
	f.leases.during = nil
	heldFor := time.Duration(float64(duration) * (1 - wire.LeaseDriftBound))
	// 2 s of the lease went by while the renewal travelled.
	f.clock.Advance(heldFor - 2*time.Second - time.Nanosecond)
	if !f.r.Held() {
		t.Fatalf("not held %v after the renewal was sent, less than %v", heldFor-time.Nanosecond, heldFor)
	}
	f.clock.Advance(time.Nanosecond)
	if f.r.Held() {
		t.Fatalf("still held %v after the renewal was sent", heldFor)
	}
	// A renewal holds it again.
	f.renew(t)
	if !f.r.Held() {
		t.Fatal("not held after a renewal")
	}
}

// The first renewal takes the lease the operator made: holder, duration, times and a transition,
// which `kubectl get leases` shows.
func TestRenewTakesTheLease(t *testing.T) {
	t.Parallel()
	f := newFixture()
	f.renew(t)
	l := f.leases.stored("alpha-0")
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "alpha-0" {
		t.Errorf("holderIdentity = %v, want alpha-0", l.Spec.HolderIdentity)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 10 {
		t.Errorf("leaseDurationSeconds = %v, want 10", l.Spec.LeaseDurationSeconds)
	}
	if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(f.clock.Now()) || l.Spec.AcquireTime == nil {
		t.Errorf("renewTime, acquireTime = %v, %v; want both set, renewTime %v", l.Spec.RenewTime, l.Spec.AcquireTime, f.clock.Now())
	}
	if l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
		t.Errorf("leaseTransitions = %v, want 1", l.Spec.LeaseTransitions)
	}
	acquired := *l.Spec.AcquireTime
	f.clock.Advance(f.r.Interval())
	f.renew(t)
	l = f.leases.stored("alpha-0")
	if !l.Spec.AcquireTime.Equal(&acquired) || *l.Spec.LeaseTransitions != 1 || !l.Spec.RenewTime.Time.Equal(f.clock.Now()) {
		t.Errorf("a renewal moved acquireTime or leaseTransitions, or not renewTime: %+v", l.Spec)
	}
}

// A renewal that fails leaves the lease held until it lapses, and is counted.
func TestFailedRenewalsCountAndTheLeaseLapses(t *testing.T) {
	t.Parallel()
	f := newFixture()
	f.renew(t)
	f.leases.err = errors.New("connection refused")
	for range 2 {
		f.clock.Advance(f.r.Interval())
		if err := f.r.Renew(t.Context()); err == nil {
			t.Fatal("Renew succeeded against an API that refuses")
		}
		if !f.r.Held() {
			t.Fatalf("not held %v after the last renewal", f.clock.Now().Sub(time.Unix(1_000_000, 0)))
		}
	}
	if got := f.r.Failures(); got != 2 {
		t.Errorf("Failures = %d, want 2", got)
	}
	f.clock.Advance(f.r.Interval())
	if f.r.Held() {
		t.Error("held a full duration after the last renewal")
	}
	f.leases.err = nil
	f.renew(t)
	if !f.r.Held() {
		t.Error("not held after the API answered again")
	}
}

// The operator's revocation changes the lease's version: the next renewal conflicts, reads the
// revocation and gives the lease up at once, and takes it again only at the epoch it names.
func TestRevokedLeaseWaitsForTheEpoch(t *testing.T) {
	t.Parallel()
	f := newFixture()
	f.epoch = 4
	f.renew(t)
	f.leases.revoke(t, "alpha-0", 5)
	err := f.r.Renew(t.Context())
	if !errors.Is(err, ErrRevoked) {
		t.Fatalf("Renew after a revocation: %v, want ErrRevoked", err)
	}
	if f.r.Held() {
		t.Error("held after the revocation was read")
	}
	if l := f.leases.stored("alpha-0"); l.Spec.HolderIdentity != nil || l.Annotations[wire.LeaseRevokedAnnotation] != "5" {
		t.Errorf("the pod overwrote the revocation: %+v %v", l.Spec, l.Annotations)
	}
	if got := f.r.Failures(); got != 0 {
		t.Errorf("Failures = %d, want 0: a revocation is not a failure to reach the API", got)
	}
	// Still at epoch 4: nothing changes, however often it tries.
	if err := f.r.Renew(t.Context()); !errors.Is(err, ErrRevoked) || f.r.Held() {
		t.Fatalf("Renew at epoch 4: %v, held %v; want ErrRevoked, not held", err, f.r.Held())
	}
	f.epoch = 5
	f.renew(t)
	if !f.r.Held() {
		t.Error("not held at the revocation's epoch")
	}
	l := f.leases.stored("alpha-0")
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "alpha-0" || l.Annotations[wire.LeaseRevokedAnnotation] != "" {
		t.Errorf("retaken lease: holder %v, annotations %v; want alpha-0 and no revocation", l.Spec.HolderIdentity, l.Annotations)
	}
	if *l.Spec.LeaseTransitions != 2 {
		t.Errorf("leaseTransitions = %d, want 2", *l.Spec.LeaseTransitions)
	}
}

// A lease someone else holds is not taken over.
func TestLeaseOfAnotherHolderIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture()
	f.leases.mu.Lock()
	l := f.leases.leases["alpha-0"].DeepCopy()
	l.Spec.HolderIdentity = new("someone")
	f.leases.put(l)
	f.leases.mu.Unlock()
	if err := f.r.Renew(t.Context()); err == nil || f.r.Held() {
		t.Fatalf("Renew of a lease held by someone: %v, held %v; want an error, not held", err, f.r.Held())
	}
	if l := f.leases.stored("alpha-0"); *l.Spec.HolderIdentity != "someone" {
		t.Errorf("holderIdentity = %q, want someone's kept", *l.Spec.HolderIdentity)
	}
}

// countingHandler counts the records logged at each level.
type countingHandler struct {
	mu     sync.Mutex
	counts map[slog.Level]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Level]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) warnings() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[slog.LevelWarn]
}

// Each failure is logged while the lease is still held; once it is lost, one in quietEvery is,
// so that a pod that never reaches the API says so without a line every few seconds.
func TestFailedRenewalsAreLoggedWithoutFlooding(t *testing.T) {
	t.Parallel()
	f := newFixture()
	h := &countingHandler{counts: map[slog.Level]int{}}
	f.r.opts.Log = slog.New(h)
	f.renew(t)
	f.leases.err = errors.New("connection refused")
	for range 2 { // within the lease: both logged
		f.clock.Advance(f.r.Interval())
		_ = f.r.Renew(t.Context())
	}
	if got := h.warnings(); got != 2 {
		t.Fatalf("%d warnings for 2 failures while held, want 2", got)
	}
	f.clock.Advance(duration) // lost
	for range quietEvery {
		_ = f.r.Renew(t.Context())
	}
	// Failures 3 to 32 in a row, the lease lost: the 31st alone is logged.
	if got := h.warnings(); got != 3 {
		t.Errorf("%d warnings after %d more failures without the lease, want 3", got, quietEvery)
	}
}

func TestAPIConfigReadsTheKubeconfigNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.7:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: the-pods-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := apiConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://192.0.2.7:6443" || cfg.BearerToken != "the-pods-token" {
		t.Errorf("host %q, token %q: want the kubeconfig's", cfg.Host, cfg.BearerToken)
	}
	if _, err := apiConfig(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Errorf("a missing kubeconfig: %v, want an error naming KUBECONFIG", err)
	}
}

// A pod whose lease was revoked takes it back as soon as it holds the epoch the revocation names,
// when its membership changes, not at its next renewal: readmitted, it is home again at once, and
// refuses check-and-sets until it holds its lease.
func TestRunRenewsWhenTheMembershipChanges(t *testing.T) {
	t.Parallel()
	f := newFixture()
	f.epoch = 4
	f.renew(t)
	f.leases.revoke(t, "alpha-0", 5)
	var epoch atomic.Uint64
	epoch.Store(4)
	changed := make(chan struct{})
	// A lease of ten minutes: its renewals come every 200 s, long after the test.
	logged := &countingHandler{counts: map[slog.Level]int{}}
	r := New(Options{Leases: f.leases, Name: "alpha-0", Namespace: "ns", Duration: 10 * time.Minute,
		Epoch: epoch.Load, Now: f.clock.Now, Log: slog.New(logged), EpochChanged: func() <-chan struct{} { return changed }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	await.True(t, 10*time.Second, "the first renewal to find the revocation (its warning)", func() bool { return logged.warnings() > 0 })
	if r.Held() {
		t.Fatal("held at epoch 4 after a revocation for epoch 5")
	}
	epoch.Store(5)
	close(changed)
	await.True(t, 10*time.Second, "the lease taken back once the pod holds epoch 5", r.Held)
}
