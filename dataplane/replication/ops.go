package replication

import (
	"github.com/bloomery/bloomery/dataplane/filter"
)

// Paths of the peer-to-peer endpoints.
const (
	applyPath     = "/internal/v1/apply"
	inventoryPath = "/internal/v1/inventory"
)

// ForwardedHeader marks a request one pod sent another on a client's behalf: the receiver serves
// it locally and does not forward it again.
const ForwardedHeader = "X-Bloomery-Forwarded"

// Op kinds.
const (
	OpCreate = "create"
	OpDelete = "delete"
	OpAdd    = "add"
)

// Op is one write, as a pod forwards it to its peers. Generation names the incarnation of the
// filter it applies to (filter.Filter.Generation), so a write never lands on a filter that
// replaced the one it was meant for.
type Op struct {
	Kind       string          `json:"op"`
	Name       string          `json:"name"`
	Generation int64           `json:"generation"`
	Options    *filter.Options `json:"options,omitempty"` // create
	Keys       []string        `json:"keys,omitempty"`    // add
}

// applyRequest is the body of POST /internal/v1/apply: a batch of ops, applied in order.
type applyRequest struct {
	Ops []Op `json:"ops"`
}

// applyResponse says, per op, whether the receiver holds its effect durably. False means it
// lacks the incarnation the op was for (it missed the create): anti-entropy repairs it.
type applyResponse struct {
	Applied []bool `json:"applied"`
}

// Inventory is what a pod holds, for catch-up and anti-entropy to compare against.
type Inventory struct {
	Filters    []filter.Digest    `json:"filters"`
	Tombstones []filter.Tombstone `json:"tombstones"`
}
