package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// filterFinalizer removes the filter from the pods before its BloomFilter goes away, where the
// copies' owner marks cannot (orphans.go).
const filterFinalizer = "bloomery.io/filter-cleanup"

// BloomFilterReconciler makes a filter exist on every pod of its cluster and reports what the
// pods hold. Status is recomputed on every pass from what the pods report: their polls
// (statuswatch.go) requeue a filter whose status changed on a pod, and passes repeat every Resync
// as a safety net.
type BloomFilterReconciler struct {
	Client client.Client
	// APIReader reads past Client's cache, which holds no Secret but the operator's own tokens:
	// the clusters' spec.tls Secrets are read through it, and kept for tlsRetry; nil means Client.
	APIReader client.Reader
	// DataPlane reaches the pods; nil means HTTP with a 5 s timeout.
	DataPlane DataPlane
	// Recorder records the filters' events; nil records none.
	Recorder recorder.EventRecorder
	// Resync is the period of the passes that keep status true between events, a safety net
	// behind the pods' polls; 0 means 10 min.
	Resync time.Duration
	// PodParallelism bounds the concurrent calls of one pass to the pods; 0 means 8.
	PodParallelism int
	// MaxConcurrentReconciles is how many BloomFilters are reconciled at once; 0 means 1.
	MaxConcurrentReconciles int
	// DeleteGiveUp is how long a delete keeps retrying pods that do not answer before it lets
	// the BloomFilter go anyway, so that deletion never hangs on a broken pod; 0 means 2 min.
	DeleteGiveUp time.Duration
	// CountsRefresh is the shortest time between two writes of a filter's status that change
	// its counts alone (bloomfilter_counts.go); 0 means 1 min.
	CountsRefresh time.Duration

	// countsWritten holds, by BloomFilter UID, when its counts were last written.
	countsWritten sync.Map
	// own holds the versions of the BloomFilters the reconciler wrote that the cache has not
	// caught up with.
	own ownWrites
	// tlsSecrets holds the clusters' spec.tls Secrets, read past the cache, for a few seconds.
	tlsSecrets tlsSecrets
	// watch polls the pods for their filters' statuses (statuswatch.go); nil, as in a reconciler
	// built without SetupWithManager, has every pass call the pods.
	watch *statusWatch
	// deleted holds the BloomFilters seen deleted whose copies are to go (orphans.go).
	deleted deletedFilters
}

func (r *BloomFilterReconciler) dataPlane() DataPlane { return dataPlaneOr(r.DataPlane) }

func (r *BloomFilterReconciler) apiReader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

func (r *BloomFilterReconciler) events() recorder.EventRecorder { return orNoop(r.Recorder) }

func (r *BloomFilterReconciler) resync() time.Duration {
	return positiveOr(r.Resync, defaultFilterResync)
}

func (r *BloomFilterReconciler) deleteGiveUp() time.Duration {
	return positiveOr(r.DeleteGiveUp, defaultDeleteGiveUp)
}

func (r *BloomFilterReconciler) countsRefresh() time.Duration {
	return positiveOr(r.CountsRefresh, defaultCountsRefresh)
}

func (r *BloomFilterReconciler) podParallelism() int {
	return positiveOr(r.PodParallelism, defaultPodParallelism)
}

// The finalizer is written with an Update of the BloomFilter itself; bloomfilters/finalizers
// would only matter to an object that names a BloomFilter as a blocking owner, and none does.
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomfilters,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomfilters/status,verbs=update
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one BloomFilter's pods and status in line.
func (r *BloomFilterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bf bloomeryv1alpha1.BloomFilter
	err := r.Client.Get(ctx, req.NamespacedName, &bf)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	orphansErr := r.dropOrphans(ctx, req.NamespacedName, bf.UID)
	if err != nil { // not found: what is left is its copies
		return ctrl.Result{}, orphansErr
	}
	if orphansErr != nil {
		log.FromContext(ctx).Info("Deleting the filter of a BloomFilter that is gone from the pods failed; will retry", "error", orphansErr.Error())
	}
	if r.own.behind(&bf) {
		return ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	}
	if !bf.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &bf)
	}
	original := bf.DeepCopy()
	result, err := r.reconcile(ctx, &bf)
	// The status write is locked to the version the pass last saw: its own update (the
	// finalizer) is not a concurrent change.
	original.ResourceVersion = bf.ResourceVersion
	last, _ := r.countsWritten.Load(bf.UID)
	lastWrite, _ := last.(time.Time)
	countsChanged := settleCounts(&original.Status, &bf.Status, lastWrite, time.Now(), r.countsRefresh())
	perr := r.writeStatus(ctx, original, &bf)
	if countsChanged && perr == nil {
		r.countsWritten.Store(bf.UID, time.Now())
	}
	if orphansErr != nil && (result.RequeueAfter == 0 || result.RequeueAfter > orphansRetry) {
		result.RequeueAfter = orphansRetry
	}
	return statusPatched(ctx, "BloomFilter", &bf, result, err, perr)
}

// reconcile runs the steps of one pass; the caller writes the status they computed.
func (r *BloomFilterReconciler) reconcile(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) (ctrl.Result, error) {
	gen := bf.Generation
	if bf.Annotations[PauseAnnotation] == "true" {
		setCondition(&bf.Status.Conditions, gen, ConditionProgressing, metav1.ConditionFalse, ReasonPaused,
			"Reconciliation is paused by the "+PauseAnnotation+" annotation")
		return ctrl.Result{}, nil
	}
	bf.Status.ObservedGeneration = gen
	cluster, err := r.clusterOf(ctx, bf)
	if err != nil {
		return ctrl.Result{}, err
	}
	bf.Status.URL = bf.URL(cluster) // https with the cluster's spec.tls

	shape, err := shapeOf(bf.Spec)
	if err != nil {
		r.fail(bf, ReasonInvalidSpec, err.Error())
		return ctrl.Result{}, nil // a new spec brings a new pass
	}
	if cluster == nil {
		bf.Status.Pods = nil
		r.fail(bf, ReasonClusterNotFound, fmt.Sprintf("BloomCluster %s does not exist in namespace %s", bf.Spec.ClusterRef.Name, bf.Namespace))
		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}
	token, err := clusterToken(ctx, r.Client, cluster)
	if errors.Is(err, errNoToken) {
		r.fail(bf, ReasonNoInternalToken, fmt.Sprintf("BloomCluster %s has %v", cluster.Name, err))
		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	podTLS, err := r.tlsSecrets.get(ctx, r.apiReader(), cluster)
	if errors.Is(err, errNoTLS) {
		// No call at all rather than one in plain HTTP, which would send the token in clear.
		r.fail(bf, ReasonTLSSecretNotUsable, fmt.Sprintf("BloomCluster %s has %v", cluster.Name, err))
		return ctrl.Result{RequeueAfter: min(r.resync(), tlsRetry)}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	pods, _, err := sharedClusterPods(ctx, r.Client, cluster) // the cluster reports the ignored ones
	if err != nil {
		return ctrl.Result{}, err
	}
	observed := r.ensureOnPods(ctx, bf, pods, shape, token, podTLS)
	if marksDisagree(bf, observed) && !controllerutil.ContainsFinalizer(bf, filterFinalizer) {
		// Update, not patch: a concurrent change of the object must make this pass retry.
		controllerutil.AddFinalizer(bf, filterFinalizer)
		if err := r.Client.Update(ctx, bf); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to BloomFilter: %w", err)
		}
		r.own.wrote(bf)
	}
	r.report(bf, cluster, observed)
	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// clusterOf reads the BloomCluster the filter names; nil when it does not exist. It is the cache's
// own object, not a copy, which the caller must not change: each pass of thousands of filters reads
// it.
func (r *BloomFilterReconciler) clusterOf(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) (*bloomeryv1alpha1.BloomCluster, error) {
	var cluster bloomeryv1alpha1.BloomCluster
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: bf.Namespace, Name: bf.Spec.ClusterRef.Name}, &cluster,
		client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting BloomCluster: %w", err)
	}
	return &cluster, nil
}

// shapeOf turns the spec into the data plane's create parameters.
func shapeOf(spec bloomeryv1alpha1.BloomFilterSpec) (FilterShape, error) {
	fpp, err := strconv.ParseFloat(spec.FalsePositiveRate, 64)
	if err != nil || !(fpp > 0 && fpp < 1) {
		return FilterShape{}, fmt.Errorf("falsePositiveRate %q is not a decimal in (0, 1)", spec.FalsePositiveRate)
	}
	shape := FilterShape{Capacity: uint64(spec.Capacity), FPP: fpp, Scalable: spec.Scalable == nil || *spec.Scalable, Growth: 2}
	if spec.Growth != nil {
		shape.Growth = uint(*spec.Growth)
	}
	if spec.Partitions != nil {
		shape.Partitions = int(*spec.Partitions)
	}
	if e := spec.Expiry; e != nil {
		if e.AfterCreate != nil {
			shape.ValidPeriodAfterCreate = int64(e.AfterCreate.Seconds())
		}
		if e.AfterAccess != nil {
			shape.ValidPeriodAfterAccess = int64(e.AfterAccess.Seconds())
		}
	}
	return shape, nil
}

// podObservation is what one pass learnt of one pod.
type podObservation struct {
	status  bloomeryv1alpha1.PodFilterStatus
	filter  wire.FilterStatus
	created bool
	// Exactly one of these holds for a pod without the filter: it is starting (no IP yet, or
	// not Ready while it recovers), it does not answer, or it holds another shape.
	waiting, unreachable, mismatch bool
}

// ensureOnPods creates the filter on every pod that lacks it and reads every pod's copy, with
// bounded parallelism. A pod that fails is reported, never a reason to stop the others.
func (r *BloomFilterReconciler) ensureOnPods(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter, pods []corev1.Pod, shape FilterShape,
	token string, podTLS *ClusterTLS) []podObservation {
	observed := make([]podObservation, len(pods))
	var g errgroup.Group
	g.SetLimit(r.podParallelism())
	for i := range pods {
		g.Go(func() error {
			observed[i] = r.observePod(ctx, bf, &pods[i], shape, token, podTLS)
			return nil
		})
	}
	_ = g.Wait()
	slices.SortFunc(observed, func(a, b podObservation) int { return strings.Compare(a.status.Pod, b.status.Pod) })
	return observed
}

func (r *BloomFilterReconciler) observePod(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter, pod *corev1.Pod, shape FilterShape, token string, podTLS *ClusterTLS) podObservation {
	name := bf.Name
	o := podObservation{status: bloomeryv1alpha1.PodFilterStatus{Pod: pod.Name}}
	addr, ok := podAddress(pod, token, podTLS)
	if !ok {
		o.waiting, o.status.Message = true, "pod has no IP yet ("+string(pod.Status.Phase)+")"
		return o
	}
	ready := podReady(pod)
	f, err := r.filterStatus(ctx, pod, addr, name)
	if errors.Is(err, ErrFilterNotFound) && ready {
		// Only on a Ready pod: one still catching up from its peers may lack a filter they hold,
		// and it would refuse the create anyway.
		f, o.created, err = r.dataPlane().CreateFilter(ctx, addr, name, ownerMark(bf), shape)
		r.watch.createdOnPod(pod, name, f, err)
	}
	switch {
	case err != nil && !ready:
		// A pod recovering its data answers 503 until it is Ready: it is starting, not broken.
		o.waiting, o.status.Message = true, "pod is not Ready: "+err.Error()
		return o
	case err != nil:
		o.unreachable, o.status.Message = true, "unreachable: "+err.Error()
		return o
	}
	o.filter = f
	if owner := types.UID(f.Owner); owner != "" && owner != bf.UID {
		// A deleted BloomFilter's, which dropOrphans deletes before the next pass creates this one.
		o.waiting, o.status.Message = true, fmt.Sprintf("holds a filter of this name made for another BloomFilter (UID %s), which is to be deleted", owner)
		return o
	}
	if !shape.Matches(f) {
		o.mismatch = true
		o.status.Message = fmt.Sprintf("holds a filter of another shape (capacity %d, fpp %v, scalable %v, partitions %d); it is left alone",
			f.ExpectedInsertions, f.FPP, f.Scalable, partitionsOf(f))
		return o
	}
	o.status.Present = true
	o.status.Items = int64(f.Items)
	o.status.SizeBytes = int64(f.SizeBytes)
	o.status.PartitionsHeld = int32(partitionsHeldOf(f))
	o.status.PartitionsOwned = int32(min(f.PartitionsOwned, partitionsOf(f)))
	if !ready {
		// It holds the filter, but the Service sends it nothing, and with several pods it may
		// not have caught up from its peers: it does not count as serving the filter.
		o.waiting, o.status.Message = true, "holds the filter, but the pod is not Ready (starting, catching up from its peers, or shutting down)"
	}
	return o
}

// filterStatus is the pod's status of the filter: from the pod's poll while it is fresh, else
// from the pod.
func (r *BloomFilterReconciler) filterStatus(ctx context.Context, pod *corev1.Pod, addr Pod, name string) (wire.FilterStatus, error) {
	if f, held, fresh := r.watch.status(pod, addr, name); fresh {
		if held {
			return f, nil
		}
		return wire.FilterStatus{}, ErrFilterNotFound
	}
	return r.dataPlane().FilterStatus(ctx, addr, name)
}

// report writes the pass's observations into status and conditions, and records events for
// what changed on the pods. What it writes is decided by summarize and the condition functions.
func (r *BloomFilterReconciler) report(bf *bloomeryv1alpha1.BloomFilter, cluster *bloomeryv1alpha1.BloomCluster, observed []podObservation) {
	wasPresent := map[string]bool{}
	heldBefore := false
	for _, p := range bf.Status.Pods {
		wasPresent[p.Pod] = p.Present
		heldBefore = heldBefore || p.Present
	}
	s := summarize(cluster.Name, cluster.DesiredReplicas(), observed, wasPresent)
	bf.Status.Pods = append(bf.Status.Pods[:0], s.pods...)
	for _, pod := range s.recreated {
		now := metav1.Now()
		bf.Status.LastRecreationTime = &now
		r.events().Eventf(bf, nil, corev1.EventTypeNormal, "Recreated", "Recreate",
			"Recreated the filter on pod %s, which had lost it (expired or restarted without its volume)", pod)
	}
	// A filter's first creation on its pods is what its BloomFilter asked for, and Ready says it is
	// done: an event of it would be one more API write per filter, thousands when thousands of
	// filters are created at once. A pod that gets it later (the cluster grew) is news.
	if len(s.created) > 0 && heldBefore {
		r.events().Eventf(bf, nil, corev1.EventTypeNormal, "Created", "Create", "Created the filter on pods %s", strings.Join(s.created, ", "))
	}
	bf.Status.Items, bf.Status.SizeBytes, bf.Status.Partitions = s.items, s.size, s.partitions
	bf.Status.FillRatio, bf.Status.EstimatedFalsePositiveRate = formatRate(s.fill), formatRate(s.fpr)
	// Deprecated, and cleared: copying the pods' snapshot times made every snapshot patch every
	// filter. The pods' metrics report their snapshots.
	bf.Status.LastSnapshotTime = nil
	for _, c := range []metav1.Condition{degradedCondition(s), readyCondition(s), progressingCondition(s)} {
		setCondition(&bf.Status.Conditions, bf.Generation, c.Type, c.Status, c.Reason, c.Message)
	}
}

// notServing names the pods that do not serve the filter, and how many are missing altogether.
func notServing(observed []podObservation, desired int32) []string {
	var out []string
	for _, o := range observed {
		if o.waiting {
			out = append(out, o.status.Pod)
		}
	}
	if missing := int(desired) - len(observed); missing > 0 {
		out = append(out, fmt.Sprintf("%d pod(s) not created yet", missing))
	}
	return out
}

// fail reports a state in which nothing can be done on the pods.
func (r *BloomFilterReconciler) fail(bf *bloomeryv1alpha1.BloomFilter, reason, message string) {
	gen := bf.Generation
	setCondition(&bf.Status.Conditions, gen, ConditionReady, metav1.ConditionFalse, reason, message)
	setCondition(&bf.Status.Conditions, gen, ConditionProgressing, metav1.ConditionFalse, reason, message)
	setCondition(&bf.Status.Conditions, gen, ConditionDegraded, metav1.ConditionTrue, reason, message)
}

// formatRate writes a rate with four significant digits, as a decimal string: the API avoids
// floats.
func formatRate(x float64) string {
	return strconv.FormatFloat(x, 'g', 4, 64)
}

// writeStatus writes the status once, and only if the pass changed it, locked to the version the
// pass saw (bf's): a status computed from a stale object must not overwrite a newer one. It is a
// whole status, not a merge patch: under that lock both write the same, and the API server spent a
// third of a merge patch's cost on applying it, with thousands of filters created at once.
func (r *BloomFilterReconciler) writeStatus(ctx context.Context, original, bf *bloomeryv1alpha1.BloomFilter) error {
	if equality.Semantic.DeepEqual(original.Status, bf.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, bf); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing BloomFilter status: %w", err)
	}
	r.own.wrote(bf)
	return nil
}

// finalize removes the filter from the pods unless the policy retains it, then lets the object
// go. It gives up on pods that keep failing after DeleteGiveUp, so deletion never hangs.
func (r *BloomFilterReconciler) finalize(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(bf, filterFinalizer) {
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx)
	// Under Retain its copies may carry its mark, made before the policy changed: they must
	// outlive it.
	cleanUp := r.markRetainedCopies
	if bf.Spec.DeletionPolicy != bloomeryv1alpha1.Retain {
		cleanUp = r.deleteOrGiveUp
	}
	if err := cleanUp(ctx, bf); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(bf, filterFinalizer)
	if err := r.Client.Update(ctx, bf); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.countsWritten.Delete(bf.UID)
	// A pass the pods' polls bring before the cache learns that the object went would delete the
	// filter from the pods, and the finalizer, again.
	r.own.removedFinalizer(bf, filterFinalizer)
	logger.Info("Finalized BloomFilter", "deletionPolicy", bf.Spec.DeletionPolicy)
	return ctrl.Result{}, nil
}

// deleteOrGiveUp deletes the filter from the pods, and fails while some pod fails, until
// DeleteGiveUp after the deletion began: then it records that it gave up on them.
func (r *BloomFilterReconciler) deleteOrGiveUp(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) error {
	failed, err := r.deleteFromPods(ctx, bf)
	if err != nil || len(failed) == 0 {
		return err
	}
	if time.Since(bf.DeletionTimestamp.Time) < r.deleteGiveUp() {
		return fmt.Errorf("deleting the filter from pods %s: will retry", strings.Join(failed, ", "))
	}
	r.events().Eventf(bf, nil, corev1.EventTypeWarning, "DeleteIncomplete", "Delete",
		"Gave up deleting the filter from pods %s after %v; they may still hold it", strings.Join(failed, ", "), r.deleteGiveUp())
	return nil
}

// deleteFromPods deletes the filter on every pod that has an address and returns the pods that
// failed. A missing cluster or a pod without an IP holds nothing to delete; without the cluster's
// token, or its usable TLS Secret with spec.tls, every pod with an address fails.
func (r *BloomFilterReconciler) deleteFromPods(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) ([]string, error) {
	cluster, err := r.clusterOf(ctx, bf)
	if err != nil || cluster == nil {
		return nil, err // without a cluster, its pods went with it
	}
	pods, _, err := sharedClusterPods(ctx, r.Client, cluster)
	if err != nil {
		return nil, err
	}
	token, err := clusterToken(ctx, r.Client, cluster)
	noToken := errors.Is(err, errNoToken)
	if err != nil && !noToken {
		return nil, err
	}
	podTLS, err := r.tlsSecrets.get(ctx, r.apiReader(), cluster)
	noTLS := errors.Is(err, errNoTLS)
	if err != nil && !noTLS {
		return nil, err
	}
	var mu sync.Mutex
	var failed []string
	var g errgroup.Group
	g.SetLimit(r.podParallelism())
	for i := range pods {
		addr, ok := podAddress(&pods[i], token, podTLS)
		switch {
		case !ok:
			continue
		case noToken || noTLS: // no pod can be asked; they are retried, then given up on, as unreachable ones
			failed = append(failed, addr.Name)
			continue
		}
		g.Go(func() error {
			if _, err := r.dataPlane().DeleteFilter(ctx, addr, bf.Name, ""); err != nil {
				mu.Lock()
				failed = append(failed, addr.Name)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	slices.Sort(failed)
	// No event of a deletion that went as asked: the BloomFilter goes with it, and the log says so.
	return failed, nil
}

// podServingChanged passes the pod events that change what a pass of the cluster's filters does:
// a pod created or deleted, or one whose address, phase or readiness changed. Every other update
// of a pod (its status's timestamps, a container's restart count) would requeue every filter of
// the cluster for nothing.
var podServingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Pod)
		pod, okNew := e.ObjectNew.(*corev1.Pod)
		if !okOld || !okNew {
			return true
		}
		return old.Status.PodIP != pod.Status.PodIP || old.Status.Phase != pod.Status.Phase || podReady(old) != podReady(pod)
	},
}

// SetupWithManager watches BloomFilters, and the pods, clusters and token Secrets they depend on:
// a pod that restarts, a cluster that scales or a token that appears requeues every filter of
// that cluster. The predicates (predicates.go) let through only the events that change a pass.
func (r *BloomFilterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("bloomfilter-controller")
	}
	filtersOfCluster := func(ctx context.Context, namespace, cluster string) []reconcile.Request {
		var list bloomeryv1alpha1.BloomFilterList
		// Only their names are read: the cache's own objects, not copies.
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{clusterRefIndex: cluster},
			client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "Listing BloomFilters of a cluster failed", "cluster", cluster)
			return nil
		}
		requests := make([]reconcile.Request, len(list.Items))
		for i, bf := range list.Items {
			requests[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: bf.Namespace, Name: bf.Name}}
		}
		return requests
	}
	// A poll brings the counts once per wait: half the counts' refresh period, so that a pass
	// that may write them has them at most that old, within what a pod may be asked to wait.
	wait := min(max(r.countsRefresh()/2, time.Second), wire.MaxStatusesWait*time.Second)
	r.watch = newStatusWatch(r.dataPlane, wait, 3*r.resync())
	if err := mgr.Add(r.watch); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&bloomeryv1alpha1.BloomFilter{}, builder.WithPredicates(predicate.Or(r.deleted.recorder(), r.own.caughtUpEvents(), userIntentChanged))).
		WatchesRawSource(source.Channel(r.watch.requeue, &handler.EnqueueRequestForObject{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			cluster, ok := clusterOfPod(o)
			if !ok {
				return nil
			}
			return filtersOfCluster(ctx, cluster.Namespace, cluster.Name)
		}), builder.WithPredicates(podServingChanged)).
		Watches(&bloomeryv1alpha1.BloomCluster{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return filtersOfCluster(ctx, o.GetNamespace(), o.GetName())
		}), builder.WithPredicates(clusterChangedForFilters)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			cluster, ok := clusterOfTokenSecret(o)
			if !ok {
				return nil
			}
			return filtersOfCluster(ctx, cluster.Namespace, cluster.Name)
		}), builder.WithPredicates(tokenSecretChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Named("bloomfilter").
		Complete(r)
}
