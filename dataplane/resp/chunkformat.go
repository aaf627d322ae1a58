package resp

import (
	"encoding/binary"
	"math"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// The header chunk of BF.SCANDUMP is RedisBloom's dump of a chain of bloom filters (SBChain), all
// fields little endian and packed:
//
//	size     uint64  keys added to the chain
//	nfilters uint32  layers
//	options  uint32  RedisBloom's bloom_init flags: 1 NOROUND, 4 FORCE64, 8 NO_SCALING
//	growth   uint32  the expansion factor
//	then nfilters times, for each layer from the oldest:
//	  bytes   uint64  the bit array's bytes, a multiple of 8
//	  bits    uint64  bytes·8: the modulus of the key's locations
//	  size    uint64  keys added to the layer
//	  error   float64 the layer's error rate
//	  bpe     float64 bits per entry, −ln(error)/ln(2)²
//	  hashes  uint32  ⌈ln(2)·bpe⌉
//	  entries uint64  keys the layer takes before the next is added
//	  n2      uint8   log2 of bits for the power-of-two filters of old versions, 0 otherwise
//
// The data chunks are the layers' bytes, in order, a chunk never spanning two layers. A chunk's
// iterator is one more than the position, in all layers' bytes together, of the byte after it:
// BF.SCANDUMP with iterator i answers the chunk starting at position i−1, and BF.LOADCHUNK with
// iterator i and n bytes puts them at position i−n−1. The header's iterator is 1.
//
// A filter of LayoutRedisBloom is dumped exactly as RedisBloom dumps its own, with options 5
// (FORCE64 | NOROUND), or 13 when it does not scale. A filter of LayoutBitsAndBlooms cannot be
// described in RedisBloom's terms (other hashes, partitions); its header has the same fields
// with the flag optionsBloomery in options, which RedisBloom refuses as a corrupt header, and
// after the layers, Bloomery's own: the filter's options (filter.Options.AppendBinary), then for
// each partition its layers (uint32), items and newest layer's items (uint64 each). Its layers
// are those of every partition in turn.

const (
	optNoRound   = 1
	optForce64   = 4
	optNoScaling = 8
	// optionsBloomery marks a header of Bloomery's own layout; RedisBloom knows no such bit.
	optionsBloomery = 1 << 16

	chainHeaderSize = 8 + 4 + 4 + 4
	chainLinkSize   = 8 + 8 + 8 + 8 + 8 + 4 + 8 + 1
	partTrailerSize = 4 + 8 + 8
)

// maxDumpChunk is the largest data chunk BF.SCANDUMP answers: RedisBloom's own size, unless the
// port's bulk strings are smaller, so that a dump taken here loads here.
const maxDumpChunk = 16 << 20

// errBadData is RedisBloom's answer to a header it cannot load.
const errBadData = replyError("ERR received bad data")

// chainLink is one layer's entry of the header.
type chainLink struct {
	bytes, bits, size uint64
	errorRate, bpe    float64
	hashes            uint32
	entries           uint64
	n2                uint8
}

// encodeHeader is the header chunk of a filter whose state st describes (its Words unused).
func encodeHeader(st filter.State) []byte {
	o := st.Options
	layers := st.AllLayers()
	b := binary.LittleEndian.AppendUint64(nil, st.Items())
	b = binary.LittleEndian.AppendUint32(b, uint32(len(layers)))
	options := uint32(optForce64 | optNoRound)
	if o.Layout != filter.LayoutRedisBloom {
		options = optionsBloomery
	}
	if !o.Scalable {
		options |= optNoScaling
	}
	b = binary.LittleEndian.AppendUint32(b, options)
	b = binary.LittleEndian.AppendUint32(b, uint32(max(o.Growth, 1)))
	for _, part := range st.Parts {
		for i, l := range part.Layers {
			shape, _ := o.LayerShape(i) // the layer exists: its shape was computed before
			size := shape.Capacity      // every layer but the newest took its capacity
			if i == len(part.Layers)-1 {
				size = part.NewestItems
			}
			e := o.RedisBloomLayerError(i)
			b = appendLink(b, chainLink{
				bytes: uint64(l.WordCount()) * 8, bits: uint64(l.Bits), size: size,
				errorRate: e, bpe: filter.RedisBloomBitsPerEntry(e), hashes: uint32(l.Hashes), entries: shape.Capacity,
			})
		}
	}
	if o.Layout == filter.LayoutRedisBloom {
		return b
	}
	// A dump carries a filter's values, not who made it: the filter it is loaded into is another's.
	o.Owner = filter.OwnerID{}
	b, _ = o.AppendBinary(b)
	for _, part := range st.Parts {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(part.Layers)))
		b = binary.LittleEndian.AppendUint64(b, part.Items)
		b = binary.LittleEndian.AppendUint64(b, part.NewestItems)
	}
	return b
}

func appendLink(b []byte, l chainLink) []byte {
	b = binary.LittleEndian.AppendUint64(b, l.bytes)
	b = binary.LittleEndian.AppendUint64(b, l.bits)
	b = binary.LittleEndian.AppendUint64(b, l.size)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.errorRate))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.bpe))
	b = binary.LittleEndian.AppendUint32(b, l.hashes)
	b = binary.LittleEndian.AppendUint64(b, l.entries)
	return append(b, l.n2)
}

func readLink(b []byte) chainLink {
	u64 := func(at int) uint64 { return binary.LittleEndian.Uint64(b[at:]) }
	return chainLink{
		bytes: u64(0), bits: u64(8), size: u64(16),
		errorRate: math.Float64frombits(u64(24)), bpe: math.Float64frombits(u64(32)),
		hashes: binary.LittleEndian.Uint32(b[40:]), entries: u64(44), n2: b[52],
	}
}

// decodeHeader reads a header chunk into the state of the filter it describes, named name, with
// every layer's Words nil. It refuses a header whose layers are not exactly those the options it
// implies define, so that a loaded filter hashes as the one dumped. Errors are replies: RedisBloom's
// text for a header that does not parse, a text of its own for one Bloomery cannot take.
func decodeHeader(name string, b []byte) (filter.State, error) {
	if len(b) < chainHeaderSize {
		return filter.State{}, errBadData
	}
	size := binary.LittleEndian.Uint64(b)
	nfilters := binary.LittleEndian.Uint32(b[8:])
	options := binary.LittleEndian.Uint32(b[12:])
	growth := binary.LittleEndian.Uint32(b[16:])
	if nfilters == 0 || nfilters > filter.MaxLayers*filter.MaxPartitions {
		return filter.State{}, errBadData
	}
	linksEnd := chainHeaderSize + int(nfilters)*chainLinkSize
	if len(b) < linksEnd {
		return filter.State{}, errBadData
	}
	links := make([]chainLink, nfilters)
	for i := range links {
		links[i] = readLink(b[chainHeaderSize+i*chainLinkSize:])
	}
	var st filter.State
	var err error
	if options&optionsBloomery != 0 {
		st, err = decodeBloomeryHeader(options, links, b[linksEnd:])
	} else {
		if len(b) != linksEnd {
			return filter.State{}, errBadData
		}
		st, err = decodeRedisBloomHeader(size, options, growth, links)
	}
	if err != nil {
		return filter.State{}, err
	}
	st.Name = name
	if st.Items() != size {
		return filter.State{}, errBadData
	}
	return st, nil
}

// decodeRedisBloomHeader reads the header of a filter RedisBloom made.
func decodeRedisBloomHeader(size uint64, options, growth uint32, links []chainLink) (filter.State, error) {
	if options&^(optNoRound|optForce64|optNoScaling) != 0 {
		return filter.State{}, errBadData
	}
	if options&(optNoRound|optForce64) != optNoRound|optForce64 {
		// Filters of RedisBloom 1.x: 32-bit hashes, or sizes rounded to a power of two.
		return filter.State{}, errorf("the dump's filter has RedisBloom options %d; Bloomery loads filters of options 5 and 13 (64-bit hashes, sizes not rounded), those every RedisBloom 2.x makes", options)
	}
	first := links[0]
	o := filter.Options{
		Capacity: first.entries, FPP: first.errorRate, Scalable: options&optNoScaling == 0,
		Growth: uint(growth), Tightening: filter.DefaultTightening, Layout: filter.LayoutRedisBloom, Partitions: 1,
	}
	if o.Scalable {
		o.FPP *= 2 // the first layer's error is the filter's halved
	}
	if err := o.Validate(); err != nil {
		return filter.State{}, errorf("the dump's filter cannot be loaded: %v", err)
	}
	if !o.Scalable && len(links) > 1 {
		return filter.State{}, errBadData
	}
	part := filter.PartState{Items: size}
	var sum uint64
	for i, l := range links {
		if err := checkLink(o, i, l, true); err != nil {
			return filter.State{}, err
		}
		// RedisBloom adds a layer when the newest holds its entries: every other one holds exactly
		// that many, which is all Bloomery keeps of them.
		if l.size > l.entries || i < len(links)-1 && l.size != l.entries || l.size > math.MaxUint64-sum {
			return filter.State{}, errBadData
		}
		sum += l.size
		part.Layers = append(part.Layers, filter.LayerState{Bits: uint(l.bits), Hashes: uint(l.hashes)})
	}
	if sum != size {
		return filter.State{}, errBadData
	}
	part.NewestItems = links[len(links)-1].size
	return filter.State{Options: o, Parts: []filter.PartState{part}}, nil
}

// checkLink checks that layer i of a header has the shape o defines; exact compares the error
// rates too (RedisBloom's header carries them, Bloomery's are not used).
func checkLink(o filter.Options, i int, l chainLink, exact bool) error {
	want, err := o.LayerShape(i)
	if err != nil {
		return errorf("the dump's layer %d cannot be loaded: %v", i, err)
	}
	e := o.RedisBloomLayerError(i)
	if l.bits != uint64(want.Bits) || l.bytes != want.SizeBytes() || uint(l.hashes) != want.Hashes || l.entries != want.Capacity || l.n2 != 0 ||
		exact && (l.errorRate != e || !closeTo(l.bpe, filter.RedisBloomBitsPerEntry(e))) {
		return errorf("the dump's layer %d (%d bits, %d hashes, %d entries, error %g) is not the one its filter's options define (%d bits, %d hashes, %d entries, error %g)",
			i, l.bits, l.hashes, l.entries, l.errorRate, want.Bits, want.Hashes, want.Capacity, e)
	}
	return nil
}

// closeTo compares bits per entry within a few units in the last place: ln is not correctly
// rounded everywhere, and the value only ever served to compute the shape checked exactly.
func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

// decodeBloomeryHeader reads the header of a filter of LayoutBitsAndBlooms dumped by Bloomery:
// its layers are checked against the options that follow them.
func decodeBloomeryHeader(options uint32, links []chainLink, rest []byte) (filter.State, error) {
	if len(rest) < filter.OptionsBinarySize {
		return filter.State{}, errBadData
	}
	n := filter.OptionsBinaryLen(rest[:filter.OptionsBinarySize])
	var o filter.Options
	if len(rest) < n || o.UnmarshalBinary(rest[:n]) != nil {
		return filter.State{}, errBadData
	}
	if err := o.Validate(); err != nil {
		return filter.State{}, errorf("the dump's filter cannot be loaded: %v", err)
	}
	rest = rest[n:]
	parts := o.PartitionCount()
	if o.Layout != filter.LayoutBitsAndBlooms || len(rest) != parts*partTrailerSize || options != optionsBloomery|noScaling(o) {
		return filter.State{}, errBadData
	}
	st := filter.State{Options: o, Parts: make([]filter.PartState, parts)}
	at := 0
	for p := range st.Parts {
		t := rest[p*partTrailerSize:]
		layers := int(binary.LittleEndian.Uint32(t))
		if layers > len(links)-at || layers > filter.MaxLayers {
			return filter.State{}, errBadData
		}
		part := filter.PartState{Items: binary.LittleEndian.Uint64(t[4:]), NewestItems: binary.LittleEndian.Uint64(t[12:])}
		for i := range layers {
			if err := checkLink(o, i, links[at], false); err != nil {
				return filter.State{}, err
			}
			part.Layers = append(part.Layers, filter.LayerState{Bits: uint(links[at].bits), Hashes: uint(links[at].hashes)})
			at++
		}
		st.Parts[p] = part
	}
	if at != len(links) {
		return filter.State{}, errBadData
	}
	return st, nil
}

func noScaling(o filter.Options) uint32 {
	if o.Scalable {
		return 0
	}
	return optNoScaling
}
