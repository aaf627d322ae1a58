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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BloomFilterSpec describes one filter, held by every pod of its cluster. The fields that define
// the filter's shape cannot change: a filter of another shape is another filter.
// +kubebuilder:validation:XValidation:rule="has(self.scalable) == has(oldSelf.scalable)",message="scalable cannot be added or removed"
// +kubebuilder:validation:XValidation:rule="has(self.growth) == has(oldSelf.growth)",message="growth cannot be added or removed"
// +kubebuilder:validation:XValidation:rule="has(self.partitions) == has(oldSelf.partitions)",message="partitions cannot be added or removed"
// +kubebuilder:validation:XValidation:rule="has(self.expiry) == has(oldSelf.expiry)",message="expiry cannot be added or removed"
type BloomFilterSpec struct {
	// clusterRef names the BloomCluster, in the same namespace, that holds the filter.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterRef is immutable"
	// +required
	ClusterRef ClusterReference `json:"clusterRef"`

	// capacity is the number of values the filter holds at falsePositiveRate; a scalable filter
	// grows past it, keeping the rate (filter-service's expectedInsertions).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9007199254740992
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="capacity is immutable"
	// +required
	Capacity int64 `json:"capacity"`

	// falsePositiveRate is the probability that a value never added is reported present, as a
	// decimal string in (0, 1) such as "0.001" (filter-service's fpp).
	// +kubebuilder:validation:Pattern=`^0?\.[0-9]*[1-9][0-9]*$`
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="falsePositiveRate is immutable"
	// +required
	FalsePositiveRate string `json:"falsePositiveRate"`

	// scalable filters add a layer when full and keep falsePositiveRate at any size; a fixed
	// filter's rate rises past capacity.
	// +kubebuilder:default=true
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="scalable is immutable"
	// +optional
	Scalable *bool `json:"scalable,omitempty"`

	// growth is the capacity factor from one layer of a scalable filter to the next.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="growth is immutable"
	// +optional
	Growth *int32 `json:"growth,omitempty"`

	// partitions splits the filter's values into that many partitions by a hash of the value, each
	// a scalable filter of ⌈capacity/partitions⌉ at falsePositiveRate, so that no single filter on
	// a pod outgrows the pods' maxFilterBytes. Left out, the data plane picks the fewest (a power
	// of two) whose partition fits the pods' maxFilterBytes.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="partitions is immutable"
	// +optional
	Partitions *int32 `json:"partitions,omitempty"`

	// expiry makes the filter expire; the operator then recreates it empty, so expiry works as
	// rotation. Without it the filter never expires.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="expiry is immutable"
	// +optional
	Expiry *ExpirySpec `json:"expiry,omitempty"`

	// deletionPolicy says what happens to the filter on the pods when the BloomFilter is deleted.
	// +kubebuilder:validation:Enum=Delete;Retain
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy RetentionPolicy `json:"deletionPolicy,omitempty"`
}

// ClusterReference names a BloomCluster in the same namespace.
type ClusterReference struct {
	// name of the BloomCluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// ExpirySpec is when a filter expires: after its creation or after its last use, not both.
// +kubebuilder:validation:XValidation:rule="has(self.afterCreate) != has(self.afterAccess)",message="give exactly one of afterCreate and afterAccess"
type ExpirySpec struct {
	// afterCreate expires the filter this long after it was created, such as "24h".
	// +optional
	AfterCreate *metav1.Duration `json:"afterCreate,omitempty"`

	// afterAccess expires the filter this long after its last check or set.
	// +optional
	AfterAccess *metav1.Duration `json:"afterAccess,omitempty"`
}

// PodFilterStatus is the filter as one pod holds it.
type PodFilterStatus struct {
	// pod is the pod's name.
	// +required
	Pod string `json:"pod"`

	// present says whether the pod holds the filter with the spec's shape.
	// +required
	Present bool `json:"present"`

	// items approximates the values the pod's copy holds: of the partitions it holds.
	// +optional
	Items int64 `json:"items,omitempty"`

	// sizeBytes is the memory of the pod's copy: of the partitions it holds.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// partitionsHeld is how many of the filter's partitions the pod holds: all of them unless the
	// cluster places partitions on some pods only (more pods than its replication factor). Left
	// out for a pod that holds none; a pod from before placement holds all of them.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartitionsHeld int32 `json:"partitionsHeld,omitempty"`

	// partitionsOwned is how many of the filter's partitions the cluster's placement gives the
	// pod: all of them unless it places partitions on some pods only. While partitions move, a
	// new owner owns some it has not pulled yet, and a previous owner holds some it no longer
	// owns. Left out for a pod that owns none.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PartitionsOwned int32 `json:"partitionsOwned,omitempty"`

	// message says what is wrong with this pod's copy, if anything.
	// +optional
	Message string `json:"message,omitempty"`
}

// BloomFilterStatus is what the operator observed of the filter on the pods.
type BloomFilterStatus struct {
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready, Progressing and Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// pods is the filter on each pod of the cluster.
	// +listType=map
	// +listMapKey=pod
	// +optional
	Pods []PodFilterStatus `json:"pods,omitempty"`

	// items approximates the values the filter holds: the largest count of its copies or, when a
	// pod holds some of the filter's partitions but not all, the pods' sum divided by the average
	// number of copies of a partition (the sum of the partitions they hold over partitions).
	// Always written, so that a new filter shows 0 rather than a blank.
	// +optional
	Items int64 `json:"items"`

	// fillRatio is the share of bits set, as a decimal string: the largest of the pods' copies,
	// estimated from the values each layer took (counting the bits of every filter at every
	// resync would cost the pods too much).
	// +optional
	FillRatio string `json:"fillRatio,omitempty"`

	// estimatedFalsePositiveRate is the false positive rate the fill ratio gives now, as a decimal
	// string: the largest of the pods' copies.
	// +optional
	EstimatedFalsePositiveRate string `json:"estimatedFalsePositiveRate,omitempty"`

	// partitions is how many partitions the filter's values are split into on the pods, as the
	// pods report it (the largest of the pods' copies; 1 for a filter that is not split).
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// sizeBytes is the memory of one copy of the filter: the largest of the pods' copies, which
	// differ while a scalable filter grows, or, when a pod holds some of the filter's partitions
	// but not all, the pods' sum divided by the average number of copies of a partition, as for
	// items.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// lastSnapshotTime is deprecated and no longer written: every snapshot of a pod would patch
	// every filter. The pods' metric bloomery_snapshot_last_success_timestamp_seconds says when
	// each last snapshotted.
	// +optional
	LastSnapshotTime *metav1.Time `json:"lastSnapshotTime,omitempty"`

	// lastRecreationTime is when the operator last recreated the filter after it expired.
	// +optional
	LastRecreationTime *metav1.Time `json:"lastRecreationTime,omitempty"`

	// url is where applications call the filter.
	// +optional
	URL string `json:"url,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bf,categories=bloomery
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.spec.capacity`
// +kubebuilder:printcolumn:name="FPR",type=string,JSONPath=`.spec.falsePositiveRate`
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.status.partitions`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Items",type=integer,JSONPath=`.status.items`
// +kubebuilder:printcolumn:name="Fill",type=string,JSONPath=`.status.fillRatio`,priority=1
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// BloomFilter is one bloom filter, created on every pod of its BloomCluster under the
// BloomFilter's name.
// +kubebuilder:validation:XValidation:rule="self.metadata.name != 'list'",message="list is reserved by the data plane's API; choose another name"
type BloomFilter struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired filter.
	// +required
	Spec BloomFilterSpec `json:"spec"`

	// status is the filter as observed on the pods.
	// +optional
	Status BloomFilterStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// BloomFilterList is a list of BloomFilters.
type BloomFilterList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []BloomFilter `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &BloomFilter{}, &BloomFilterList{})
}
