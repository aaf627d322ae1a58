package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// defaultClusterResync is the period of passes without events: pod readiness reaches the status
// through the StatefulSet's events, but a drifted ServiceMonitor (not watched: its kind may not
// exist) only through a pass.
const defaultClusterResync = 30 * time.Second

// BloomClusterReconciler runs a BloomCluster's data plane: a ConfigMap, a headless and a client
// Service, a StatefulSet, a PodDisruptionBudget and optionally a ServiceMonitor, and reports the
// result in status. It writes a child only when the child differs from what the spec asks for.
type BloomClusterReconciler struct {
	Client   client.Client
	Scheme   *runtime.Scheme
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
}

// clusterState is what one pass learns, step by step; the status is computed from it at the end.
type clusterState struct {
	cluster     *bloomeryv1alpha1.BloomCluster
	configHash  string
	statefulSet *appsv1.StatefulSet // as the API server last returned it; nil if it does not exist
	// notApplied lists parts of the spec that could not be applied, without a failure: they make
	// the cluster Degraded but do not stop the pass.
	notApplied []degradation
}

type degradation struct{ reason, message string }

// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=bloomery.io,resources=bloomfilters,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update;patch;delete

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
	original := cluster.DeepCopy()
	result, err := r.reconcile(ctx, &cluster)
	if errors.Is(err, errNamespaceTerminating) {
		// The namespace controller is deleting the cluster with everything else: nothing to
		// build, and nothing worth an error or an event.
		log.FromContext(ctx).V(1).Info("Namespace is being deleted; BloomCluster left to the namespace controller")
		return ctrl.Result{}, nil
	}
	if perr := r.patchStatus(ctx, original, &cluster); perr != nil {
		if apierrors.IsConflict(perr) && err == nil {
			// The cache is behind the API server; the newer object's event brings a new pass.
			log.FromContext(ctx).V(1).Info("Status of BloomCluster changed meanwhile; requeued")
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return result, err
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
		// First, because it depends only on the pods that exist, and running pods need it to
		// turn ready even when a later step fails (a StatefulSet update the API server refuses).
		r.reconcileMembership,
		r.reconcileConfigMap,
		r.reconcileServices,
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

func (r *BloomClusterReconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}
	return defaultClusterResync
}

// image is the data plane's image: the spec's, or the operator's default.
func (r *BloomClusterReconciler) image(c *bloomeryv1alpha1.BloomCluster) (string, error) {
	if c.Spec.Image != "" {
		return c.Spec.Image, nil
	}
	if r.DefaultImage != "" {
		return r.DefaultImage, nil
	}
	return "", errors.New("spec.image is empty and the operator has no default data-plane image")
}

func (r *BloomClusterReconciler) reconcileConfigMap(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	configYAML, err := dataPlaneConfig(st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.configHash = configHash(configYAML)
	_, err = ensureChild(ctx, r, st.cluster, buildConfigMap(st.cluster, configYAML), &corev1.ConfigMap{},
		func(existing, desired *corev1.ConfigMap) {
			existing.Data = desired.Data
			existing.BinaryData = nil
		})
	return ctrl.Result{}, err
}

func (r *BloomClusterReconciler) reconcileServices(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	for _, desired := range []*corev1.Service{buildHeadlessService(st.cluster), buildClientService(st.cluster)} {
		if _, err := ensureChild(ctx, r, st.cluster, desired, &corev1.Service{}, mergeService); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// mergeService sets the fields the operator owns. The cluster IPs, IP families and traffic
// policies are the API server's.
func mergeService(existing, desired *corev1.Service) {
	existing.Spec.Type = desired.Spec.Type
	existing.Spec.Selector = desired.Spec.Selector
	existing.Spec.Ports = desired.Spec.Ports
	existing.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
	existing.Spec.SessionAffinity = desired.Spec.SessionAffinity
}

func (r *BloomClusterReconciler) reconcileStatefulSet(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	image, err := r.image(st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired := buildStatefulSet(st.cluster, image, st.configHash)
	sts, err := ensureChild(ctx, r, st.cluster, desired, &appsv1.StatefulSet{}, mergeStatefulSet)
	if sts.Name != "" && metav1.IsControlledBy(sts, st.cluster) { // even after a failed update, status reports what exists
		st.statefulSet = sts
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if msg := storageNotApplied(st.cluster, sts); msg != "" {
		st.notApplied = append(st.notApplied, degradation{ReasonStorageChangeNotApplied, msg})
	}
	return ctrl.Result{}, nil
}

// mergeStatefulSet sets the fields the operator owns on an existing StatefulSet and leaves the
// immutable ones (selector, serviceName, volumeClaimTemplates, podManagementPolicy) as they are.
// Pod-template labels and annotations are merged, never replaced: `kubectl rollout restart`
// works by adding an annotation, and removing it would restart the pods once more.
func mergeStatefulSet(existing, desired *appsv1.StatefulSet) {
	existing.Spec.Replicas = desired.Spec.Replicas
	existing.Spec.RevisionHistoryLimit = desired.Spec.RevisionHistoryLimit
	existing.Spec.PersistentVolumeClaimRetentionPolicy = desired.Spec.PersistentVolumeClaimRetentionPolicy

	// maxUnavailable is the API server's: it defaults it where the MaxUnavailableStatefulSet
	// feature is on and drops it where it is off, so owning it would write forever on one of the two.
	current := existing.Spec.UpdateStrategy.RollingUpdate
	strategy := desired.Spec.UpdateStrategy.DeepCopy()
	if current != nil && strategy.RollingUpdate != nil {
		strategy.RollingUpdate.MaxUnavailable = current.MaxUnavailable
	}
	existing.Spec.UpdateStrategy = *strategy

	template := desired.Spec.Template.DeepCopy()
	template.Labels = mergeStringMaps(existing.Spec.Template.Labels, template.Labels)
	template.Annotations = mergeStringMaps(existing.Spec.Template.Annotations, template.Annotations)
	existing.Spec.Template = *template
}

// storageNotApplied says how the spec's storage differs from the StatefulSet's claim template,
// which is immutable. Resizing the volumes (the orphan-delete-and-recreate of the StatefulSet
// plus a resize of each claim, as RabbitMQ's operator does) is not implemented yet.
func storageNotApplied(c *bloomeryv1alpha1.BloomCluster, sts *appsv1.StatefulSet) string {
	var tmpl *corev1.PersistentVolumeClaim
	for i := range sts.Spec.VolumeClaimTemplates {
		if sts.Spec.VolumeClaimTemplates[i].Name == dataVolumeName {
			tmpl = &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	if tmpl == nil {
		return fmt.Sprintf("StatefulSet %s has no %q volume claim template", sts.Name, dataVolumeName)
	}
	want := buildVolumeClaimTemplate(c)
	var diffs []string
	have, wantSize := tmpl.Spec.Resources.Requests[corev1.ResourceStorage], want.Spec.Resources.Requests[corev1.ResourceStorage]
	if have.Cmp(wantSize) != 0 {
		diffs = append(diffs, fmt.Sprintf("spec.storage.size is %s but the volumes were created with %s", wantSize.String(), have.String()))
	}
	if c.Spec.Storage.StorageClassName != nil && !equality.Semantic.DeepEqual(tmpl.Spec.StorageClassName, want.Spec.StorageClassName) {
		diffs = append(diffs, fmt.Sprintf("spec.storage.storageClassName is %q but the volumes were created with %q",
			*want.Spec.StorageClassName, deref(tmpl.Spec.StorageClassName)))
	}
	if len(diffs) == 0 {
		return ""
	}
	return strings.Join(diffs, "; ") + ": existing volumes are not changed (resizing is not supported yet)"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (r *BloomClusterReconciler) reconcilePodDisruptionBudget(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	desired := buildPodDisruptionBudget(st.cluster)
	if !pdbEnabled(st.cluster) {
		return ctrl.Result{}, deleteChild(ctx, r, st.cluster, desired)
	}
	_, err := ensureChild(ctx, r, st.cluster, desired, &policyv1.PodDisruptionBudget{},
		func(existing, desired *policyv1.PodDisruptionBudget) {
			existing.Spec.Selector = desired.Spec.Selector
			existing.Spec.MaxUnavailable = desired.Spec.MaxUnavailable
			existing.Spec.MinAvailable = nil
			existing.Spec.UnhealthyPodEvictionPolicy = desired.Spec.UnhealthyPodEvictionPolicy
		})
	return ctrl.Result{}, err
}

// reconcileServiceMonitor creates the ServiceMonitor when the spec asks for one and the cluster
// knows the kind; it is looked up on every pass, so installing the Prometheus Operator later is
// picked up by the next pass.
func (r *BloomClusterReconciler) reconcileServiceMonitor(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	wanted := st.cluster.Spec.Monitoring.ServiceMonitor.Enabled
	available, err := r.kindExists(serviceMonitorGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !available {
		if wanted {
			st.notApplied = append(st.notApplied, degradation{ReasonServiceMonitorUnavailable,
				"spec.monitoring.serviceMonitor.enabled is true, but the cluster has no monitoring.coreos.com/v1 " +
					"ServiceMonitor kind: install the Prometheus Operator's CRDs, or turn it off"})
		}
		return ctrl.Result{}, nil
	}
	desired := buildServiceMonitor(st.cluster)
	if !wanted {
		return ctrl.Result{}, deleteChild(ctx, r, st.cluster, desired)
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(serviceMonitorGVK)
	_, err = ensureChild(ctx, r, st.cluster, desired, existing, func(existing, desired *unstructured.Unstructured) {
		// Fields the Prometheus Operator's CRD defaults inside the spec are not ours: compare
		// only what we set.
		if !jsonSubset(existing.Object["spec"], desired.Object["spec"]) {
			existing.Object["spec"] = desired.Object["spec"]
		}
	})
	return ctrl.Result{}, err
}

// kindExists asks the REST mapper, which rediscovers a group it does not know, whether the API
// server serves the kind.
func (r *BloomClusterReconciler) kindExists(gvk schema.GroupVersionKind) (bool, error) {
	_, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return true, nil
	}
	// Also true of controller-runtime's discovery error for a group version the server does not
	// serve: its parts unwrap to NoResourceMatchError.
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return false, fmt.Errorf("discovering %s: %w", gvk.Kind, err)
}

// jsonSubset reports whether every field of want is in have with the same value; lists must
// have the same length, element by element.
func jsonSubset(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok || !jsonSubset(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !jsonSubset(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return equality.Semantic.DeepEqual(have, want)
	}
}

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
	if err := r.Client.List(ctx, &filters, client.InNamespace(c.Namespace), client.MatchingFields{clusterRefIndex: c.Name}); err != nil {
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
	status.Endpoint = clusterEndpoint(c)
	status.Selector = labels.SelectorFromSet(selectorLabels(c.Name)).String()
	desired := int32(1)
	if c.Spec.Replicas != nil {
		desired = *c.Spec.Replicas
	}
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
	case len(st.notApplied) > 0:
		msgs := make([]string, len(st.notApplied))
		for i, d := range st.notApplied {
			msgs[i] = d.message
		}
		setCondition(&status.Conditions, gen, ConditionDegraded, metav1.ConditionTrue, st.notApplied[0].reason, strings.Join(msgs, "; "))
	default:
		setCondition(&status.Conditions, gen, ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected,
			"Every child object matches the spec")
	}
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
	return nil
}

// ensureChild creates desired when it does not exist, or else applies merge (which copies the
// fields the operator owns from desired onto a copy of the existing object), adds the cluster's
// labels and controller reference, and updates only when that changed something. It returns the
// object as the API server last returned it (existing when unchanged or when the update failed).
func ensureChild[T client.Object](ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster,
	desired, existing T, merge func(existing, desired T)) (T, error) {
	kind := r.kindOf(desired)
	key := client.ObjectKeyFromObject(desired)
	if err := r.Client.Get(ctx, key, existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return existing, fmt.Errorf("getting %s %s: %w", kind, key.Name, err)
		}
		if err := ctrl.SetControllerReference(cluster, desired, r.Scheme); err != nil {
			return existing, fmt.Errorf("setting owner of %s %s: %w", kind, key.Name, err)
		}
		if err := r.Client.Create(ctx, desired); err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return existing, errNamespaceTerminating
			}
			if !apierrors.IsAlreadyExists(err) {
				r.event(cluster, desired, corev1.EventTypeWarning, "CreateFailed", "Create", "Creating %s %s failed: %v", kind, key.Name, err)
			}
			return existing, fmt.Errorf("creating %s %s: %w", kind, key.Name, err)
		}
		log.FromContext(ctx).Info("Created child object of BloomCluster", "kind", kind, "name", key.Name)
		r.event(cluster, desired, corev1.EventTypeNormal, "Created", "Create", "Created %s %s", kind, key.Name)
		return desired, nil
	}
	updated, ok := existing.DeepCopyObject().(T)
	if !ok {
		return existing, fmt.Errorf("copying %s %s: unexpected type %T", kind, key.Name, existing.DeepCopyObject())
	}
	merge(updated, desired)
	updated.SetLabels(mergeStringMaps(updated.GetLabels(), desired.GetLabels()))
	// Refuses to take over an object another controller owns: that is reported as a failure.
	if err := ctrl.SetControllerReference(cluster, updated, r.Scheme); err != nil {
		return existing, fmt.Errorf("%s %s exists and is not this BloomCluster's: %w", kind, key.Name, err)
	}
	if equality.Semantic.DeepEqual(existing, updated) {
		return existing, nil
	}
	// Update, not patch: the resourceVersion makes a concurrent change fail with a conflict
	// instead of being overwritten.
	if err := r.Client.Update(ctx, updated); err != nil {
		if !apierrors.IsConflict(err) {
			r.event(cluster, updated, corev1.EventTypeWarning, "UpdateFailed", "Update", "Updating %s %s failed: %v", kind, key.Name, err)
		}
		return existing, fmt.Errorf("updating %s %s: %w", kind, key.Name, err)
	}
	log.FromContext(ctx).Info("Updated child object of BloomCluster", "kind", kind, "name", key.Name)
	r.event(cluster, updated, corev1.EventTypeNormal, "Updated", "Update", "Updated %s %s", kind, key.Name)
	return updated, nil
}

// deleteChild deletes the object of desired's name and kind if this cluster controls it.
func deleteChild(ctx context.Context, r *BloomClusterReconciler, cluster *bloomeryv1alpha1.BloomCluster, desired client.Object) error {
	kind := r.kindOf(desired)
	existing, ok := desired.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %s: unexpected type %T", kind, desired)
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(existing, cluster) {
		return nil
	}
	if err := r.Client.Delete(ctx, existing, client.Preconditions{UID: new(existing.GetUID())}); client.IgnoreNotFound(err) != nil {
		r.event(cluster, existing, corev1.EventTypeWarning, "DeleteFailed", "Delete", "Deleting %s %s failed: %v", kind, existing.GetName(), err)
		return fmt.Errorf("deleting %s %s: %w", kind, existing.GetName(), err)
	}
	log.FromContext(ctx).Info("Deleted child object of BloomCluster", "kind", kind, "name", existing.GetName())
	r.event(cluster, existing, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted %s %s", kind, existing.GetName())
	return nil
}

func (r *BloomClusterReconciler) kindOf(obj client.Object) string {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return gvk.Kind
}

func (r *BloomClusterReconciler) event(cluster *bloomeryv1alpha1.BloomCluster, related runtime.Object, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(cluster, related, eventType, reason, action, note, args...)
}

// mergeStringMaps returns base with over's entries set over it; base's other entries stay.
func mergeStringMaps(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = make(map[string]string, len(over))
	}
	maps.Copy(out, over)
	return out
}

// SetupWithManager watches BloomClusters, the children they own, their pods (for the
// membership) and the BloomFilters that name them (for status.filters). The BloomFilter field
// index (IndexFields) must be registered.
func (r *BloomClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("bloomcluster-controller")
	}
	if r.DataPlane == nil {
		r.DataPlane = NewHTTPDataPlane(DefaultPodTimeout)
	}
	clusterOfFilter := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		bf, ok := o.(*bloomeryv1alpha1.BloomFilter)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: bf.Namespace, Name: bf.Spec.ClusterRef.Name}}}
	})
	// A pod that gets an IP, restarts (and forgets its membership) or goes away changes what
	// the membership step does. The StatefulSet labels its pods with the cluster's name.
	clusterOfPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		if l[labelName] != appName || l[labelComponent] != componentData || l[labelInstance] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[labelInstance]}}}
	})
	// The count of filters changes only when one is created or deleted (clusterRef is
	// immutable); their frequent status updates must not requeue the cluster.
	filterCountChanged := predicate.Funcs{
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&bloomeryv1alpha1.BloomCluster{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&bloomeryv1alpha1.BloomFilter{}, clusterOfFilter, builder.WithPredicates(filterCountChanged)).
		Watches(&corev1.Pod{}, clusterOfPod).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Named("bloomcluster").
		Complete(r)
}
