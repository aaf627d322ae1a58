package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// Body types. Snapshots hold one header then filters; the log holds the other kinds.
const (
	kindSnapshotHeader = 1
	kindFilter         = 2
	kindCreate         = 3
	kindDelete         = 4
	kindAdd            = 5
	kindAccess         = 6
	// kindTombstone is a delete with its generation, in the log, and a kept tombstone in
	// snapshots. kindDelete (name only) is still read from older files.
	kindTombstone = 7
	// kindExpiry is a change of a filter's expiry (Redis's EXPIRE, PERSIST) in the log; in a
	// snapshot it comes right before the record of the filter it belongs to, so that a reader
	// judges the filter's expiry by it. Files without it read as before: no override.
	kindExpiry = 8
	// kindSegmentStart opens every log segment: its own number and how many bytes of records
	// the segment before it held when it was sealed. Recovery compares them with what it read,
	// so that a sealed segment cut short or zeroed is damage, not a clean end. Segments of
	// older versions start without it and are read as before, unchecked.
	kindSegmentStart = 9
	// kindLoad is a piece of a dump loaded into a filter (filter.Load) in the log: name,
	// generation, then the piece's binary form (filter.Load.AppendBinary). Older files have none.
	kindLoad = 10
)

// snapshotHeader opens every snapshot: the first log segment the snapshot does not cover.
type snapshotHeader struct {
	Taken        time.Time
	FirstSegment uint64
}

// change is one decoded log record.
type change struct {
	kind    byte
	name    string
	options filter.Options // kindCreate
	at      time.Time      // kindCreate: created; kindAccess: accessed; kindTombstone: deleted
	keys    []string       // kindAdd
	held    []bool         // kindCreate: the partitions the pod held; nil for all
	// generation is kindTombstone's: incarnations created up to it are deleted; and kindExpiry's:
	// the incarnation whose expiry changed.
	generation int64
	expiry     filter.Expiry // kindExpiry
	load       filter.Load   // kindLoad, whose generation is the incarnation loaded into
	// segment and previousBytes are kindSegmentStart's: the segment's number, and the bytes of
	// records of the segment before it.
	segment       uint64
	previousBytes int64
}

// encoder appends little-endian fields to a byte slice.
type encoder struct{ buf []byte }

func (e *encoder) u8(v byte)        { e.buf = append(e.buf, v) }
func (e *encoder) u64(v uint64)     { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }
func (e *encoder) i64(v int64)      { e.u64(uint64(v)) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) time(t time.Time) {
	e.i64(t.UnixNano())
}

func (e *encoder) options(o filter.Options) {
	e.buf, _ = o.AppendBinary(e.buf)
}

func encodeHeader(h snapshotHeader) []byte {
	e := encoder{}
	e.u8(kindSnapshotHeader)
	e.time(h.Taken)
	e.u64(h.FirstSegment)
	return e.buf
}

// encodeFilterHead encodes everything of a filter but its bit arrays, which follow the head in
// the record as each layer's words, little endian, partition by partition. The head holds, per
// partition (as many as the options say), its items, newest items and layers' shapes, none for a
// partition the record leaves out: a filter of one partition is encoded as before partitions
// existed.
func encodeFilterHead(st filter.State) []byte {
	e := encoder{}
	e.u8(kindFilter)
	e.str(st.Name)
	e.options(st.Options)
	e.time(st.Created)
	e.time(st.LastAccess)
	for _, p := range st.Parts {
		e.u64(p.Items)
		e.u64(p.NewestItems)
		e.uvarint(uint64(len(p.Layers)))
		for _, l := range p.Layers {
			e.u64(uint64(l.Bits))
			e.u64(uint64(l.Hashes))
			e.u64(uint64(l.WordCount()))
		}
	}
	return e.buf
}

// encodeCreate encodes a filter's creation; when the pod holds only some of its partitions (held
// is not nil), a bitmap of them follows, one bit per partition, so that a replay holds those
// alone. A create without it holds every partition, as before partitions were placed.
func encodeCreate(name string, o filter.Options, created time.Time, held []bool) []byte {
	e := encoder{}
	e.u8(kindCreate)
	e.str(name)
	e.options(o)
	e.time(created)
	if held != nil {
		bitmap := make([]byte, (len(held)+7)/8)
		for p, h := range held {
			if h {
				bitmap[p/8] |= 1 << (p % 8)
			}
		}
		e.buf = append(e.buf, bitmap...)
	}
	return e.buf
}

func encodeTombstone(t filter.Tombstone) []byte {
	e := encoder{}
	e.u8(kindTombstone)
	e.str(t.Name)
	e.i64(t.Generation)
	e.time(t.DeletedAt)
	return e.buf
}

// encodeExpiry encodes a filter's expiry override: name, generation, mode (1 byte: 1 a deadline,
// 2 never), the deadline (time; 0 for never), the stamp (int64) and the origin (string).
func encodeExpiry(name string, generation int64, x filter.Expiry) []byte {
	e := encoder{}
	e.u8(kindExpiry)
	e.str(name)
	e.i64(generation)
	e.u8(byte(x.Mode))
	if x.Mode == filter.ExpiryAt {
		e.time(x.At)
	} else {
		e.i64(0)
	}
	e.i64(x.Stamp)
	e.str(x.Origin)
	return e.buf
}

func encodeDelete(name string) []byte {
	e := encoder{}
	e.u8(kindDelete)
	e.str(name)
	return e.buf
}

func appendAdd(dst []byte, name string, keys []string) []byte {
	e := encoder{buf: dst}
	e.u8(kindAdd)
	e.str(name)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
	}
	return e.buf
}

func encodeLoad(name string, generation int64, l filter.Load) []byte {
	e := encoder{}
	e.u8(kindLoad)
	e.str(name)
	e.i64(generation)
	e.buf = l.AppendBinary(e.buf)
	return e.buf
}

func encodeSegmentStart(segment uint64, previousBytes int64) []byte {
	e := encoder{}
	e.u8(kindSegmentStart)
	e.u64(segment)
	e.i64(previousBytes)
	return e.buf
}

func encodeAccess(name string, at time.Time) []byte {
	e := encoder{}
	e.u8(kindAccess)
	e.str(name)
	e.time(at)
	return e.buf
}

// wordBytes views words as their little-endian bytes without copying. Every platform Go
// targets for this service (amd64, arm64) is little endian; init refuses the others.
func wordBytes(words []uint64) []byte {
	if len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

func init() {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		panic("persist: the snapshot format assumes a little-endian machine")
	}
}

// decoder reads fields from a record body. The first error sticks; every length is checked
// against what is left of the body before anything is allocated.
type decoder struct {
	r    io.Reader
	left uint64
	err  error
	// tmp holds the fixed-size fields as they are read: it is part of the decoder, which the
	// reader's interface makes escape anyway, rather than one more allocation per field.
	tmp [filter.OptionsBinaryMaxLen]byte
}

var errMalformed = errors.New("malformed record body")

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) read(p []byte) {
	if d.err != nil {
		return
	}
	if uint64(len(p)) > d.left {
		d.fail("needs %d more bytes, %d left", len(p), d.left)
		return
	}
	if _, err := io.ReadFull(d.r, p); err != nil {
		d.err = err
		return
	}
	d.left -= uint64(len(p))
}

func (d *decoder) u8() byte {
	d.read(d.tmp[:1])
	if d.err != nil {
		return 0
	}
	return d.tmp[0]
}

func (d *decoder) u64() uint64 {
	d.read(d.tmp[:8])
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(d.tmp[:8])
}

func (d *decoder) i64() int64      { return int64(d.u64()) }
func (d *decoder) time() time.Time { return time.Unix(0, d.i64()) }

func (d *decoder) uvarint() uint64 {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b := d.u8()
		if d.err != nil {
			return 0
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v
		}
	}
	d.fail("varint longer than 64 bits")
	return 0
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > d.left {
		d.fail("string of %d bytes, %d left", n, d.left)
		return ""
	}
	b := make([]byte, n)
	d.read(b)
	return string(b)
}

func (d *decoder) options() filter.Options {
	var o filter.Options
	d.read(d.tmp[:filter.OptionsBinarySize])
	n := filter.OptionsBinaryLen(d.tmp[:filter.OptionsBinarySize])
	d.read(d.tmp[filter.OptionsBinarySize:n])
	if d.err != nil {
		return o
	}
	if err := o.UnmarshalBinary(d.tmp[:n]); err != nil {
		d.fail("%v", err)
	}
	return o
}

// bitmap reads one bit per partition, and refuses bits past the last one.
func (d *decoder) bitmap(partitions int) []bool {
	raw := make([]byte, (partitions+7)/8)
	d.read(raw)
	if d.err != nil {
		return nil
	}
	out := make([]bool, partitions)
	for p := range out {
		out[p] = raw[p/8]&(1<<(p%8)) != 0
	}
	if extra := raw[len(raw)-1] >> (partitions % 8); partitions%8 != 0 && extra != 0 {
		d.fail("bitmap of %d partitions has bits past the last", partitions)
	}
	return out
}

func (d *decoder) tombstone() filter.Tombstone {
	return filter.Tombstone{Name: d.str(), Generation: d.i64(), DeletedAt: d.time()}
}

// expiry decodes a kindExpiry record after its kind byte and name: generation and override, which
// must be one a change could have made.
func (d *decoder) expiry() (generation int64, x filter.Expiry) {
	generation, x.Mode = d.i64(), filter.ExpiryMode(d.u8())
	if at := d.i64(); x.Mode == filter.ExpiryAt {
		x.At = time.Unix(0, at)
	}
	x.Stamp, x.Origin = d.i64(), d.str()
	if d.err == nil {
		if err := x.Validate(); err != nil {
			d.fail("%v", err)
		}
	}
	return generation, x
}

func (d *decoder) header() snapshotHeader {
	return snapshotHeader{Taken: d.time(), FirstSegment: d.u64()}
}

// filterHead decodes a filter record after its kind byte up to its bits, which follow as each
// layer's words (see words). The options are validated and every layer's shape is checked
// against them, and the record's length against the shapes, so a corrupt length cannot make
// anyone allocate more than the record holds.
func (d *decoder) filterHead() filter.State {
	st := filter.State{Name: d.str(), Options: d.options(), Created: d.time(), LastAccess: d.time()}
	if d.err != nil {
		return st
	}
	if err := st.Options.Validate(); err != nil {
		d.fail("filter %q: %v", st.Name, err)
		return st
	}
	st.Parts = make([]filter.PartState, st.Options.PartitionCount())
	var totalWords uint64
	for p := range st.Parts {
		part := filter.PartState{Items: d.u64(), NewestItems: d.u64()}
		layers := d.uvarint()
		if d.err != nil {
			return st
		}
		if layers > filter.MaxLayers {
			d.fail("filter %q partition %d has %d layers", st.Name, p, layers)
			return st
		}
		part.Layers = make([]filter.LayerState, layers)
		for i := range part.Layers {
			bits, hashes, words := d.u64(), d.u64(), d.u64()
			want, err := st.Options.LayerShape(i)
			if d.err == nil && (err != nil || uint64(want.Bits) != bits || uint64(want.Hashes) != hashes || want.SizeBytes() != words*8) {
				d.fail("filter %q partition %d layer %d: m=%d k=%d words=%d do not match its options", st.Name, p, i, bits, hashes, words)
			}
			part.Layers[i] = filter.LayerState{Bits: uint(bits), Hashes: uint(hashes)}
			totalWords += words
		}
		st.Parts[p] = part
	}
	if d.err == nil && totalWords*8 != d.left {
		d.fail("filter %q: %d bytes of bits declared, %d left in the record", st.Name, totalWords*8, d.left)
	}
	return st
}

// words reads a filter record's bits into layers, which have the sizes its head declared.
func (d *decoder) words(layers [][]uint64) {
	for _, words := range layers {
		d.read(wordBytes(words))
	}
}

// keys reads the keys of an add, which take the rest of the record: its bytes are read at once,
// the keys are counted in them, and each key is a string over them. Decoding takes the record's
// bytes and a string header for each key it holds, never one for each key it declares.
func (d *decoder) keys() []string {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	// Every key takes at least its one-byte length.
	if n > d.left {
		d.fail("%d keys in %d bytes", n, d.left)
		return nil
	}
	b := make([]byte, d.left)
	d.read(b)
	if d.err != nil {
		return nil
	}
	held, rest := uint64(0), b
	for ; held < n; held++ {
		l, w := binary.Uvarint(rest)
		if w <= 0 || l > uint64(len(rest)-w) {
			d.fail("key %d of the %d declared does not fit in the %d bytes left", held, n, len(rest))
			return nil
		}
		rest = rest[w+int(l):]
	}
	if len(rest) > 0 {
		d.fail("%d bytes after the last of %d keys", len(rest), n)
		return nil
	}
	keys := make([]string, n)
	for i := range keys {
		l, w := binary.Uvarint(b)
		// The keys share b, which nothing else refers to and nothing writes again.
		keys[i] = unsafe.String(unsafe.SliceData(b[w:]), int(l))
		b = b[w+int(l):]
	}
	return keys
}

// load decodes the rest of a kindLoad record: one piece, which takes every byte left.
func (d *decoder) load() filter.Load {
	if d.err != nil {
		return filter.Load{}
	}
	b := make([]byte, d.left)
	d.read(b)
	if d.err != nil {
		return filter.Load{}
	}
	l, n, err := filter.DecodeLoad(b)
	switch {
	case err != nil:
		d.fail("%v", err)
	case n != len(b):
		d.fail("%d bytes after the loaded piece", len(b)-n)
	}
	return l
}

// change decodes a log record of any kind but the snapshot's.
func (d *decoder) change() change {
	c := change{kind: d.u8()}
	if d.err != nil {
		return c
	}
	if c.kind == kindSegmentStart {
		c.segment, c.previousBytes = d.u64(), d.i64()
		return c
	}
	c.name = d.str()
	switch c.kind {
	case kindCreate:
		c.options, c.at = d.options(), d.time()
		if d.err == nil && d.left > 0 {
			c.held = d.bitmap(c.options.PartitionCount())
		}
	case kindDelete:
	case kindTombstone:
		c.generation, c.at = d.i64(), d.time()
	case kindAdd:
		c.keys = d.keys()
	case kindAccess:
		c.at = d.time()
	case kindExpiry:
		c.generation, c.expiry = d.expiry()
	case kindLoad:
		c.generation, c.load = d.i64(), d.load()
	default:
		d.fail("unknown log record kind %d", c.kind)
	}
	return c
}
