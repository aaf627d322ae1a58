package filter

import (
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
)

const (
	// stackHashes is the room for locations on the stack of single-key operations; a filter
	// with more hashes (fpp below about 1e-9) takes one allocation per key.
	stackHashes = 24
	// batchChunk keys are located and loaded before any of them is tested. Their words (up to
	// batchChunk × hashes cache lines, 20 KiB for k = 10) stay in L1/L2 until the test.
	batchChunk = 32
)

// scratch holds one chunk of keys' locations: raw[j*stride+i] is the i-th location of key j (the
// same for every layer, see Filter.maxHashes) and idx[j*stride+i] its bit in the newest layer,
// already reduced modulo that layer's size. Older layers reduce lazily in containsAt, since a key
// absent from them usually fails at its first bit or two and the modulo costs a division. Batches
// take a scratch from scratchPool, so they do not allocate per key or per batch.
type scratch struct {
	raw, idx []uint64
	stride   int // locations per key: the largest k of all layers
	// sink keeps the loads of locate's second pass from being optimised away.
	sink uint64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// warmOlder is how many bits of each key locate loads in the layers before the newest.
const warmOlder = 2

// locate computes the locations of keys, then loads the words they fall in, so that the cache
// misses of the whole chunk are in flight at once rather than one key's after another's. Loading
// rather than testing leaves no branch on memory for the CPU to wait on. It loads every word of
// the newest layer when all are needed (check-and-set), and only the first warmOlder otherwise;
// warmCandidates then loads the rest for the keys that may be present.
func (s *scratch) locate(layout Layout, layers []*bloom.BloomFilter, stride uint, keys []string, all bool) {
	s.stride = int(stride)
	need := len(keys) * int(stride)
	if cap(s.raw) < need {
		s.raw, s.idx = make([]uint64, need), make([]uint64, need)
	}
	s.raw, s.idx = s.raw[:need], s.idx[:need]
	newest := layers[len(layers)-1]
	m, k := uint64(newest.Cap()), newest.K()
	for j, key := range keys {
		raw, idx := s.raw[j*int(stride):][:stride], s.idx[j*int(stride):][:stride]
		layout.fillLocations(raw, key)
		for i := range k {
			idx[i] = raw[i] % m
		}
	}
	var sink uint64
	for _, layer := range layers[:len(layers)-1] {
		words, m := layer.BitSet().Words(), uint64(layer.Cap())
		w := min(warmOlder, int(layer.K()))
		for j := range keys {
			for _, loc := range s.raw[j*int(stride):][:w] {
				sink ^= words[(loc%m)>>6]
			}
		}
	}
	words, warm := newest.BitSet().Words(), k
	if !all {
		warm = min(warmOlder, k)
	}
	for j := range keys {
		for _, bit := range s.idx[j*int(stride):][:warm] {
			sink ^= words[bit>>6]
		}
	}
	s.sink ^= sink
}

// warmCandidates loads the rest of the newest layer's words for the first n keys located whose
// first warmOlder bits there are set: the only keys that may be present in it. A check of an
// absent key mostly fails at its first bit or two, so a chunk of checks loads a few words per key
// where it would load k, and the candidates' words are still all in flight at once. The bits
// tested here are in words locate loaded.
func (s *scratch) warmCandidates(layers []*bloom.BloomFilter, n int) {
	newest := layers[len(layers)-1]
	words, k := newest.BitSet().Words(), newest.K()
	first := min(warmOlder, k)
	var sink uint64
	for j := range n {
		idx := s.idx[j*s.stride:][:k]
		candidate := true
		for _, bit := range idx[:first] {
			candidate = candidate && words[bit>>6]&(1<<(bit&63)) != 0
		}
		if candidate {
			for _, bit := range idx[first:] {
				sink ^= words[bit>>6]
			}
		}
	}
	s.sink ^= sink
}

// containsAt reports whether any layer holds key j of the chunk. layers must be those located.
func (s *scratch) containsAt(layers []*bloom.BloomFilter, j int) bool {
	last := len(layers) - 1
	for _, layer := range layers[:last] {
		words, m := layer.BitSet().Words(), uint64(layer.Cap())
		present := true
		for _, loc := range s.raw[j*s.stride:][:layer.K()] {
			if bit := loc % m; words[bit>>6]&(1<<(bit&63)) == 0 {
				present = false
				break
			}
		}
		if present {
			return true
		}
	}
	words := layers[last].BitSet().Words()
	for _, bit := range s.idx[j*s.stride:][:layers[last].K()] {
		if words[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// setAt sets key j's bits in the newest layer, which must be the newest located, and answers how
// many were not set before.
func (s *scratch) setAt(layers []*bloom.BloomFilter, j int) uint64 {
	newest := layers[len(layers)-1]
	words := newest.BitSet().Words()
	var added uint64
	for _, bit := range s.idx[j*s.stride:][:newest.K()] {
		added += setBit(words, bit)
	}
	return added
}
