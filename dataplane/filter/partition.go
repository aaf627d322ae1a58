package filter

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
)

// partition is one partition of a filter: a scalable filter of its own, with its own lock, that
// takes the keys PartitionOf gives it. The per-filter memory limit bounds each partition.
type partition struct {
	f     *Filter
	index int

	// items approximates the number of distinct keys added: a key counts when no layer held it.
	items atomic.Uint64

	// checked and set count the keys that requests tested and wrote, for metrics. They are added
	// to while mu is held and sit next to it, likely on the cache line that taking mu has just
	// written, so the count costs no extra cache miss; nothing is shared with other partitions.
	mu      sync.RWMutex
	checked atomic.Uint64
	set     atomic.Uint64
	layers  []*bloom.BloomFilter
	// ones counts the bits set in each layer, kept as bits are set (with mu held for writing),
	// so that describing the filter reads a number per layer rather than every bit: a count of
	// gigabytes took seconds of CPU and, whole or in chunks, kept writers waiting.
	ones []uint64
	// newestItems counts the keys added to the newest layer, to know when it reaches
	// newestCapacity and a new layer is due.
	newestItems    uint64
	newestCapacity uint64
	// maxHashes is the largest k of all layers: one Locations call serves every layer, because
	// the i-th location of a key does not depend on the layer.
	maxHashes uint
	// loaded is what the last piece of a load left known of its layer, under mu (orBytes).
	loaded loadedTail
	// released is set, under mu, when the pod gave the partition up (Filter.Release): it no
	// longer grows.
	released bool
}

// addLayer reserves a layer's memory in the store's budget, allocates it holding a copy of words
// (nil: all zero) and appends it. A refused reservation or allocation leaves the partition and
// the budget as they were. The caller holds mu for writing, or is the only one who can reach p.
func (p *partition) addLayer(shape LayerShape, words []uint64) error {
	layer, err := p.newLayer(shape, words, p.bitsBytes())
	if err != nil {
		return err
	}
	p.appendLayer(shape, layer, countOnes(words))
	return nil
}

// newLayer reserves a layer's memory, the partition holding held bytes of bits, and allocates it
// holding a copy of words; a refusal leaves the budget as it was.
func (p *partition) newLayer(shape LayerShape, words []uint64, held uint64) (*bloom.BloomFilter, error) {
	f := p.f
	what := fmt.Sprintf("filter %q", f.name)
	if f.opts.PartitionCount() > 1 {
		what = fmt.Sprintf("partition %d of filter %q", p.index, f.name)
	}
	if err := f.store.memory.reserve(what, shape.SizeBytes(), held, 0); err != nil {
		return nil, err
	}
	layer, err := newLayer(shape, words)
	if err != nil {
		f.store.memory.release(shape.SizeBytes())
		return nil, fmt.Errorf("%w: filter %q: %w", ErrOutOfMemory, f.name, err)
	}
	return layer, nil
}

// appendLayer appends a layer that newLayer made, with ones of its bits set. The caller holds mu
// for writing.
func (p *partition) appendLayer(shape LayerShape, layer *bloom.BloomFilter, ones uint64) {
	p.layers = append(p.layers, layer)
	p.ones = append(p.ones, ones)
	p.newestItems, p.newestCapacity = 0, shape.Capacity
	p.maxHashes = max(p.maxHashes, shape.Hashes)
	p.f.sizeBytes.Add(shape.SizeBytes())
}

// bitsBytes is what the partition's bit arrays take. The caller holds mu.
func (p *partition) bitsBytes() uint64 {
	var n uint64
	for _, layer := range p.layers {
		n += uint64((layer.Cap()+63)/64) * 8
	}
	return n
}

func (p *partition) check(key string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	p.checked.Add(1)
	var buf [stackHashes]uint64
	return p.contains(p.locations(buf[:0], key))
}

// checkMany answers check for every key into out under one read lock. Keys are taken a chunk at
// a time: the chunk's locations are computed and the first words of each loaded, then the other
// words of the keys that may be present, so that the cache misses of many keys overlap, then each
// key is tested.
func (p *partition) checkMany(keys []string, out []bool) {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	p.mu.RLock()
	defer p.mu.RUnlock()
	p.checked.Add(uint64(len(keys)))
	for start := 0; start < len(keys); start += batchChunk {
		chunk := keys[start:min(start+batchChunk, len(keys))]
		s.locate(p.f.opts.Layout, p.layers, p.maxHashes, chunk, false)
		s.warmCandidates(p.layers, len(chunk))
		for j := range chunk {
			out[start+j] = s.containsAt(p.layers, j)
		}
	}
}

// checkAndSetOne and checkAndSetMany take the write lock around the locked forms; the lock is
// released by defer, so that nothing, not even a panic, leaves the partition locked. counted
// says whether the keys count as set by a request (a replay's do not).
func (p *partition) checkAndSetOne(key string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set.Add(1)
	return p.checkAndSetLocked(key)
}

func (p *partition) checkAndSetMany(keys []string, out []bool, counted bool) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if counted {
		p.set.Add(uint64(len(keys)))
	}
	return p.checkAndSetManyLocked(keys, out)
}

// checkAndSetManyLocked answers checkAndSet for keys into out and returns how many it answered:
// all of them, or those before the key whose insertion failed. It works a chunk at a time like
// checkMany: locations and loads of the whole chunk first, then, key by key and in order, the
// test and the insert, which find their words in the cache. Keys are handled strictly one after
// the other in the second pass, so a key repeated later in the chunk sees the bits the first one
// set. When the partition grows a layer mid-chunk the rest of the chunk is located again, with
// the new layer. The caller holds mu for writing.
func (p *partition) checkAndSetManyLocked(keys []string, out []bool) (int, error) {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	for start := 0; start < len(keys); {
		chunk := keys[start:min(start+batchChunk, len(keys))]
		s.locate(p.f.opts.Layout, p.layers, p.maxHashes, chunk, true)
		layers := len(p.layers)
		next := start + len(chunk)
		for j, key := range chunk {
			if s.containsAt(p.layers, j) {
				out[start+j] = true
				continue
			}
			if err := p.growIfFullLocked(); err != nil {
				return start + j, err
			}
			if len(p.layers) != layers { // a new layer: this key goes there, the rest is located again
				var buf [stackHashes]uint64
				p.setLocked(p.locations(buf[:0], key))
				next = start + j + 1
				break
			}
			p.ones[len(p.ones)-1] += s.setAt(p.layers, j)
			p.countAdded()
		}
		start = next
	}
	return len(keys), nil
}

func (p *partition) checkAndSetLocked(key string) (bool, error) {
	var buf [stackHashes]uint64
	locs := p.locations(buf[:0], key)
	if p.contains(locs) {
		return true, nil
	}
	if err := p.growIfFullLocked(); err != nil {
		return false, err
	}
	if newest := p.layers[len(p.layers)-1]; newest.K() > uint(len(locs)) { // the new layer hashes more than the old ones did
		locs = p.locations(locs[:0], key)
	}
	p.setLocked(locs)
	return false, nil
}

// setLocked sets a new key's bits in the newest layer and counts it. The caller holds mu for
// writing and has checked that no layer holds the key.
func (p *partition) setLocked(locs []uint64) {
	newest := p.layers[len(p.layers)-1]
	words, m := newest.BitSet().Words(), uint64(newest.Cap())
	for _, loc := range locs[:newest.K()] {
		p.ones[len(p.ones)-1] += setBit(words, loc%m)
	}
	p.countAdded()
}

// countAdded counts a key just set in the newest layer. The caller holds mu for writing.
func (p *partition) countAdded() {
	p.newestItems++
	p.items.Add(1)
}

func (p *partition) growIfFullLocked() error {
	f := p.f
	if !f.opts.Scalable || f.dropped || p.released || p.newestItems < p.newestCapacity {
		return nil
	}
	if len(p.layers) >= MaxLayers {
		return fmt.Errorf("%w: filter %q already has %d layers", ErrTooLarge, f.name, MaxLayers)
	}
	next, err := f.opts.LayerShape(len(p.layers))
	if err != nil {
		return err
	}
	if err := checkHashes(len(p.layers), next); err != nil {
		return fmt.Errorf("%w: filter %q: %w", ErrTooLarge, f.name, err)
	}
	return p.addLayer(next, nil)
}

// locations appends key's locations for every layer to dst, as the filter's layout computes
// them, without allocating when dst has room. The caller holds mu, so maxHashes is stable.
func (p *partition) locations(dst []uint64, key string) []uint64 {
	return p.f.opts.Layout.appendLocations(dst, key, p.maxHashes)
}

func (p *partition) contains(locs []uint64) bool {
	for _, layer := range p.layers {
		if layer.TestLocations(locs[:layer.K()]) {
			return true
		}
	}
	return false
}

// bitCount is what Info counts of one partition.
type bitCount struct {
	layers    int
	hashes    uint // of the newest layer
	bits, set uint64
	fpp       float64
}

// count reads the kept counts of bits set, under the read lock: O(layers), whatever their size.
func (p *partition) count() bitCount {
	p.mu.RLock()
	defer p.mu.RUnlock()
	c := bitCount{layers: len(p.layers), hashes: p.layers[len(p.layers)-1].K()}
	// A key is a false positive unless every layer rejects it; sum logarithms so that rates
	// as small as 1e-20 survive the arithmetic.
	logNoFalsePositive := 0.0
	for i, layer := range p.layers {
		// At most m: bits past it (which merges refuse and a restore clears) must not push the
		// ratio past 1, where the logarithm below is NaN.
		m := uint64(layer.Cap())
		ones := min(p.ones[i], m)
		c.bits += m
		c.set += ones
		logNoFalsePositive += math.Log1p(-math.Pow(float64(ones)/float64(m), float64(layer.K())))
	}
	c.fpp = 0 - math.Expm1(logNoFalsePositive) // 0 - x, not -x: no "-0" for an empty filter
	return c
}

// setBit sets bit i of words and answers 1 if it was not set, 0 if it was.
func setBit(words []uint64, i uint64) uint64 {
	w := words[i>>6]
	words[i>>6] = w | 1<<(i&63)
	return w>>(i&63)&1 ^ 1
}

// countOnes counts the bits set in words.
func countOnes(words []uint64) uint64 {
	var n uint64
	for _, w := range words {
		n += uint64(bits.OnesCount64(w))
	}
	return n
}

// estimates is what Usage estimates of one partition: its bits, the bits expected to be set and
// the false positive probability they give.
type estimates struct {
	layers    int
	bits, set float64
	fpp       float64
}

// estimate computes estimates, as count computes them from the counted bits, from the keys each
// layer took. Every layer but the newest took exactly its capacity (a layer is added when the
// newest is full); the newest took newestItems.
func (p *partition) estimate() estimates {
	p.mu.RLock()
	defer p.mu.RUnlock()
	e := estimates{layers: len(p.layers)}
	logNoFalsePositive := 0.0
	for i, layer := range p.layers {
		m, k := float64(layer.Cap()), layer.K()
		n := float64(p.newestItems)
		if i < len(p.layers)-1 {
			shape, err := p.f.opts.LayerShape(i)
			if err != nil { // unreachable: the layer exists, so its shape was computed before
				continue
			}
			n = float64(shape.Capacity)
		}
		fill := fillAfter(n, m, k)
		e.bits += m
		e.set += m * fill
		logNoFalsePositive += math.Log1p(-math.Pow(fill, float64(k)))
	}
	e.fpp = -math.Expm1(logNoFalsePositive)
	return e
}
