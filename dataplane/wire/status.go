package wire

// FilterStatusPath is where the operator reads a filter's status (GET, answering FilterStatus),
// with the filter's name, percent-encoded, as the path segment; the server passes its route
// parameter.
func FilterStatusPath(name string) string { return InternalBasePath + "/filters/" + name + "/status" }

// FilterStatus is what the operator reports of a filter on one pod: its shape, to tell it from
// another filter of the same name, and its state. Unlike Filter, whose fill ratio and rate come
// from counting the bits set, it estimates them from the keys each layer took, so answering it
// costs the same whatever the filter's size.
type FilterStatus struct {
	Name               string  `json:"name"`
	ExpectedInsertions uint64  `json:"expectedInsertions"`
	FPP                float64 `json:"fpp"`
	Scalable           bool    `json:"scalable"`
	Growth             uint    `json:"growth,omitempty"`
	Partitions         int     `json:"partitions"`
	// PartitionsHeld counts the partitions whose bits this pod holds: all of them unless the
	// membership places partitions on some pods only. Items and SizeBytes are of those.
	PartitionsHeld int `json:"partitionsHeld"`
	// PartitionsOwned counts the partitions the membership's placement gives this pod: all of
	// them unless it places partitions on some pods only. During a move a new owner owns
	// partitions it is still pulling, and an old one holds partitions it no longer owns.
	PartitionsOwned int `json:"partitionsOwned"`

	Items              uint64  `json:"items"`
	Layers             int     `json:"layers"`
	SizeBytes          uint64  `json:"sizeBytes"`
	EstimatedFillRatio float64 `json:"estimatedFillRatio"`
	EstimatedFPP       float64 `json:"estimatedFpp"`
	// LastSnapshot and Owner are as in Filter.
	LastSnapshot string `json:"lastSnapshot,omitempty"`
	Owner        string `json:"owner,omitempty"`
}

// Status is the part of f that FilterStatus carries, with the counted fill ratio and rate.
func (f Filter) Status() FilterStatus {
	return FilterStatus{
		Name:               f.Name,
		ExpectedInsertions: f.ExpectedInsertions,
		FPP:                f.FPP,
		Scalable:           f.Scalable,
		Growth:             f.Growth,
		Partitions:         f.Partitions,
		PartitionsHeld:     f.Partitions, // a description sums every partition
		PartitionsOwned:    f.Partitions,
		Items:              f.Items,
		Layers:             f.Layers,
		SizeBytes:          f.SizeBytes,
		EstimatedFillRatio: f.FillRatio,
		EstimatedFPP:       f.EstimatedFPP,
		LastSnapshot:       f.LastSnapshot,
		Owner:              f.Owner,
	}
}

// FilterStatusesPath answers the status of every live filter of the pod (GET, answering
// FilterStatuses). The operator long-polls it, one request per pod rather than one per filter:
// with ?version=V&wait=S (seconds) the pod answers as soon as its filters differ from version V,
// or after S seconds at the latest (MaxStatusesWait), with the counts of that moment. With
// &changes=true too, an answer to a change carries only what changed since V, when the pod can
// tell; an answer at the end of the wait carries every filter, for their counts.
const FilterStatusesPath = InternalBasePath + "/statuses"

// MaxStatusesWait bounds the wait a FilterStatusesPath request may ask for.
const MaxStatusesWait = 60

// FilterStatuses is the answer of FilterStatusesPath, and a version that changes when a filter
// appears, goes, or changes its shape or its partitions here, even if it changed back since;
// counts (items, size, fill) change without changing it.
type FilterStatuses struct {
	Version string `json:"version"`
	// Changes is set when Filters holds only the filters that changed since the version the
	// caller named, and Removed the names gone since; unset, Filters is every filter, sorted by
	// name.
	Changes bool           `json:"changes,omitempty"`
	Filters []FilterStatus `json:"filters"`
	Removed []string       `json:"removed,omitempty"`
}
