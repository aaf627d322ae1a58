package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// BloomClusterReconciler runs a BloomCluster's data plane: the Secret of its internal token, a
// ConfigMap, a headless and a client Service, a NetworkPolicy, a StatefulSet, a
// PodDisruptionBudget and optionally a ServiceMonitor, and reports the result in status. It
// writes a child only when the child differs from what the spec asks for.
type BloomClusterReconciler struct {
	Client client.Client
	// APIReader reads past Client's cache, which holds only the objects labelled as the
	// operator's (CacheByObject); nil means Client.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	// Recorder records the cluster's events; nil records none.
	Recorder recorder.EventRecorder
	// DefaultImage is the data-plane image of clusters that name none: the operator's own image.
	DefaultImage string
	// Resync is the period of passes between events; 0 means 30 s.
	Resync time.Duration
	// MaxConcurrentReconciles is how many BloomClusters are reconciled at once; 0 means 1.
	MaxConcurrentReconciles int
	// DataPlane reaches the pods to tell them their peers; nil means HTTP with a 5 s timeout.
	DataPlane DataPlane
	// PodParallelism bounds the concurrent calls of one pass to the pods; 0 means 8.
	PodParallelism int
	// OperatorNamespace and OperatorPodLabels locate the operator's own pods, which the
	// clusters' NetworkPolicies admit to the internal port; when either is empty, only the
	// cluster's own pods are admitted there.
	OperatorNamespace string
	OperatorPodLabels map[string]string
	// Clock measures how long the home leases go unrenewed; nil means time.Now, whose readings
	// carry the monotonic clock. Tests replace it.
	Clock func() time.Time

	// leaseClock holds when each home lease's current version was first seen (homelease.go).
	leaseClock leaseClock
	// own holds the status writes the cache has not caught up with (ownWrites).
	own ownWrites

	// orphanedTemplates holds, by BloomCluster UID, the pod template of a StatefulSet deleted to
	// grow its volumes, until it is made anew with it (growVolumes). It lives in memory: an
	// operator restarted in between makes the StatefulSet from the spec alone, which rolls the pods
	// once if someone had added labels or annotations to their template (`kubectl rollout restart`).
	orphanedTemplates sync.Map
}

// clusterState is what one pass learns, step by step; the status is computed from it at the end.
type clusterState struct {
	cluster     *bloomeryv1alpha1.BloomCluster
	configHash  string
	token       string              // the internal port's bearer token, from the cluster's Secret
	tls         *ClusterTLS         // how to call the pods with spec.tls; nil without
	statefulSet *appsv1.StatefulSet // as the API server last returned it; nil if it does not exist
	// noTLS is true when spec.tls names a Secret the operator cannot use: the pods are not called.
	noTLS bool
	// notApplied lists parts of the spec that could not be applied, and pods that do not take
	// what the operator tells them, without a failure: they make the cluster Degraded but do not
	// stop the pass.
	notApplied []degradation
	// underReplicated is set when the membership step counted partitions held by fewer than R
	// pods: the cluster is Degraded, with the reason of anything in notApplied first.
	underReplicated *degradation
	// limitsRefused is true when the spec's limits cannot fit (checkLimits): the ConfigMap and the
	// StatefulSet are left as they are.
	limitsRefused bool
	// respRefused is true when spec.resp.passwordSecret cannot be used (reconcileRESPPassword):
	// the ConfigMap and the StatefulSet are left as they are.
	respRefused bool
	// respPasswordHash identifies the RESP password in the pod template; "" without one.
	respPasswordHash string
	// drained is true when the StatefulSet may remove the pods a scale-down takes away: the
	// membership step found that none of them owns partitions any more and every member holds a
	// membership that moves nothing (placement.go). False, the StatefulSet keeps its pods.
	drained bool
	// warnings are risks of a spec that is applied as it is: the Degraded condition's message
	// names them (its reason stays), and they do not make the cluster Degraded.
	warnings []degradation
	// grownClaims are the data claims as the API server answered the growth this pass asked for
	// (nil when it asked for none): the cache may not show the new requests yet, and a volume
	// that grows at once would then never be seen growing.
	grownClaims []corev1.PersistentVolumeClaim
}

type degradation struct{ reason, message string }

// The operator's rights are exactly its client's calls (Get, List and Watch through the cache,
// Create, Update, Delete, status Patch); `get` on a child also serves ensureChild's read past the
// cache. bloomclusters/finalizers: update is what the OwnerReferencesPermissionEnforcement
// admission plugin asks of whoever sets blockOwnerDeletion on a child's owner reference.
// Pods are only listed; ServiceMonitors are never listed or watched (unstructured objects are not
// cached: every read is a get). A StatefulSet is deleted (orphaning its pods) and the claims its
// pods mount are patched only to grow the volumes; StorageClasses are read past the cache, and
// only then (a namespaced install, whose Roles cannot grant them, reports growth as not allowed).
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters/status,verbs=patch
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomfilters,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list

// Reconcile brings one BloomCluster's child objects in line with its spec and writes its status
// once, at the end, when it changed. Children are never deleted here: they carry owner
// references, and the garbage collector removes them with the BloomCluster (volumes follow
// spec.storage.whenDeleted).
func (r *BloomClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster bloomeryv1alpha1.BloomCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if r.own.behind(&cluster) {
		return ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	}
	original := cluster.DeepCopy()
	result, err := r.reconcile(ctx, &cluster)
	if errors.Is(err, errNamespaceTerminating) {
		// The namespace controller is deleting the cluster with everything else: nothing to
		// build, and nothing worth an error or an event.
		log.FromContext(ctx).V(1).Info("Namespace is being deleted; BloomCluster left to the namespace controller")
		return ctrl.Result{}, nil
	}
	return statusPatched(ctx, "BloomCluster", &cluster, result, err, r.patchStatus(ctx, original, &cluster))
}

// errNamespaceTerminating stops a pass whose namespace is being deleted.
var errNamespaceTerminating = errors.New("namespace is being deleted")

// reconcile runs the ordered steps of one pass. A step that fails stops the pass: the later
// steps may depend on it (the StatefulSet mounts the ConfigMap and names the headless Service).
func (r *BloomClusterReconciler) reconcile(ctx context.Context, cluster *bloomeryv1alpha1.BloomCluster) (ctrl.Result, error) {
	gen := cluster.Generation
	if cluster.Annotations[PauseAnnotation] == "true" {
		setCondition(&cluster.Status.Conditions, gen, ConditionProgressing, metav1.ConditionFalse, ReasonPaused,
			"Reconciliation is paused by the "+PauseAnnotation+" annotation; child objects are left as they are")
		return ctrl.Result{}, nil
	}
	st := &clusterState{cluster: cluster}
	steps := []func(context.Context, *clusterState) (ctrl.Result, error){
		// First, as it reads the spec alone and decides whether the pods get it.
		r.checkLimits,
		// The token and the TLS Secret come before anything that reaches the pods or runs them.
		r.reconcileTokenSecret,
		r.reconcileTLS,
		// After the token, which keys the password's hash.
		r.reconcileRESPPassword,
		// The ServiceAccount the pods run as, their home leases and the Role to renew them:
		// before the membership, which reads the leases, and the StatefulSet, which names the
		// ServiceAccount.
		r.reconcileHomeLeases,
		// Next, because it depends only on the pods that exist, and running pods need it to
		// turn ready even when a later step fails (a StatefulSet update the API server refuses).
		r.reconcileMembership,
		r.reconcileConfigMap,
		r.reconcileServices,
		// Before the StatefulSet: no pod runs unprotected.
		r.reconcileNetworkPolicy,
		r.reconcileStatefulSet,
		r.reconcilePodDisruptionBudget,
		r.reconcileServiceMonitor,
	}
	resync := r.resync()
	result := ctrl.Result{RequeueAfter: resync}
	var failure error
	for _, step := range steps {
		res, err := step(ctx, st)
		if err != nil {
			failure = err
			break
		}
		if res.RequeueAfter > 0 && res.RequeueAfter < result.RequeueAfter {
			result.RequeueAfter = res.RequeueAfter
		}
	}
	if err := r.observe(ctx, st); err != nil {
		failure = errors.Join(failure, err)
	}
	r.setStatus(st, failure)
	if failure != nil {
		if staleCache(failure) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, failure
	}
	return result, nil
}

// staleCache reports a failure that only says the cache is behind the API server: a child changed
// since the cache saw it, or one just created is not in the cache yet. The next pass, with the
// newer object, resolves it; it is not a fault to report.
func staleCache(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

func (r *BloomClusterReconciler) resync() time.Duration { return positiveOr(r.Resync, defaultResync) }

func (r *BloomClusterReconciler) apiReader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

func (r *BloomClusterReconciler) dataPlane() DataPlane { return dataPlaneOr(r.DataPlane) }

// observe reads what the status reports but the steps may not have: the StatefulSet when a step
// before it failed, and the BloomFilters that name the cluster.
func (r *BloomClusterReconciler) observe(ctx context.Context, st *clusterState) error {
	c := st.cluster
	if st.statefulSet == nil {
		var sts appsv1.StatefulSet
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: statefulSetName(c.Name)}, &sts)
		switch {
		case err == nil && metav1.IsControlledBy(&sts, c):
			st.statefulSet = &sts
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("getting StatefulSet: %w", err)
		}
	}
	var filters bloomeryv1alpha1.BloomFilterList
	// Counted, not kept nor changed: the cache's own objects, not ten thousand copies a pass.
	if err := r.Client.List(ctx, &filters, client.InNamespace(c.Namespace), client.MatchingFields{clusterRefIndex: c.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing BloomFilters of the cluster: %w", err)
	}
	c.Status.Filters = int32(len(filters.Items))
	return nil
}

// setStatus computes the status from the pass: replicas from the StatefulSet's status, and the
// three conditions, each stamped with the generation they describe.
func (r *BloomClusterReconciler) setStatus(st *clusterState, failure error) {
	c := st.cluster
	gen := c.Generation
	status := &c.Status
	status.ObservedGeneration = gen
	status.Endpoint = c.ClientURL()
	status.Selector = labels.SelectorFromSet(selectorLabels(c.Name)).String()
	desired := c.DesiredReplicas()
	sts := st.statefulSet
	status.Replicas, status.ReadyReplicas = 0, 0
	if sts != nil {
		status.Replicas, status.ReadyReplicas = sts.Status.Replicas, sts.Status.ReadyReplicas
	}

	switch {
	case desired == 0:
		setCondition(&status.Conditions, gen, ConditionReady, metav1.ConditionFalse, ReasonScaledToZero,
			"spec.replicas is 0: no pod serves")
	case sts != nil && status.ReadyReplicas >= desired:
		setCondition(&status.Conditions, gen, ConditionReady, metav1.ConditionTrue, ReasonAllReplicasReady,
			fmt.Sprintf("%d of %d replicas are ready", status.ReadyReplicas, desired))
	default:
		setCondition(&status.Conditions, gen, ConditionReady, metav1.ConditionFalse, ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d replicas are ready", status.ReadyReplicas, desired))
	}

	if msg := rollout(sts, desired); msg != "" {
		setCondition(&status.Conditions, gen, ConditionProgressing, metav1.ConditionTrue, ReasonRollingOut, msg)
	} else {
		setCondition(&status.Conditions, gen, ConditionProgressing, metav1.ConditionFalse, ReasonUpToDate,
			"The StatefulSet runs its latest revision on every pod")
	}

	switch {
	case failure != nil && staleCache(failure):
		// A race with another writer, not a fault: the condition keeps what it said.
	case failure != nil:
		setCondition(&status.Conditions, gen, ConditionDegraded, metav1.ConditionTrue, ReasonChildObjectFailure, failure.Error())
	case len(st.notApplied) > 0 || st.underReplicated != nil:
		degraded := slices.Clone(st.notApplied)
		if st.underReplicated != nil {
			degraded = append(degraded, *st.underReplicated)
		}
		setCondition(&status.Conditions, gen, ConditionDegraded, metav1.ConditionTrue, degraded[0].reason,
			messages(slices.Concat(degraded, st.warnings)))
	default:
		// Warnings leave the reason as it is: the cluster runs as its spec asks.
		msg := "Every child object matches the spec"
		if len(st.warnings) > 0 {
			msg += ". " + messages(st.warnings)
		}
		setCondition(&status.Conditions, gen, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, msg)
	}
}

// messages joins the degradations' messages.
func messages(ds []degradation) string {
	msgs := make([]string, len(ds))
	for i, d := range ds {
		msgs[i] = d.message
	}
	return strings.Join(msgs, "; ")
}

// rollout describes the StatefulSet's rollout in progress, or returns "" when it is complete
// (prometheus-operator's StatefulSet reporter reads the same fields).
func rollout(sts *appsv1.StatefulSet, desired int32) string {
	switch {
	case sts == nil:
		return "The StatefulSet does not exist yet"
	case sts.Status.ObservedGeneration < sts.Generation:
		return fmt.Sprintf("The StatefulSet controller has not yet observed generation %d", sts.Generation)
	case sts.Status.UpdatedReplicas < desired:
		return fmt.Sprintf("%d of %d pods run the latest revision", sts.Status.UpdatedReplicas, desired)
	case sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision:
		return fmt.Sprintf("Rolling out revision %s", sts.Status.UpdateRevision)
	case sts.Status.Replicas != desired:
		return fmt.Sprintf("Scaling from %d to %d pods", sts.Status.Replicas, desired)
	}
	return ""
}

// patchStatus writes the status once, and only when it changed, as a merge patch with an
// optimistic lock: a status computed from a stale object must not overwrite a newer one.
func (r *BloomClusterReconciler) patchStatus(ctx context.Context, original, cluster *bloomeryv1alpha1.BloomCluster) error {
	if equality.Semantic.DeepEqual(original.Status, cluster.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, cluster, patch); err != nil {
		return fmt.Errorf("patching status of BloomCluster: %w", err)
	}
	r.own.wrote(cluster)
	return nil
}

// SetupWithManager watches BloomClusters, the children they own, their pods (for the
// membership) and the BloomFilters that name them (for status.filters). The BloomFilter field
// index (IndexFields) must be registered, and the cache should select Secrets with
// TokenSecretSelector.
func (r *BloomClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("bloomcluster-controller")
	}
	// A pod that gets an IP, restarts (and forgets its membership) or goes away changes what
	// the membership step does.
	podsCluster := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		cluster, ok := clusterOfPod(o)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: cluster}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&bloomeryv1alpha1.BloomCluster{}, builder.WithPredicates(predicate.Or(r.own.caughtUpEvents(), userIntentChanged))).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		// Every renewal starts the lease's clock (observeLeases); only a change of holder needs a pass.
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(r.observeLeases())).
		Watches(&bloomeryv1alpha1.BloomFilter{}, countFilters).
		Watches(&corev1.Pod{}, podsCluster).
		// A claim that reaches its new size clears VolumesResizing; claims carry the pods' labels.
		Watches(&corev1.PersistentVolumeClaim{}, podsCluster).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Named("bloomcluster").
		Complete(r)
}

// filterCountDelay is how long the pass that counts a BloomFilter created or deleted waits after
// it: the creates and deletes of that second are counted by one pass. With thousands at once, a
// pass came every 200 ms, and each read every filter of the cluster and wrote the cluster's status.
const filterCountDelay = time.Second

// countFilters enqueues the cluster of a BloomFilter created or deleted, filterCountDelay later.
// An update enqueues nothing: the count changes only when a filter comes or goes (clusterRef is
// immutable), and the filters' frequent status updates must not requeue the cluster.
var countFilters = handler.Funcs{
	CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		countLater(e.Object, q)
	},
	DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		countLater(e.Object, q)
	},
}

func countLater(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if bf, ok := o.(*bloomeryv1alpha1.BloomFilter); ok {
		// A request already waiting keeps its earlier time: the waits merge.
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: bf.Namespace, Name: bf.Spec.ClusterRef.Name}}, filterCountDelay)
	}
}
