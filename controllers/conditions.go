package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of both resources.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
	// VolumesResizing (BloomCluster) is True while a grown volume has not reached its new size;
	// it appears with the first growth.
	ConditionVolumesResizing = "VolumesResizing"
)

// Condition reasons, CamelCase, one place for all of them.
const (
	// BloomCluster
	ReasonAllReplicasReady   = "AllReplicasReady"
	ReasonReplicasNotReady   = "ReplicasNotReady"
	ReasonScaledToZero       = "ScaledToZero"
	ReasonRollingOut         = "RollingOut"
	ReasonUpToDate           = "UpToDate"
	ReasonChildObjectFailure = "ChildObjectFailure"
	// The spec asks for a storage class the StatefulSet's immutable claim template does not have;
	// existing volumes keep theirs.
	ReasonStorageChangeNotApplied = "StorageChangeNotApplied"
	// spec.storage.size is larger, and a volume to grow has a StorageClass that does not allow
	// expansion (or none, or one the operator cannot read): the volumes and the StatefulSet are
	// left as they are.
	ReasonVolumeExpansionNotAllowed = "VolumeExpansionNotAllowed"
	// spec.storage.size is smaller than the volumes: they cannot shrink, and are left as they are.
	ReasonVolumeShrinkRefused = "VolumeShrinkRefused"
	// VolumesResizing: some volumes have not reached the size they request; all have.
	ReasonVolumesResizing = "Resizing"
	ReasonVolumesAtSize   = "AtRequestedSize"
	// The spec asks for a ServiceMonitor, and the cluster has no ServiceMonitor kind.
	ReasonServiceMonitorUnavailable = "ServiceMonitorUnavailable"
	// The limits cannot fit the memory limit or the volume (maxTotalBytes, given or derived, with
	// a copy of a filter beyond the memory's headroom; maxFilterBytes above maxTotalBytes; a volume
	// smaller than two snapshots and the log): the ConfigMap and the StatefulSet are not changed.
	ReasonLimitsDoNotFit = "LimitsDoNotFit"
	// The reason of the Warning event about a data-plane container without a memory limit. The
	// cluster is not Degraded for it: the Degraded condition keeps its reason and says it in its
	// message, as the node's memory is then all that bounds the filters.
	ReasonNoMemoryLimit = "NoMemoryLimit"
	// Pods whose API listens did not answer the operator's membership push: they cannot turn
	// ready, and their peers do not know them (a NetworkPolicy, or a broken pod).
	ReasonMembershipNotDelivered = "MembershipNotDelivered"
	// Pods hold the largest membership epoch there is (only pushed by someone other than the
	// operator): no newer membership can reach them until they restart.
	ReasonMembershipEpochExhausted = "MembershipEpochExhausted"
	// Pods whose home lease the operator revoked answer again, and are members again, but have
	// not taken their lease back: they serve no partition as home (they do not reach the API
	// server, or may not update their Lease).
	ReasonHomeLeaseNotTaken = "HomeLeaseNotTaken"
	// The event of a pod's home lease revoked after it lapsed.
	ReasonHomeLeaseRevoked = "HomeLeaseRevoked"
	// spec.replicas is lower than the StatefulSet's, and the remaining pods could not hold the
	// data the pods report within maxTotalBytes: the scale-down does not start, and the
	// StatefulSet keeps its pods.
	ReasonScaleDownRefused = "ScaleDownRefused"
	// spec.resp.passwordSecret names a Secret that does not exist, lacks the key or holds a
	// password too short: the ConfigMap and the StatefulSet are not changed.
	ReasonRESPPasswordSecretNotUsable = "RESPPasswordSecretNotUsable"
	// Some (filter, partition) pairs are held by fewer pods than the replication factor
	// (status.placement.partitionsUnderReplicated): an owner is away, restarting and catching up
	// from its peers, or not answering. Reads and writes of those partitions go to the owners left.
	ReasonPartitionsUnderReplicated = "PartitionsUnderReplicated"

	// BloomFilter
	ReasonOnAllPods       = "OnAllPods"
	ReasonCreating        = "CreatingOnPods"
	ReasonPodsUnreachable = "PodsUnreachable"
	// ReasonPodsNotReady: some pods serve the filter, others are missing or not Ready yet
	// (starting, recovering, catching up from their peers).
	ReasonPodsNotReady      = "PodsNotReady"
	ReasonShapeMismatch     = "ShapeMismatch"
	ReasonClusterNotFound   = "ClusterNotFound"
	ReasonNoPods            = "NoPods"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonDataPlaneRejected = "DataPlaneRejected"
	// The cluster's internal token Secret does not exist yet, or is not usable: the operator
	// cannot call the pods' internal port.
	ReasonNoInternalToken = "NoInternalToken"

	// Both
	ReasonAsExpected = "AsExpected"
	ReasonPaused     = "ReconciliationPaused"
	// spec.tls names a Secret that does not exist or does not hold a usable certificate, key and
	// CA: the operator calls no pod of the cluster, rather than call them over plain HTTP.
	ReasonTLSSecretNotUsable = "TLSSecretNotUsable"
)

// PauseAnnotation stops reconciliation of the object that carries it with the value "true", for
// an operator who needs to change child objects by hand.
const PauseAnnotation = "bloomery.io/paused"

// setCondition sets a condition stamped with the generation it describes; the transition time
// changes only when the status does.
func setCondition(conditions *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		ObservedGeneration: generation,
		Reason:             reason,
		Message:            message,
	})
}

// boolStatus turns a bool into a condition status.
func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}
