package filter

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
)

// Large bit arrays live outside the Go heap. They are most of the process's memory and live as
// long as their filter; in the heap they would set the garbage collector's goal (by default
// twice the live heap), so that the garbage of requests could grow as large as all the filters
// before a collection, and the runtime would keep it. Outside, the heap is small and collected
// often, and the process's RSS stays close to the bit arrays themselves.

// offHeapMinBytes is the smallest bit array kept outside the heap: below it, a page of its own
// per layer would cost more than the heap's share of garbage.
const offHeapMinBytes = 64 << 10

// offHeapBytes counts the bytes of bit arrays mapped outside the heap and not yet unmapped.
var offHeapBytes atomic.Int64

// newLayer makes a layer of the given shape holding a copy of words (nil: all zero). It fails
// when the system refuses the memory of a large one.
func newLayer(shape LayerShape, words []uint64) (*bloom.BloomFilter, error) {
	own, release, err := ownWords(int(shape.SizeBytes() / 8))
	if err != nil {
		return nil, err
	}
	copy(own, words)
	layer := bloom.FromWithM(own, shape.Bits, shape.Hashes)
	if release != nil {
		// The words go back to the system once nothing can reach the layer: a reader that looked
		// the filter up before it was deleted may still be probing it.
		runtime.AddCleanup(layer, func(release func()) { release() }, release)
	}
	return layer, nil
}

// TransientWords returns n zeroed words for a passing copy of bits, such as a dump being written
// or read, and release, which gives them back at once. Large ones live outside the heap: as heap
// garbage, several copies of a large filter could pile up before the collector's goal (twice the
// live heap) is reached.
func TransientWords(n int) (words []uint64, release func(), err error) {
	words, release, err = ownWords(n)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	if release == nil {
		release = func() {}
	}
	return words, release, nil
}

// ownWords returns n zeroed words: in the heap below offHeapMinBytes (release nil), else mapped
// outside it and counted in offHeapBytes until release unmaps them.
func ownWords(n int) (words []uint64, release func(), err error) {
	if uint64(n)*8 < offHeapMinBytes {
		return make([]uint64, n), nil, nil
	}
	words, unmap, err := allocWords(n)
	if err != nil {
		return nil, nil, err
	}
	offHeapBytes.Add(int64(n) * 8)
	return words, func() {
		unmap()
		offHeapBytes.Add(-int64(n) * 8)
	}, nil
}
