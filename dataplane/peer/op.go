package peer

import (
	"encoding/binary"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
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
	// HomeEpoch, on an add, says that Home served it as a check-and-set, as the home of its
	// keys' partitions under the membership of that epoch: a pod that holds a higher epoch under
	// which Home is not their home refuses it (Fenced). Zero for any other write.
	HomeEpoch uint64       `json:"homeEpoch,omitempty"`
	Home      string       `json:"home,omitempty"`
	Load      *filter.Load `json:"load,omitempty"` // load
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

// Outcome is what a peer answers for one write of a batch.
type Outcome byte

const (
	// Lacks says that the peer lacks the incarnation the write was for (it missed the create);
	// anti-entropy repairs it.
	Lacks Outcome = 0
	// Holds says that the peer holds the write's effect (durably, as far as its log's sync
	// policy goes).
	Holds Outcome = 1
	// Fenced says that the peer refused a check-and-set's add (Op.HomeEpoch) from a pod that is
	// not the home of its keys under the epoch the peer holds, the add's or a later one.
	Fenced Outcome = 2
)

// ApplyResponse is the JSON answer of a batch: Fenced lists the writes refused (wire.ApplyResponse
// carries them apart from Applied, so that a pod of an earlier version reads them as lacking).
func ApplyResponse(outcomes []Outcome) wire.ApplyResponse {
	r := wire.ApplyResponse{Applied: make([]bool, len(outcomes))}
	for i, o := range outcomes {
		r.Applied[i] = o == Holds
		if o == Fenced {
			if r.Fenced == nil {
				r.Fenced = make([]bool, len(outcomes))
			}
			r.Fenced[i] = true
		}
	}
	return r
}

// OutcomesOf reads a batch's JSON answer back.
func OutcomesOf(r wire.ApplyResponse) []Outcome {
	out := make([]Outcome, len(r.Applied))
	for i, held := range r.Applied {
		switch {
		case held:
			out[i] = Holds
		case i < len(r.Fenced) && r.Fenced[i]:
			out[i] = Fenced
		}
	}
	return out
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
