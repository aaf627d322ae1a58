package controllers

import (
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The builders below are pure functions of the BloomCluster: one per child object. They fill in
// every field the API server would default, so that a built object compares equal
// (equality.Semantic) to what the server stores, and a steady state sends no writes. Owner
// references are set by the reconciler, which has the scheme.

const (
	// configHashAnnotation on the pod template carries a hash of config.yaml: the data plane reads
	// its configuration only at start, so a changed configuration must roll the pods.
	configHashAnnotation = "bloomery.io/config-hash"

	// serviceRoleLabel tells a cluster's two Services apart, so that the ServiceMonitor selects
	// only the headless one (every pod, ready or not) and no pod is scraped twice.
	serviceRoleLabel    = "bloomery.io/service"
	serviceRoleHeadless = "headless"
	serviceRoleClient   = "client"

	configFileName  = "config.yaml"
	configMountPath = "/etc/bloomery"
	dataMountPath   = "/data"
	dataVolumeName  = "data"
	configVolume    = "config"
	containerName   = "dataplane"

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

// serviceMonitorGVK is the Prometheus Operator's kind. It is handled as unstructured data, so the
// operator does not depend on prometheus-operator's Go module, and works without its CRDs.
var serviceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// Names of a cluster's child objects.
func configMapName(cluster string) string       { return cluster + "-config" }
func headlessServiceName(cluster string) string { return cluster + "-headless" }
func clientServiceName(cluster string) string   { return cluster }
func statefulSetName(cluster string) string     { return cluster }
func pdbName(cluster string) string             { return cluster }
func serviceMonitorName(cluster string) string  { return cluster }

// clusterEndpoint is the URL applications call: the client Service, without a cluster domain.
func clusterEndpoint(c *bloomeryv1alpha1.BloomCluster) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", clientServiceName(c.Name), c.Namespace, defaultAPIPort)
}

func childMeta(c *bloomeryv1alpha1.BloomCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: clusterLabels(c.Name)}
}

// buildConfigMap is the data plane's configuration file, mounted at /etc/bloomery.
func buildConfigMap(c *bloomeryv1alpha1.BloomCluster, configYAML string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: childMeta(c, configMapName(c.Name)),
		Data:       map[string]string{configFileName: configYAML},
	}
}

func httpServicePort() corev1.ServicePort {
	return corev1.ServicePort{
		Name:       httpPortName,
		Protocol:   corev1.ProtocolTCP,
		Port:       defaultAPIPort,
		TargetPort: intstr.FromString(httpPortName),
	}
}

// buildHeadlessService gives every pod a DNS name (<pod>.<name>-headless.<ns>.svc) for peers and
// the StatefulSet. Not-ready pods are published too: a recovering pod must reach its peers to
// catch up before it can become ready.
func buildHeadlessService(c *bloomeryv1alpha1.BloomCluster) *corev1.Service {
	meta := childMeta(c, headlessServiceName(c.Name))
	meta.Labels[serviceRoleLabel] = serviceRoleHeadless
	return &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 selectorLabels(c.Name),
			Ports:                    []corev1.ServicePort{httpServicePort()},
			PublishNotReadyAddresses: true,
			SessionAffinity:          corev1.ServiceAffinityNone,
		},
	}
}

// buildClientService is what applications call: ready pods only.
func buildClientService(c *bloomeryv1alpha1.BloomCluster) *corev1.Service {
	meta := childMeta(c, clientServiceName(c.Name))
	meta.Labels[serviceRoleLabel] = serviceRoleClient
	return &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			Selector:        selectorLabels(c.Name),
			Ports:           []corev1.ServicePort{httpServicePort()},
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
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
			Port:   intstr.FromString(httpPortName),
			Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds:    period,
		TimeoutSeconds:   timeout,
		SuccessThreshold: 1,
		FailureThreshold: failures,
	}
}

// buildVolumeClaimTemplate is each pod's data volume. StatefulSet claim templates are immutable:
// the reconciler uses this only when it creates the StatefulSet.
func buildVolumeClaimTemplate(c *bloomeryv1alpha1.BloomCluster) corev1.PersistentVolumeClaim {
	size := resource.MustParse("1Gi")
	if c.Spec.Storage.Size != nil {
		size = c.Spec.Storage.Size.DeepCopy()
	}
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: dataVolumeName, Labels: clusterLabels(c.Name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: c.Spec.Storage.StorageClassName,
			VolumeMode:       new(corev1.PersistentVolumeFilesystem),
		},
	}
}

func retentionPolicy(p bloomeryv1alpha1.RetentionPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == bloomeryv1alpha1.Delete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

// buildStatefulSet runs the data plane. configHash goes into the pod template so that a new
// configuration rolls the pods.
func buildStatefulSet(c *bloomeryv1alpha1.BloomCluster, image, configHash string) *appsv1.StatefulSet {
	replicas := int32(1)
	if c.Spec.Replicas != nil {
		replicas = *c.Spec.Replicas
	}
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
			"-p", fmt.Sprint(defaultAPIPort),
			"-c", configMountPath + "/" + configFileName,
			"--data-dir", dataMountPath},
		Ports: []corev1.ContainerPort{{Name: httpPortName, ContainerPort: defaultAPIPort, Protocol: corev1.ProtocolTCP}},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		},
		Resources: spec.Resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: dataVolumeName, MountPath: dataMountPath},
			{Name: configVolume, MountPath: configMountPath, ReadOnly: true},
		},
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
					Annotations: map[string]string{configHashAnnotation: configHash},
				},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{container},
					Volumes: []corev1.Volume{{
						Name: configVolume,
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(c.Name)},
							DefaultMode:          new(corev1.ConfigMapVolumeSourceDefaultMode),
						}},
					}},
					TerminationGracePeriodSeconds: &grace,
					RestartPolicy:                 corev1.RestartPolicyAlways,
					DNSPolicy:                     corev1.DNSClusterFirst,
					SchedulerName:                 corev1.DefaultSchedulerName,
					// The data plane never calls the Kubernetes API, and a namespace with many
					// Services would otherwise fill its environment.
					AutomountServiceAccountToken: new(false),
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
					Affinity:                  spec.Affinity,
					TopologySpreadConstraints: spec.TopologySpreadConstraints,
					PriorityClassName:         spec.PriorityClassName,
					ImagePullSecrets:          spec.ImagePullSecrets,
				},
			},
		},
	}
}

// buildPodDisruptionBudget limits voluntary evictions (node drains) of the cluster's pods.
func buildPodDisruptionBudget(c *bloomeryv1alpha1.BloomCluster) *policyv1.PodDisruptionBudget {
	maxUnavailable := intstr.FromInt32(1)
	if m := c.Spec.PodDisruptionBudget.MaxUnavailable; m != nil {
		maxUnavailable = *m
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: childMeta(c, pdbName(c.Name)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(c.Name)},
			MaxUnavailable: &maxUnavailable,
			// A pod that is not ready serves nothing: evicting it costs no availability, and a
			// crash-looping pod must not block a node drain.
			UnhealthyPodEvictionPolicy: new(policyv1.AlwaysAllow),
		},
	}
}

// pdbEnabled is the schema's default (true) when the field is absent.
func pdbEnabled(c *bloomeryv1alpha1.BloomCluster) bool {
	return c.Spec.PodDisruptionBudget.Enabled == nil || *c.Spec.PodDisruptionBudget.Enabled
}

// buildServiceMonitor makes the Prometheus Operator scrape /metrics of every pod through the
// headless Service. The spec holds only JSON types (map[string]any, []any, string), as
// unstructured objects must.
func buildServiceMonitor(c *bloomeryv1alpha1.BloomCluster) *unstructured.Unstructured {
	sm := c.Spec.Monitoring.ServiceMonitor
	labels := maps.Clone(sm.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, clusterLabels(c.Name)) // ours win: they identify the object
	endpoint := map[string]any{"port": httpPortName, "path": wire.MetricsPath}
	if sm.Interval != "" {
		endpoint["interval"] = sm.Interval
	}
	matchLabels := map[string]any{serviceRoleLabel: serviceRoleHeadless}
	for k, v := range selectorLabels(c.Name) {
		matchLabels[k] = v
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(serviceMonitorGVK)
	u.SetName(serviceMonitorName(c.Name))
	u.SetNamespace(c.Namespace)
	u.SetLabels(labels)
	u.Object["spec"] = map[string]any{
		"selector":          map[string]any{"matchLabels": matchLabels},
		"namespaceSelector": map[string]any{"matchNames": []any{c.Namespace}},
		"endpoints":         []any{endpoint},
	}
	return u
}
