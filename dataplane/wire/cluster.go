package wire

// InternalBasePath prefixes the endpoints only the operator and peer pods call.
const InternalBasePath = "/internal/v1"

// MembershipPath is where the operator tells a pod who its peers are (PUT) and reads what the
// pod believes (GET).
const MembershipPath = InternalBasePath + "/membership"

// Error codes of replication.
const (
	// CodeStaleEpoch (HTTP 409): a membership with an epoch lower than the pod's was refused.
	CodeStaleEpoch = 8
	// CodeReplication (HTTP 503): the write is applied here, but fewer pods than the consistency
	// level asks for acknowledged it in time. Nothing is rolled back; peers are repaired later.
	CodeReplication = 9
)

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
