package wire

import (
	"fmt"
	"time"
)

// Error codes of replication.
const (
	// CodeStaleEpoch (HTTP 409): a membership with an epoch lower than the pod's was refused.
	CodeStaleEpoch = 8
	// CodeReplication (HTTP 503): the write is applied here, but fewer pods than the consistency
	// level asks for acknowledged it in time. Nothing is rolled back; peers are repaired later.
	CodeReplication = 9
	// CodeHomeUnavailable (HTTP 503): a check-and-set or create whose home, as the membership
	// names it, does not serve it: unreachable, catching up, still merging as a new home, or
	// fenced by a newer epoch. The next pod is never tried in its place; the write may have been
	// applied, and no false was answered for it.
	CodeHomeUnavailable = 13
	// CodeLeaseLapsed (HTTP 503): the home's lease was not held when it applied a check-and-set
	// (replication.Options.HomeLease); the write may have been applied, and no false was answered
	// for it.
	CodeLeaseLapsed = 14
)

// MaxEpoch bounds membership epochs, far above what any cluster's changes reach: pods refuse
// higher ones, so that the operator's next epoch (one more than the highest a pod holds) never
// wraps, and JSON numbers and the BloomCluster's status hold every epoch exactly.
const MaxEpoch = 1<<53 - 1

// Member is one pod of a cluster.
type Member struct {
	// Name is the pod's name, unique in the cluster.
	Name string `json:"name"`
	// URL is the base URL of the pod's API, such as http://10.0.0.7:8080.
	URL string `json:"url"`
}

// Membership is the set of pods of one cluster as the operator last saw it. Epoch only grows: a
// pod keeps the membership of the highest epoch it was told and refuses lower ones, so a late,
// reordered push cannot undo a newer one. A pod that was never told has epoch 0 and no members.
type Membership struct {
	Epoch uint64 `json:"epoch"`
	// Self is the name of the pod the membership is sent to; it is one of Members.
	Self    string   `json:"self"`
	Members []Member `json:"members"`
	// Placement says which members hold the partitions of the filters. Its zero value, a
	// membership without owners or replicationFactor, places every partition on every member.
	Placement
	// Previous is set while the cluster moves from one placement to this one: until the operator
	// pushes the next epoch without it, writes go to the owners of both, and reads and
	// check-and-sets to the previous owners, which hold everything; each pod pulls what it newly
	// owns from them and reports it in PlacementStatus.
	Previous *Placement `json:"previous,omitempty"`
	// EndingMove is set in a pod's answer while it holds a membership that ended a move and
	// still sends writes to that move's writers, as it does until every member holds the
	// membership: the partitions those writers no longer own are kept until no member does.
	EndingMove bool `json:"endingMove,omitempty"`
}

// Placement places each partition of each filter on ReplicationFactor of the Owners, chosen by
// rendezvous hashing with bounded loads (the placement package), which every pod computes alike.
type Placement struct {
	// Owners are the names of the members that hold partitions; a member left out holds none
	// (it is draining before it leaves). Empty: every member.
	Owners []string `json:"owners,omitempty"`
	// ReplicationFactor is how many owners hold each partition, 1 to len(owners); 0: all of them.
	ReplicationFactor int `json:"replicationFactor,omitempty"`
}

// PlacementStatusPath is where the operator reads a pod's part in a move (GET, answering
// PlacementStatus).
const PlacementStatusPath = InternalBasePath + "/placement"

// PlacementStatus is a pod's view of its partitions under the membership of Epoch.
type PlacementStatus struct {
	Epoch uint64 `json:"epoch"`
	// CaughtUp: the pod holds every partition it owns under Epoch's placement, pulled from the
	// previous owners after every member held Epoch (so no write routed by an older placement
	// was missed). Without a move under way it is true once the pod is ready.
	CaughtUp bool `json:"caughtUp"`
	// PartitionsOwned counts the (filter, partition) pairs this pod owns under Epoch's
	// placement; PartitionsMoving those of them it has not pulled yet.
	PartitionsOwned  int `json:"partitionsOwned"`
	PartitionsMoving int `json:"partitionsMoving"`
	// PartitionsHeld counts the pairs whose bits the pod holds: the owned ones and, during a
	// move, those it owned before and still serves.
	PartitionsHeld int `json:"partitionsHeld"`
	// PartitionsUnderReplicated counts the pairs of the whole cluster (every pod counts the same)
	// with an owner that is not a member: fewer than R pods hold them until it is back.
	PartitionsUnderReplicated int `json:"partitionsUnderReplicated"`
	// Bytes is the memory of the bits the pod holds.
	Bytes uint64 `json:"bytes"`
	// MovedBytes counts the bytes of partitions pulled from peers since the pod started.
	MovedBytes int64 `json:"movedBytes"`
}

// Consistency says how many pods a request involves: for a write, how many must have it durable
// before the answer; for a read, how many are asked (any true answers true).
type Consistency string

// The consistency levels.
const (
	ConsistencyOne    Consistency = "one"    // this pod alone
	ConsistencyQuorum Consistency = "quorum" // a majority of the members
	ConsistencyAll    Consistency = "all"    // every member
)

// ConsistencyParam is the query parameter that overrides a request's consistency.
const ConsistencyParam = "consistency"

// ParseConsistency reads a request's level: param, or def when param is empty.
func ParseConsistency(param string, def Consistency) (Consistency, error) {
	switch c := Consistency(param); c {
	case "":
		return def, nil
	case ConsistencyOne, ConsistencyQuorum, ConsistencyAll:
		return c, nil
	}
	return "", fmt.Errorf("must be one of one, quorum, all; got %q", param)
}

// Count is how many of n members the level involves.
func (c Consistency) Count(n int) int {
	switch c {
	case ConsistencyOne:
		return min(1, n)
	case ConsistencyAll:
		return n
	default:
		return n/2 + 1
	}
}

// ApplyRequest is the JSON body of POST ApplyPath: a batch of a peer's writes, applied in order.
// Op is the replication package's: it carries the engine's filter options, which this package
// does not know. Peers send the batch in the binary form of OpsContentType instead.
type ApplyRequest[Op any] struct {
	Ops []Op `json:"ops"`
}

// ApplyResponse says, per op, whether the receiver holds its effect durably. False means it
// lacks the incarnation the op was for (it missed the create): anti-entropy repairs it.
type ApplyResponse struct {
	Applied []bool `json:"applied"`
	// Fenced, when present, says per op whether the receiver refused it: a check-and-set's add
	// from a pod that is not the home of its keys under the newer epoch the receiver holds.
	Fenced []bool `json:"fenced,omitempty"`
}

// Inventory is the answer of GET InventoryPath: what a pod holds, for catch-up and anti-entropy
// to compare against.
type Inventory struct {
	// Filters are the live filters; expired ones are left out.
	Filters    []Digest    `json:"filters"`
	Tombstones []Tombstone `json:"tombstones"`
}

// Digest summarises one filter for anti-entropy: pods whose digests of a filter are equal hold
// the same bits, up to checksum collisions.
type Digest struct {
	Name string `json:"name"`
	// Generation is the incarnation: its creation time in Unix nanoseconds, the same on every pod.
	Generation int64 `json:"generation"`
	// Layers are the CRC-32C (Castagnoli) of each layer's bits, partition after partition.
	Layers []uint32 `json:"layers"`
	// Partitions, for a filter of several partitions, are the checksums of each partition's
	// layers, empty for a partition the pod does not hold.
	Partitions [][]uint32 `json:"partitions,omitempty"`
	// Expiry is the filter's expiry override, absent while its create options decide. A pod
	// takes a peer's when it is newer than its own, so that anti-entropy converges it too.
	Expiry *ExpiryOverride `json:"expiry,omitempty"`
}

// ExpiryOverride is a filter's expiry as a client set it (Redis's EXPIRE, PERSIST): Mode "at"
// expires it at At, "never" keeps it. Of two overrides the greater Stamp (Unix nanoseconds of
// the pod that made the change), then the greater Origin (that pod's name), wins.
type ExpiryOverride struct {
	Mode   string    `json:"mode"`
	At     time.Time `json:"at,omitzero"`
	Stamp  int64     `json:"stamp"`
	Origin string    `json:"origin"`
}

// Tombstone is a deleted filter, kept so that a pod that missed the delete learns of it.
type Tombstone struct {
	Name string `json:"name"`
	// Generation: every incarnation created up to it is deleted.
	Generation int64 `json:"generation"`
	// DeletedAt is when the pod recorded the tombstone.
	DeletedAt time.Time `json:"deletedAt"`
}
