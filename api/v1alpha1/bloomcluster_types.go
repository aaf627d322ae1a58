/*
Copyright 2026 The Bloomery Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// BloomClusterSpec describes a data plane: a StatefulSet of pods that hold the partitions of the
// cluster's filters, each partition on replication.factor of them, and keep them on their own
// volume.
// +kubebuilder:validation:XValidation:rule="!has(self.replication) || !has(self.replication.factor) || (has(self.replicas) ? self.replicas : 1) == 0 || self.replication.factor <= (has(self.replicas) ? self.replicas : 1)",message="replication.factor must not be more than replicas"
type BloomClusterSpec struct {
	// replicas is the number of data-plane pods. Each partition of each filter lives on
	// replication.factor of them. A scale-down first moves the partitions off the pods that
	// leave (status.placement.phase Draining), and is refused while the remaining pods could not
	// hold the data within limits.maxTotalBytes (Degraded, ScaleDownRefused).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the bloomery image the pods run. Empty means the operator's own default, which is
	// the same version as the operator.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// imagePullPolicy of the data-plane container.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// resources of the data-plane container. Filters live in memory: with a memory limit the
	// operator sets GOMEMLIMIT below it and, unless limits.maxTotalBytes is set, gives the filters
	// 40% of it; without one the filters get 40% of the node's memory, and the cluster is warned
	// about. A limit without a request of the same resource makes the pods' request equal to the
	// limit (Kubernetes does so when it admits a pod): give limits alone, or equal requests, so
	// that the pods are not among the first evicted when the node runs short of memory.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// storage is each pod's volume for snapshots and the log.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// persistence says when data reaches the disk.
	// +kubebuilder:default={}
	// +optional
	Persistence PersistenceSpec `json:"persistence,omitempty"`

	// limits bound the memory of the filters on each pod. Limits that cannot fit the memory limit
	// or the volume are refused: the cluster is Degraded (LimitsDoNotFit), and its ConfigMap and
	// StatefulSet are left as they are until they fit.
	// +optional
	Limits LimitsSpec `json:"limits,omitempty"`

	// nodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity of the pods, as it is. Unset, the pods prefer nodes that run no other pod of this
	// cluster (a preferred pod anti-affinity on kubernetes.io/hostname, weight 100), and still
	// schedule when there are fewer nodes than replicas. {} sets none.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// topologySpreadConstraints of the pods, as they are. Unset, the pods spread over zones
	// (topology.kubernetes.io/zone, maxSkew 1, whenUnsatisfiable ScheduleAnyway). [] sets none.
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// priorityClassName of the pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// imagePullSecrets of the pods.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// podDisruptionBudget keeps voluntary disruptions (node drains) from taking down too many pods.
	// +kubebuilder:default={}
	// +optional
	PodDisruptionBudget PodDisruptionBudgetSpec `json:"podDisruptionBudget,omitempty"`

	// monitoring configures scraping of the pods by the Prometheus Operator.
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// replication says on how many pods each partition of a filter lives, and how the pods share
	// writes.
	// +kubebuilder:default={}
	// +optional
	Replication ReplicationSpec `json:"replication,omitempty"`

	// networkPolicy limits who may reach the pods, port by port, with a NetworkPolicy the
	// operator makes for the cluster.
	// +kubebuilder:default={}
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// tls serves the pods' client and internal ports over TLS, with the certificate of a Secret
	// the operator does not make (cert-manager issues one). Absent means plain HTTP. The RESP
	// port, when enabled, serves TLS with the same certificate.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// resp serves RedisBloom's BF.* commands over the Redis protocol on each pod, on the same
	// filters as the HTTP API, through the client Service's port named resp.
	// +kubebuilder:default={}
	// +optional
	RESP RESPSpec `json:"resp,omitempty"`
}

// RESPSpec configures the pods' Redis protocol port. It is reached as the client port is: through
// the client Service, from the networkPolicy's clientsFrom, over TLS with spec.tls.
type RESPSpec struct {
	// enabled opens the RESP port on every pod and on the client Service.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// port of the RESP port, in the pods and on the client Service. Changing it rolls the pods.
	// +kubebuilder:default=6379
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="self != 8080 && self != 8090 && self != 9090",message="port must not be one of the data plane's other ports (8080, 8090 and 9090)"
	// +optional
	Port *int32 `json:"port,omitempty"`

	// passwordSecret names a Secret, in the cluster's namespace, holding the password clients
	// must AUTH with (at least 8 characters). The operator only reads it, by name, and it needs no
	// label. Absent means no password: any client that reaches the port is served. A changed
	// password rolls the pods; a missing Secret or key makes the cluster Degraded
	// (RESPPasswordSecretNotUsable) and leaves its ConfigMap and StatefulSet as they are.
	// +optional
	PasswordSecret *RESPPasswordSecret `json:"passwordSecret,omitempty"`
}

// RESPPasswordSecret is a key of a Secret in the cluster's namespace.
type RESPPasswordSecret struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key of the password in the Secret's data.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// TLSSpec names the certificate of a cluster's pods. Every pod serves it, the internal port
// requires a client certificate that chains to its CA, pods verify their peers against that CA
// alone (they call each other by IP, so names are not checked), and the operator presents the same
// certificate to the pods: it must allow both server auth and client auth. A renewal reaches the
// pods without a restart.
type TLSSpec struct {
	// secretName is a Secret of type kubernetes.io/tls in the cluster's namespace holding
	// tls.crt, tls.key and ca.crt, the CA of the cluster's own. Changing it rolls the pods.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	SecretName string `json:"secretName"`
}

// NetworkPolicySpec configures the cluster's NetworkPolicy. It admits to the client port (8080)
// the clientsFrom peers, to the internal port (8090) only the cluster's own pods and the
// operator, to the ops port (9090) the metricsFrom peers, and lets the pods call only their peers'
// internal port and DNS. It takes effect only where the network plugin enforces NetworkPolicies.
type NetworkPolicySpec struct {
	// enabled creates the NetworkPolicy; false deletes the one the operator made.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// clientsFrom are the applications allowed to call the client port. Absent means every pod
	// of the cluster's namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",message="each peer must set podSelector, namespaceSelector or ipBlock"
	// +listType=atomic
	// +optional
	ClientsFrom []networkingv1.NetworkPolicyPeer `json:"clientsFrom,omitempty"`

	// metricsFrom are the scrapers allowed to read /metrics on the ops port. Absent means the
	// pods labelled app.kubernetes.io/name=prometheus in any namespace. The kubelet's probes,
	// which come from the node, are not affected by most network plugins.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",message="each peer must set podSelector, namespaceSelector or ipBlock"
	// +listType=atomic
	// +optional
	MetricsFrom []networkingv1.NetworkPolicyPeer `json:"metricsFrom,omitempty"`
}

// ReplicationSpec configures how a write reaches the cluster's pods.
type ReplicationSpec struct {
	// writeConsistency is W, how many pods must have a write durable before it is acknowledged:
	// One (the pod that received it), Quorum (a majority of the pods) or All. The pod that
	// receives a write applies it and forwards it to its peers; if W pods do not confirm in
	// time the write answers 503 (it is not rolled back, and peers that missed it are repaired
	// later). A request may override it with ?consistency=one|quorum|all. Reads answer from one
	// pod unless they ask for more; with R + W > N a read never misses an acknowledged value.
	// +kubebuilder:validation:Enum=One;Quorum;All
	// +kubebuilder:default=Quorum
	// +optional
	WriteConsistency Consistency `json:"writeConsistency,omitempty"`

	// factor is R, how many pods hold each partition of each filter; at most replicas (a cluster
	// scaled to 0 may keep it). Absent means the smaller of 3 and replicas: up to three pods,
	// every pod holds every filter. A change moves partitions between the pods
	// (status.placement.phase Moving): they are served where they were until every pod holds
	// what it owns under the new factor, and only then dropped where they are no longer owned.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	Factor *int32 `json:"factor,omitempty"`

	// homeLeaseSeconds is the duration of each pod's home lease: a coordination.k8s.io Lease
	// named after the pod, which the pod renews every third of it. The operator moves a pod's
	// partitions to their next owners only once its lease has gone unrenewed for this long plus
	// the drift bound. A shorter lease
	// fails over sooner and costs more renewals. 0 turns the leases off: homes then move only
	// when their pods go away. A change rolls the pods.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=300
	// +optional
	HomeLeaseSeconds *int32 `json:"homeLeaseSeconds,omitempty"`
}

// Consistency is how many of a cluster's pods a request involves.
type Consistency string

// Consistency levels.
const (
	ConsistencyOne    Consistency = "One"
	ConsistencyQuorum Consistency = "Quorum"
	ConsistencyAll    Consistency = "All"
)

// StorageSpec is the volume claim of each pod.
type StorageSpec struct {
	// size of each pod's volume. A larger size grows the existing volumes when their
	// StorageClass sets allowVolumeExpansion: true (the StatefulSet is made anew, its pods keep
	// running, and the VolumesResizing condition is True until every volume has grown); otherwise
	// the cluster is Degraded (VolumeExpansionNotAllowed) and the volumes are left as they are.
	// Volumes never shrink: a smaller size is refused (Degraded, VolumeShrinkRefused).
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="size must be greater than 0"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the volume claims; empty means the cluster's default class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// whenDeleted says what happens to the volumes when the BloomCluster is deleted.
	// +kubebuilder:validation:Enum=Retain;Delete
	// +kubebuilder:default=Retain
	// +optional
	WhenDeleted RetentionPolicy `json:"whenDeleted,omitempty"`

	// whenScaled says what happens to the volumes of pods removed by a scale-down.
	// +kubebuilder:validation:Enum=Retain;Delete
	// +kubebuilder:default=Retain
	// +optional
	WhenScaled RetentionPolicy `json:"whenScaled,omitempty"`
}

// RetentionPolicy is Retain or Delete.
type RetentionPolicy string

// Retention policies of volumes and filters.
const (
	Retain RetentionPolicy = "Retain"
	Delete RetentionPolicy = "Delete"
)

// PersistenceSpec is how the data plane persists its filters.
type PersistenceSpec struct {
	// logSync is when the log of writes reaches the disk: Always answers a write only once it is
	// on disk; EverySecond may lose about the last second in a crash; No leaves it to the kernel.
	// +kubebuilder:validation:Enum=Always;EverySecond;No
	// +kubebuilder:default=EverySecond
	// +optional
	LogSync LogSyncPolicy `json:"logSync,omitempty"`

	// snapshotTriggers take a snapshot every periodSeconds when more than updatesMoreThan writes
	// happened since the last one. A snapshot is always taken when a pod stops gracefully.
	// +kubebuilder:default={{periodSeconds: 300, updatesMoreThan: 100}}
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	SnapshotTriggers []SnapshotTrigger `json:"snapshotTriggers,omitempty"`

	// allowRecoveryFromCorruptSnapshot starts a pod from the valid part of a corrupt snapshot
	// instead of failing.
	// +kubebuilder:default=true
	// +optional
	AllowRecoveryFromCorruptSnapshot *bool `json:"allowRecoveryFromCorruptSnapshot,omitempty"`
}

// LogSyncPolicy is when the log reaches the disk.
type LogSyncPolicy string

// Log sync policies.
const (
	LogSyncAlways      LogSyncPolicy = "Always"
	LogSyncEverySecond LogSyncPolicy = "EverySecond"
	LogSyncNo          LogSyncPolicy = "No"
)

// SnapshotTrigger is one snapshot criterion.
type SnapshotTrigger struct {
	// periodSeconds is how often the criterion is checked.
	// +kubebuilder:validation:Minimum=1
	// +required
	PeriodSeconds int32 `json:"periodSeconds"`

	// updatesMoreThan is how many writes since the last snapshot it takes, strictly more.
	// +kubebuilder:validation:Minimum=1
	// +required
	UpdatesMoreThan int64 `json:"updatesMoreThan"`
}

// LimitsSpec bounds the memory of bit arrays on each pod. A create or a growth beyond them answers
// 507 with code 4.
// +kubebuilder:validation:XValidation:rule="!has(self.maxFilterBytes) || !has(self.maxTotalBytes) || !quantity(string(self.maxTotalBytes)).isGreaterThan(quantity('0')) || !quantity(string(self.maxFilterBytes)).isGreaterThan(quantity(string(self.maxTotalBytes)))",message="maxFilterBytes must not be more than maxTotalBytes"
type LimitsSpec struct {
	// maxFilterBytes is the most one filter may hold, all its layers together. Absent means no
	// limit but maxTotalBytes.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="maxFilterBytes must not be negative"
	// +optional
	MaxFilterBytes *resource.Quantity `json:"maxFilterBytes,omitempty"`

	// maxTotalBytes is the most all filters together may hold on one pod. Absent means 40% of the
	// container's memory limit (of the node's memory without one); 0 means no limit. With a memory
	// limit, maxTotalBytes plus one copy of a filter (maxFilterBytes, or else maxTotalBytes) must
	// fit in 80% of it, and the volume must hold two snapshots of maxTotalBytes and 128Mi of log.
	// The pods' termination grace period grows with it (and with the memory limit), to leave time
	// for the final snapshot.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="maxTotalBytes must not be negative"
	// +optional
	MaxTotalBytes *resource.Quantity `json:"maxTotalBytes,omitempty"`
}

// PodDisruptionBudgetSpec configures the cluster's PodDisruptionBudget.
type PodDisruptionBudgetSpec struct {
	// enabled creates the PodDisruptionBudget.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// maxUnavailable pods during voluntary disruptions.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// MonitoringSpec configures monitoring of the data plane.
type MonitoringSpec struct {
	// serviceMonitor makes the Prometheus Operator scrape every pod. It is created only when the
	// ServiceMonitor kind exists in the cluster.
	// +optional
	ServiceMonitor ServiceMonitorSpec `json:"serviceMonitor,omitempty"`
}

// ServiceMonitorSpec configures the ServiceMonitor.
type ServiceMonitorSpec struct {
	// enabled creates a ServiceMonitor for the pods.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// interval between scrapes, as Prometheus writes durations (30s, 1m30s): hours, minutes,
	// seconds and milliseconds, each at most once and in that order, as the ServiceMonitor takes it.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:Pattern=`^([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$`
	// +kubebuilder:default="30s"
	// +optional
	Interval string `json:"interval,omitempty"`

	// labels added to the ServiceMonitor, such as the release label a Prometheus selects.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// BloomClusterStatus is what the operator observed of the cluster.
type BloomClusterStatus struct {
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of pods that exist. The counts are always written, so that 0 shows
	// as 0 rather than a blank.
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of pods that recovered their data and serve.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// filters is the number of BloomFilters that reference the cluster.
	// +optional
	Filters int32 `json:"filters"`

	// endpoint is the URL applications call: the client Service, over https with spec.tls.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// selector selects the cluster's pods, as a label selector string: the scale subresource's
	// (kubectl scale bloomcluster, a HorizontalPodAutoscaler).
	// +optional
	Selector string `json:"selector,omitempty"`

	// conditions are Ready, Progressing and Degraded, and VolumesResizing once volumes grew.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// membershipEpoch is the epoch of the last membership (the set of pods that hold the data)
	// the operator computed and pushed to the pods. It only grows: it is written here before any
	// pod is told, so that an epoch never names two different sets, and a pod refuses a
	// membership older than the one it holds.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MembershipEpoch int64 `json:"membershipEpoch,omitempty"`

	// members are the pods of membershipEpoch, sorted by name: the pods with an IP that are not
	// being deleted. A change of this set (a pod added, removed or readdressed) starts a new
	// epoch.
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Members []ClusterMember `json:"members,omitempty"`

	// placement is where the partitions of the filters live under membershipEpoch: its owners and
	// replication factor, the placement the cluster moves from while a move is under way, and
	// what the pods report of their partitions. It is written with membershipEpoch, before any pod
	// is told, so that a restarted operator resumes a move where it was.
	// +optional
	Placement *ClusterPlacement `json:"placement,omitempty"`

	// ignoredPods counts the pods that carry the cluster's labels but are not pods of its
	// StatefulSet: the operator never makes them members nor sends them the cluster's token.
	// Each pass names them in a Warning event.
	// +kubebuilder:validation:Minimum=0
	// +optional
	IgnoredPods int32 `json:"ignoredPods,omitempty"`
}

// ClusterMember is one pod of a membership.
type ClusterMember struct {
	// pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Pod string `json:"pod"`

	// url is where the pod's internal port answers its peers and the operator, such as
	// http://10.0.0.7:8090 (https with spec.tls).
	// +kubebuilder:validation:MaxLength=512
	// +required
	URL string `json:"url"`
}

// PlacementPhase says whether partitions are moving between a cluster's pods.
// +kubebuilder:validation:Enum=Stable;Moving;Draining
type PlacementPhase string

// Placement phases.
const (
	// PlacementStable: every member owns partitions and holds the ones it owns; no move is under
	// way.
	PlacementStable PlacementPhase = "Stable"
	// PlacementMoving: the owners or the replication factor changed, and the pods pull the
	// partitions they newly own; reads are served by the previous owners meanwhile.
	PlacementMoving PlacementPhase = "Moving"
	// PlacementDraining: a scale-down waits for the pods that leave (the highest ordinals), still
	// members but no longer owners, to have their partitions moved to the others; the StatefulSet
	// is scaled down once they have.
	PlacementDraining PlacementPhase = "Draining"
)

// PartitionPlacement says which pods hold the partitions of the filters: each partition on
// replicationFactor of the owners, chosen by the data plane alike on every pod.
type PartitionPlacement struct {
	// owners are the pods that hold partitions, sorted; the other members hold none.
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Owners []string `json:"owners,omitempty"`

	// replicationFactor is how many owners hold each partition: spec.replication.factor, or the
	// smaller of 3 and spec.replicas, and at most the number of owners.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ReplicationFactor int32 `json:"replicationFactor"`
}

// ClusterPlacement is the placement of membershipEpoch's membership and the pods' progress in it.
type ClusterPlacement struct {
	PartitionPlacement `json:",inline"`

	// phase is Stable, Moving (a move to this placement is under way) or Draining (pods about to
	// leave are members that own nothing, while their partitions move or until the StatefulSet
	// removes them).
	// +optional
	Phase PlacementPhase `json:"phase,omitempty"`

	// previous is the placement the cluster moves from, whose owners hold every partition, while
	// a move is under way: the pods pull what they newly own from them. It is cleared by the next
	// epoch once every member reported it holds its partitions.
	// +optional
	Previous *PartitionPlacement `json:"previous,omitempty"`

	// partitionsOwned sums, over the pods that report placement, the (filter, partition) pairs
	// each owns under membershipEpoch.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartitionsOwned int64 `json:"partitionsOwned"`

	// partitionsMoving sums the owned pairs the pods have not pulled yet.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartitionsMoving int64 `json:"partitionsMoving"`

	// partitionsUnderReplicated approximates the (filter, partition) pairs that fewer than
	// replicationFactor pods hold: the largest count the pods report (the pairs with an owner
	// that is not a member), plus the pairs owned by each owner that is catching up while no
	// move is under way (a restarted pod) or that does not answer. A pod that does not answer, or
	// that does not hold membershipEpoch yet, is counted at the average share of the owners that
	// answer. A pair owned by two such pods counts twice, so that it is an upper bound more than
	// an exact count; above 0, the cluster is Degraded (PartitionsUnderReplicated).
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartitionsUnderReplicated int64 `json:"partitionsUnderReplicated"`

	// bytesPerPod is the memory of the bits each pod holds, as it reports it. A scale-down is
	// refused when their sum, spread over the remaining pods, exceeds limits.maxTotalBytes.
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=256
	// +optional
	BytesPerPod []PodBytes `json:"bytesPerPod,omitempty"`
}

// PodBytes is the memory of one pod's filters.
type PodBytes struct {
	// pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Pod string `json:"pod"`

	// bytes of the bits the pod holds.
	// +kubebuilder:validation:Minimum=0
	// +required
	Bytes int64 `json:"bytes"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=bc,categories=bloomery
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Filters",type=integer,JSONPath=`.status.filters`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.membershipEpoch`,priority=1
// +kubebuilder:printcolumn:name="R",type=integer,JSONPath=`.status.placement.replicationFactor`,priority=1
// +kubebuilder:printcolumn:name="Placement",type=string,JSONPath=`.status.placement.phase`,priority=1
// +kubebuilder:printcolumn:name="Ignored",type=integer,JSONPath=`.status.ignoredPods`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// BloomCluster is a data plane of bloom filters: a StatefulSet of pods, its Services, a
// PodDisruptionBudget and, when asked, a ServiceMonitor.
// Its name must be a DNS-1035 label of at most 52 characters: it names the cluster's Services,
// and the pods' controller-revision-hash label (at most 63 characters) adds 11 to it.
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="name must start with a lowercase letter and contain only lowercase letters, digits and '-'"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="name must be at most 52 characters"
type BloomCluster struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired data plane.
	// +required
	Spec BloomClusterSpec `json:"spec"`

	// status is the observed data plane.
	// +optional
	Status BloomClusterStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// BloomClusterList is a list of BloomClusters.
type BloomClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []BloomCluster `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &BloomCluster{}, &BloomClusterList{})
}
