package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// configHashAnnotation on the pod template carries a hash of config.yaml: the data plane reads
// its configuration only at start, so a changed configuration must roll the pods.
const configHashAnnotation = "bloomery.io/config-hash"

const (
	dataMountPath  = "/data"
	dataVolumeName = "data"
	containerName  = "dataplane"

	// The image's distroless "nonroot" user and group.
	nonRootID int64 = 65532

	// The data plane stops in three phases when a pod is deleted: /readyz fails for
	// shutdownDrainDelay while the endpoints controller takes the pod out of the Services, the
	// HTTP server then drains within shutdownTimeout, and the final snapshot is written. The
	// first two are bounds written into config.yaml; the snapshot's time grows with the data.
	shutdownDrainDelayMillis = 5_000
	shutdownTimeoutMillis    = 15_000
	// snapshotFloorSeconds is the snapshot budget of a small data set (fsyncs, a slow volume).
	snapshotFloorSeconds = 40
	// snapshotBytesPerSecond is a conservative sequential write speed of a network volume.
	snapshotBytesPerSecond = 64 << 20

	// startupProbeBudgetSeconds is how long a pod may take to recover its snapshot and log before
	// the kubelet restarts it: recovery of gigabytes of filters takes minutes, and a restart only
	// starts it over.
	startupProbePeriodSeconds = 5
	startupProbeBudgetSeconds = 30 * 60
)

func statefulSetName(cluster string) string { return cluster }

func (r *BloomClusterReconciler) reconcileStatefulSet(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	if st.limitsRefused || st.respRefused { // observe reads the StatefulSet that exists for the status
		return ctrl.Result{}, nil
	}
	image, err := r.image(st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	c := st.cluster
	desired := buildStatefulSet(c, image, st.configHash, tokenHash(st.token), st.respPasswordHash)
	var existing appsv1.StatefulSet
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(desired), &existing)
	switch {
	case err == nil && !existing.DeletionTimestamp.IsZero() && metav1.IsControlledBy(&existing, c):
		// Deleted to grow its volumes (or by someone): the garbage collector orphans its pods,
		// then the next pass makes it anew.
		st.statefulSet = &existing
		return ctrl.Result{RequeueAfter: time.Second}, r.reportResizing(ctx, st)
	case apierrors.IsNotFound(err):
		if tmpl, ok := r.orphanedTemplates.Load(c.UID); ok {
			// Made anew after a growth: the template it had, brought up to date as an update would.
			template := tmpl.(*corev1.PodTemplateSpec) //nolint:forcetypeassert // only ever stored by growVolumes
			desired.Spec.Template.Labels = mergeStringMaps(template.Labels, desired.Spec.Template.Labels)
			desired.Spec.Template.Annotations = mergeStringMaps(template.Annotations, desired.Spec.Template.Annotations)
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting StatefulSet %s: %w", desired.Name, err)
	default:
		keepLeavingPods(ctx, st, &existing, desired)
	}
	sts, err := ensureChild(ctx, r, c, desired, &appsv1.StatefulSet{}, mergeStatefulSet)
	if sts.Name != "" && metav1.IsControlledBy(sts, c) { // even after a failed update, status reports what exists
		st.statefulSet = sts
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if sts.UID != "" {
		r.orphanedTemplates.Delete(c.UID)
	}
	if msg := storageNotApplied(c, sts); msg != "" {
		st.notApplied = append(st.notApplied, degradation{ReasonStorageChangeNotApplied, msg})
	}
	deleted, err := r.growVolumes(ctx, st, sts)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reportResizing(ctx, st); err != nil {
		return ctrl.Result{}, err
	}
	if deleted {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// keepLeavingPods holds a scale-down until the pods it removes are drained (placement.go): the
// StatefulSet keeps the replicas it has while spec.replicas is lower, above 0, and the membership
// step did not find the drain complete. A scale-up, or to 0, is not held.
func keepLeavingPods(ctx context.Context, st *clusterState, existing, desired *appsv1.StatefulSet) {
	if existing.Spec.Replicas == nil || desired.Spec.Replicas == nil {
		return
	}
	current, target := *existing.Spec.Replicas, *desired.Spec.Replicas
	if target == 0 || current <= target || st.drained {
		return
	}
	desired.Spec.Replicas = new(current)
	log.FromContext(ctx).Info("StatefulSet keeps its replicas until the pods that leave are drained",
		"replicas", current, "desiredReplicas", target)
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

// buildStatefulSet runs the data plane. configHash, tokenHash and respPasswordHash (with
// spec.resp.passwordSecret) go into the pod template so that a new configuration, a new token or a
// new RESP password rolls the pods.
//
// The fixed ports, the token file, the TLS files and the RESP password file are arguments rather
// than keys of config.yaml: the configuration stays a function of the spec alone, and each file's
// path sits beside the mount that provides it. The RESP port, which the spec sets, is a key. The TLS Secret has no hash in the template: the data plane reloads its files,
// so a renewal rolls nothing (a new spec.tls.secretName changes the template, and rolls the pods).
func buildStatefulSet(c *bloomeryv1alpha1.BloomCluster, image, configHash, tokenHash, respPasswordHash string) *appsv1.StatefulSet {
	replicas := c.DesiredReplicas()
	pullPolicy := c.Spec.ImagePullPolicy
	if pullPolicy == "" {
		pullPolicy = defaultPullPolicy(image)
	}
	grace := terminationGracePeriodSeconds(c)
	spec := c.Spec.DeepCopy() // the template must not share slices and maps with the cache's object
	container := corev1.Container{
		Name:            containerName,
		Image:           image,
		ImagePullPolicy: pullPolicy,
		Args: []string{"dataplane",
			"-p", fmt.Sprint(bloomeryv1alpha1.APIPort),
			"--internal-port", fmt.Sprint(bloomeryv1alpha1.InternalPort),
			"--ops-port", fmt.Sprint(bloomeryv1alpha1.OpsPort),
			"--internal-token-file", tokenMountPath + "/" + tokenSecretKey,
			"-c", configMountPath + "/" + configFileName,
			"--data-dir", dataMountPath},
		Ports: []corev1.ContainerPort{
			{Name: httpPortName, ContainerPort: bloomeryv1alpha1.APIPort, Protocol: corev1.ProtocolTCP},
			{Name: internalPortName, ContainerPort: bloomeryv1alpha1.InternalPort, Protocol: corev1.ProtocolTCP},
			{Name: opsPortName, ContainerPort: bloomeryv1alpha1.OpsPort, Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		},
		Resources: spec.Resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: dataVolumeName, MountPath: dataMountPath},
			{Name: configVolume, MountPath: configMountPath, ReadOnly: true},
			{Name: tokenVolume, MountPath: tokenMountPath, ReadOnly: true},
		},
		// The probes go to the ops port, whose connections clients of the API cannot exhaust.
		// Ready means recovered and caught up; a pod that is not ready stays out of the client
		// Service but keeps running.
		ReadinessProbe: httpGetProbe(wire.ReadyzPath, 5, 2, 3),
		// Alive means the process answers; 30 s of silence restarts it.
		LivenessProbe: httpGetProbe(wire.HealthzPath, 10, 2, 3),
		// The API listens only after recovery: until then only the startup probe runs.
		StartupProbe:             httpGetProbe(wire.HealthzPath, startupProbePeriodSeconds, 2, startupProbeBudgetSeconds/startupProbePeriodSeconds),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(false),
			ReadOnlyRootFilesystem:   new(true),
			RunAsNonRoot:             new(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	volumes := []corev1.Volume{{
		Name: configVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(c.Name)},
			DefaultMode:          new(corev1.ConfigMapVolumeSourceDefaultMode),
		}},
	}, {
		Name: tokenVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: tokenSecretName(c.Name),
			// Readable by the data plane's user and group alone.
			DefaultMode: new(int32(0o440)),
		}},
	}}
	if spec.TLS != nil {
		container.Args = append(container.Args, tlsArgs()...)
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsMountPath, ReadOnly: true})
		volumes = append(volumes, buildTLSVolume(spec.TLS))
	}
	annotations := map[string]string{configHashAnnotation: configHash, tokenHashAnnotation: tokenHash}
	if c.RESPEnabled() {
		container.Ports = append(container.Ports, corev1.ContainerPort{Name: respPortName, ContainerPort: c.RESPPort(), Protocol: corev1.ProtocolTCP})
		if ps := spec.RESP.PasswordSecret; ps != nil {
			container.Args = append(container.Args, "--resp-password-file", respPasswordPath())
			container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: respVolume, MountPath: respMountPath, ReadOnly: true})
			volumes = append(volumes, buildRESPPasswordVolume(ps, c.RESPPasswordKey()))
			annotations[respPasswordHashAnnotation] = respPasswordHash
		}
	}
	if limit, ok := limitsOf(c).goMemLimit(); ok {
		// A literal rather than the downward API's resourceFieldRef: that can only divide the
		// limit, and GOMEMLIMIT must leave out the filters' memory (goMemLimitShare).
		container.Env = append(container.Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit, 10)})
	}
	for _, l := range []corev1.ResourceList{container.Resources.Limits, container.Resources.Requests} {
		for name, q := range l {
			// The API server rounds quantities up to milli units; do the same so they compare equal.
			q.RoundUp(-3)
			l[name] = q
		}
	}

	return &appsv1.StatefulSet{
		ObjectMeta: childMeta(c, statefulSetName(c.Name)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			Selector:    &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name)},
			ServiceName: headlessServiceName(c.Name),
			// Pods of a data plane do not depend on each other to start: Parallel starts and
			// replaces them all at once. It is immutable, hence set from the first version.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type:          appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(0))},
			},
			RevisionHistoryLimit: new(int32(10)),
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: retentionPolicy(c.Spec.Storage.WhenDeleted),
				WhenScaled:  retentionPolicy(c.Spec.Storage.WhenScaled),
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{buildVolumeClaimTemplate(c)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      clusterLabels(c.Name),
					Annotations: annotations,
				},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{container},
					Volumes:                       volumes,
					TerminationGracePeriodSeconds: &grace,
					RestartPolicy:                 corev1.RestartPolicyAlways,
					DNSPolicy:                     corev1.DNSClusterFirst,
					SchedulerName:                 corev1.DefaultSchedulerName,
					// The data plane calls the Kubernetes API only to renew its home lease, as the
					// cluster's ServiceAccount (child_lease.go); without leases it has no token. A
					// namespace with many Services would otherwise fill its environment.
					ServiceAccountName:           serviceAccountName(c.Name),
					DeprecatedServiceAccount:     serviceAccountName(c.Name),
					AutomountServiceAccountToken: new(c.HomeLease() > 0),
					EnableServiceLinks:           new(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: new(true),
						RunAsUser:    new(nonRootID),
						RunAsGroup:   new(nonRootID),
						FSGroup:      new(nonRootID),
						// Skip the recursive chown of a large volume on every start.
						FSGroupChangePolicy: new(corev1.FSGroupChangeOnRootMismatch),
						SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					NodeSelector:              spec.NodeSelector,
					Tolerations:               spec.Tolerations,
					Affinity:                  podAffinity(c.Name, spec.Affinity),
					TopologySpreadConstraints: topologySpreadConstraints(c.Name, spec.TopologySpreadConstraints),
					PriorityClassName:         spec.PriorityClassName,
					ImagePullSecrets:          spec.ImagePullSecrets,
				},
			},
		},
	}
}

// Where the spec leaves scheduling out, the pods spread: over nodes and over zones, each as a
// preference, so that a one-node or one-zone cluster still schedules every replica. Every pod holds
// every filter, so two pods on one node are one failure away from losing two copies.
const (
	hostnameTopologyKey = "kubernetes.io/hostname"
	zoneTopologyKey     = "topology.kubernetes.io/zone"
	// defaultAntiAffinityWeight is the highest a preference may have.
	defaultAntiAffinityWeight = 100
)

// podAffinity is the spec's affinity, as it is, when it sets one (even an empty one, which opts
// out of the default); otherwise a preferred pod anti-affinity across nodes among the cluster's
// own pods.
func podAffinity(cluster string, given *corev1.Affinity) *corev1.Affinity {
	if given != nil {
		return given
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: defaultAntiAffinityWeight,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(cluster)},
				TopologyKey:   hostnameTopologyKey,
			},
		}},
	}}
}

// topologySpreadConstraints are the spec's, as they are, when it sets a list (even an empty one,
// which opts out of the default); otherwise one: the cluster's pods spread over zones with a skew
// of at most one, as a preference.
func topologySpreadConstraints(cluster string, given []corev1.TopologySpreadConstraint) []corev1.TopologySpreadConstraint {
	if given != nil {
		return given
	}
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       zoneTopologyKey,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: selectorLabels(cluster)},
	}}
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

// terminationGracePeriodSeconds leaves a stopping pod the time to drain and to write its final
// snapshot, whose duration grows with the filters in memory. Their size is bounded by
// maxTotalBytes and by the container's memory limit, whichever is smaller; with neither, the
// floor applies (60 s: enough for a few hundred MiB).
func terminationGracePeriodSeconds(c *bloomeryv1alpha1.BloomCluster) int64 {
	var bound int64
	consider := func(q *resource.Quantity) {
		if q == nil || q.Sign() <= 0 {
			return
		}
		if v := q.Value(); bound == 0 || v < bound {
			bound = v
		}
	}
	consider(c.Spec.Limits.MaxTotalBytes)
	if mem, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]; ok {
		consider(&mem)
	}
	seconds := int64(shutdownDrainDelayMillis+shutdownTimeoutMillis)/1000 + snapshotFloorSeconds
	seconds += (bound + snapshotBytesPerSecond - 1) / snapshotBytesPerSecond
	return seconds
}

// defaultPullPolicy is the API server's default: Always for an image without a tag or with
// :latest, IfNotPresent otherwise (a digest counts as a tag).
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(name, ":"); i >= 0 && name[i+1:] != "latest" {
		return corev1.PullIfNotPresent
	}
	return corev1.PullAlways
}

func httpGetProbe(path string, period, timeout, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path:   path,
			Port:   intstr.FromString(opsPortName),
			Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds:    period,
		TimeoutSeconds:   timeout,
		SuccessThreshold: 1,
		FailureThreshold: failures,
	}
}
