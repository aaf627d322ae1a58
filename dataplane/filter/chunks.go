package filter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
)

// A filter's bits can be read and ORed a byte range of one layer at a time, for dumps that are
// taken and loaded in chunks (RedisBloom's BF.SCANDUMP and BF.LOADCHUNK): a layer's bytes are
// its words' little-endian bytes, bit x being bit x%8 of byte x/8, which is RedisBloom's layout
// too. Layers are numbered across the partitions in AllLayers' order.

// ErrNoSuchLayer refuses a chunk whose layer the filter does not have (or this pod does not hold).
var ErrNoSuchLayer = errors.New("no such layer")

// layerAt is the partition holding layer i in AllLayers' order, and its index there; nil when
// the filter has no such layer or this pod does not hold every partition.
func (f *Filter) layerAt(i int) (*partition, int) {
	if i < 0 {
		return nil, 0
	}
	for _, p := range f.partList() {
		if p == nil {
			return nil, 0
		}
		p.mu.RLock()
		n := len(p.layers)
		p.mu.RUnlock()
		if i < n {
			return p, i
		}
		i -= n
	}
	return nil, 0
}

// ReadLayerBytes copies bytes of layer i from offset into dst, under its partition's read lock,
// and answers how many: fewer than len(dst) at the layer's end, 0 past it. ErrNoSuchLayer when
// there is no layer i.
func (f *Filter) ReadLayerBytes(i int, offset uint64, dst []byte) (int, error) {
	p, j := f.layerAt(i)
	if p == nil {
		return 0, fmt.Errorf("%w: filter %q has no layer %d here", ErrNoSuchLayer, f.name, i)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	b := wordBytes(p.layers[j].BitSet().Words())
	if offset >= uint64(len(b)) {
		return 0, nil
	}
	return copy(dst, b[offset:]), nil
}

// OrLayerBytes ORs src into layer i's bytes from offset, under its partition's write lock, and
// answers how many bits it set. The layer must hold all of src; bits past the layer's m are
// refused, as a merge refuses them.
func (f *Filter) OrLayerBytes(i int, offset uint64, src []byte) (uint64, error) {
	p, j := f.layerAt(i)
	if p == nil {
		return 0, fmt.Errorf("%w: filter %q has no layer %d here", ErrNoSuchLayer, f.name, i)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	layer := p.layers[j]
	words := layer.BitSet().Words()
	b := wordBytes(words)
	if offset > uint64(len(b)) || uint64(len(src)) > uint64(len(b))-offset {
		return 0, fmt.Errorf("%w: %d bytes at %d do not fit layer %d of %q, of %d bytes", ErrInvalidOptions, len(src), offset, i, f.name, len(b))
	}
	if m := uint64(layer.Cap()); m%64 != 0 {
		// Bits past m, in the last word, are set by no key and tested by none: a merge refuses them.
		valid := uint64(1)<<(m%64) - 1
		lastWord := uint64(len(words)-1) * 8
		for at := max(offset, lastWord); at < offset+uint64(len(src)); at++ {
			if src[at-offset]&^byte(valid>>(8*(at-lastWord))) != 0 {
				return 0, fmt.Errorf("%w: the chunk sets bits past layer %d's m=%d", ErrInvalidOptions, i, m)
			}
		}
	}
	var added uint64
	if offset%8 == 0 && len(src)%8 == 0 {
		// Whole words, the case of every chunk of a layer's bytes taken from its start.
		dst := words[offset/8:][:len(src)/8]
		for k := range dst {
			v := binary.LittleEndian.Uint64(src[8*k:])
			added += uint64(bits.OnesCount64(v &^ dst[k]))
			dst[k] |= v
		}
	} else {
		for k, v := range src {
			at := offset + uint64(k)
			added += uint64(bits.OnesCount8(v &^ b[at]))
			b[at] |= v
		}
	}
	p.ones[j] += added
	return added, nil
}

// wordBytes views words as their little-endian bytes without copying: every platform the data
// plane is built for is little endian, as the persistence's files also assume.
func wordBytes(words []uint64) []byte {
	if len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}
