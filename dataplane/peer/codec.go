package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"
	"unsafe"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// The writes a pod sends its peers travel in a compact binary form (wire.OpsContentType): keys are copied as they are,
// where JSON would escape them and its decoder would reflect over every field, which cost a peer
// a fifth of its CPU. A batch is:
//
//	magic        4 bytes, "BOP1" (the format's version is its last byte)
//	count        uvarint: the number of ops
//	ops          count times: kind (1 byte: 1 create, 2 delete, 3 add, 4 expire, 5 a home's add,
//	             6 load), name (uvarint length and bytes), generation (int64, little endian), then
//	             for a create the options (filter.Options.AppendBinary, as in snapshots), for an add
//	             the keys (uvarint count, then each key as uvarint length and bytes), for a home's
//	             add the home's epoch (uvarint) and name (uvarint length and bytes) then the keys
//	             as an add's, for an expire the override: mode (1 byte: 1 a deadline, 2 never),
//	             deadline (int64 Unix ns, 0 for never), stamp (int64) and origin (uvarint length
//	             and bytes), and for a load the piece (filter.Load.AppendBinary, as in the log)
//
// A pod of a version without kinds 4 to 6 refuses a batch that holds one as malformed;
// anti-entropy brings it the change once it is upgraded. Kind 3 and kind 5 differ only in the
// home's epoch and name: an add without them (Op.HomeEpoch 0) is encoded as kind 3, as before.

var opsMagic = [4]byte{'B', 'O', 'P', '1'}

const (
	wireCreate  = 1
	wireDelete  = 2
	wireAdd     = 3
	wireExpire  = 4
	wireHomeAdd = 5
	wireLoad    = 6
)

// ErrMalformedOps refuses a batch that does not decode.
var ErrMalformedOps = errors.New("malformed batch of writes")

// AppendOps encodes ops onto dst.
func AppendOps(dst []byte, ops []Op) []byte {
	dst = append(dst, opsMagic[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for _, op := range ops {
		switch op.Kind {
		case OpCreate:
			dst = append(dst, wireCreate)
		case OpDelete:
			dst = append(dst, wireDelete)
		case OpExpire:
			dst = append(dst, wireExpire)
		case OpLoad:
			dst = append(dst, wireLoad)
		default:
			if op.HomeEpoch != 0 {
				dst = append(dst, wireHomeAdd)
			} else {
				dst = append(dst, wireAdd)
			}
		}
		dst = appendString(dst, op.Name)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(op.Generation))
		switch op.Kind {
		case OpCreate:
			var o filter.Options
			if op.Options != nil {
				o = *op.Options
			}
			dst, _ = o.AppendBinary(dst)
		case OpAdd:
			if op.HomeEpoch != 0 {
				dst = binary.AppendUvarint(dst, op.HomeEpoch)
				dst = appendString(dst, op.Home)
			}
			dst = binary.AppendUvarint(dst, uint64(op.KeyCount()))
			for k := range op.EachKey {
				dst = appendString(dst, k)
			}
		case OpExpire:
			var e filter.Expiry
			if op.Expiry != nil {
				e = *op.Expiry
			}
			dst = append(dst, byte(e.Mode))
			var at int64
			if e.Mode == filter.ExpiryAt {
				at = e.At.UnixNano()
			}
			dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Stamp))
			dst = appendString(dst, e.Origin)
		case OpLoad:
			var l filter.Load
			if op.Load != nil {
				l = *op.Load
			}
			dst = l.AppendBinary(dst)
		}
	}
	return dst
}

// encodedSizeHint is about the bytes AppendOps takes for ops, at least those of adds, so that a
// batch is encoded into one allocation.
func encodedSizeHint(ops []Op) int {
	size := len(opsMagic) + binary.MaxVarintLen64
	for _, op := range ops {
		// The kind, the name, the generation, and room for a create's options or an expiry.
		size += 1 + binary.MaxVarintLen64 + len(op.Name) + 8 + binary.MaxVarintLen64 + filter.OptionsBinaryMaxLen +
			2*binary.MaxVarintLen64 + len(op.Home)
		for k := range op.EachKey {
			size += uvarintSize(len(k)) + len(k)
		}
		if op.Load != nil {
			size += 1 + 4*binary.MaxVarintLen64 + len(op.Load.Bytes) + 3*binary.MaxVarintLen64*len(op.Load.Head)
		}
	}
	return size
}

// uvarintSize is how many bytes binary.AppendUvarint takes for n.
func uvarintSize(n int) int { return max(1, (bits.Len64(uint64(n))+6)/7) }

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// opsDecoder reads a batch; every length is checked against the bytes left before anything is
// allocated for it, and the first error sticks.
type opsDecoder struct {
	b   []byte
	err error
}

func (d *opsDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformedOps, fmt.Sprintf(format, args...))
	}
}

func (d *opsDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%s: not a varint", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *opsDecoder) u64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("%s: %d bytes left, want 8", what, len(d.b))
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *opsDecoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("%s: no byte left", what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *opsDecoder) bytes(what string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("%s: %d bytes left, want %d", what, len(d.b), n)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *opsDecoder) string(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("%s: %d bytes declared, %d left", what, n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// keys reads an add's keys: their lengths are checked first, then their bytes are kept as they
// came (packedKeys), where they are in the batch. What they take is what the batch holds, whatever count it
// declares.
func (d *opsDecoder) keys(op uint64) packedKeys {
	n := d.uvarint("key count")
	if d.err != nil {
		return packedKeys{}
	}
	end := 0
	for j := range n {
		l, w := binary.Uvarint(d.b[end:])
		if w <= 0 || l > uint64(len(d.b)-end-w) {
			d.fail("op %d: key %d of the %d declared does not fit in the %d bytes left", op, j, n, len(d.b))
			return packedKeys{}
		}
		end += w + int(l)
	}
	var p packedKeys
	if end > 0 {
		// The keys stay in the batch's bytes: a copy would double what a large batch takes.
		p = packedKeys{b: unsafe.String(&d.b[0], end), n: int(n)}
	} else {
		p.n = int(n)
	}
	d.b = d.b[end:]
	return p
}

// DecodeOps decodes a batch encoded by AppendOps. It checks the encoding only; Apply checks
// what the ops say. The keys and loaded bytes of the ops it answers are read from b, in place: b
// must not change while the ops are in use.
func DecodeOps(b []byte) ([]Op, error) {
	if len(b) < len(opsMagic) || [4]byte(b[:4]) != opsMagic {
		return nil, fmt.Errorf("%w: does not start with %q", ErrMalformedOps, opsMagic[:])
	}
	d := &opsDecoder{b: b[4:]}
	count := d.uvarint("count")
	// Senders put at most maxBatchOps ops in a batch; every op takes at least 10 bytes (kind,
	// name length, generation).
	if d.err == nil && (count > maxBatchOps || count > uint64(len(d.b))/10) {
		d.fail("%d ops declared in %d bytes, at most %d in a batch", count, len(d.b), maxBatchOps)
	}
	if d.err != nil {
		return nil, d.err
	}
	ops := make([]Op, 0, count)
	for i := uint64(0); i < count && d.err == nil; i++ {
		ops = append(ops, d.op(i))
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the last op", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return ops, nil
}

func (d *opsDecoder) op(i uint64) Op {
	var op Op
	kind := d.byte("kind")
	op.Name = d.string("name")
	op.Generation = int64(d.u64("generation"))
	switch kind {
	case wireCreate:
		op.Kind = OpCreate
		o := &filter.Options{}
		head := d.b[:min(len(d.b), filter.OptionsBinarySize)] // how long the options are: see OptionsBinaryLen
		if b := d.bytes("options", filter.OptionsBinaryLen(head)); d.err == nil {
			if err := o.UnmarshalBinary(b); err != nil {
				d.fail("op %d: %v", i, err)
			}
		}
		op.Options = o
	case wireDelete:
		op.Kind = OpDelete
	case wireAdd:
		op.Kind = OpAdd
		op.packed = d.keys(i)
	case wireHomeAdd:
		op.Kind = OpAdd
		op.HomeEpoch = d.uvarint("home epoch")
		op.Home = d.string("home")
		if d.err == nil && op.HomeEpoch == 0 {
			d.fail("op %d: a home's add at epoch 0", i)
		}
		op.packed = d.keys(i)
	case wireExpire:
		op.Kind = OpExpire
		e := &filter.Expiry{Mode: filter.ExpiryMode(d.byte("expiry mode"))}
		if at := int64(d.u64("deadline")); e.Mode == filter.ExpiryAt {
			e.At = time.Unix(0, at)
		}
		e.Stamp = int64(d.u64("stamp"))
		e.Origin = d.string("origin")
		op.Expiry = e
	case wireLoad:
		op.Kind = OpLoad
		if d.err != nil {
			break
		}
		l, n, err := filter.DecodeLoad(d.b)
		if err != nil {
			d.fail("op %d: %v", i, err)
			break
		}
		d.b = d.b[n:]
		op.Load = &l
	default:
		d.fail("op %d: unknown kind %d", i, kind)
	}
	return op
}
