package replication

import (
	"github.com/bloomery/bloomery/dataplane/filter"
)

// Op kinds.
const (
	OpCreate = "create"
	OpDelete = "delete"
	OpAdd    = "add"
)

// Op is one write, as a pod forwards it to its peers (wire.ApplyRequest). Generation names the
// incarnation of the filter it applies to (filter.Filter.Generation), so a write never lands on a
// filter that replaced the one it was meant for.
type Op struct {
	Kind       string          `json:"op"`
	Name       string          `json:"name"`
	Generation int64           `json:"generation"`
	Options    *filter.Options `json:"options,omitempty"` // create
	Keys       []string        `json:"keys,omitempty"`    // add
}
