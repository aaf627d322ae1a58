package peer

import (
	"encoding/binary"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// Op kinds.
const (
	OpCreate = "create"
	OpDelete = "delete"
	OpAdd    = "add"
	// OpExpire changes the expiry of the op's incarnation to Expiry, if that is newer than the
	// one it holds (filter.Expiry.Newer).
	OpExpire = "expire"
	// OpLoad applies a piece of a dump loaded into the op's incarnation (filter.Load): its head,
	// or bytes ORed into one layer.
	OpLoad = "load"
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
	Expiry     *filter.Expiry  `json:"expiry,omitempty"`  // expire
	Load       *filter.Load    `json:"load,omitempty"`    // load
	// packed is an add's keys as a binary batch carries them (each a uvarint length, then its
	// bytes), which DecodeOps keeps in one string rather than as Keys: a string header for each
	// of millions of empty keys would take sixteen times the batch. Keys reads either form.
	packed packedKeys
}

// packedKeys are keys encoded as in a binary batch, already checked by DecodeOps.
type packedKeys struct {
	b string
	n int // how many
}

// KeyCount is the number of an add's keys.
func (op Op) KeyCount() int { return len(op.Keys) + op.packed.n }

// AllKeys answers an add's keys as a slice, whichever form they came in.
func (op Op) AllKeys() []string {
	if op.packed.n == 0 {
		return op.Keys
	}
	keys := make([]string, 0, op.KeyCount())
	for k := range op.EachKey {
		keys = append(keys, k)
	}
	return keys
}

// EachKey calls yield with each of an add's keys, in order, until it answers false.
func (op Op) EachKey(yield func(string) bool) {
	for _, k := range op.Keys {
		if !yield(k) {
			return
		}
	}
	for p := op.packed.b; len(p) > 0; {
		n, w := stringUvarint(p)
		if w == 0 || n > uint64(len(p)-w) || !yield(p[w:w+int(n)]) {
			return
		}
		p = p[w+int(n):]
	}
}

// stringUvarint is binary.Uvarint over a string, which DecodeOps has checked.
func stringUvarint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
