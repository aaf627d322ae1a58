// Package filter is the engine of the data plane: named scalable bloom filters with expiry,
// memory accounting and the locking that lets many requests use one filter at once. It knows
// nothing of HTTP or disk.
package filter

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// Filter is one named bloom filter: a list of layers, of which only the newest takes new keys.
// bits-and-blooms filters are not safe for concurrent writers, so every Filter owns an RWMutex:
// checks share it, writes take it exclusively, and batches take it once per batch.
type Filter struct {
	name    string
	opts    Options
	created time.Time
	store   *Store

	// lastAccess is unix nanoseconds of the last check or set; read only for sliding expiry.
	lastAccess atomic.Int64
	// journaledAccess is the last access told to the journal, which hears of accesses at most
	// once a second per filter.
	journaledAccess atomic.Int64
	// override, when set, decides expiry in place of the options (see expiry.go); an atomic, so
	// that the request path reads it without a lock. expiryMu orders the changes of it.
	override atomic.Pointer[Expiry]
	expiryMu sync.Mutex
	// items approximates the number of distinct keys added: a key counts when no layer held it.
	items atomic.Uint64
	// sizeBytes is what the budget holds for the filter: its bit arrays and, once it has a layer,
	// FilterOverhead. Dropping the filter releases it whole.
	sizeBytes atomic.Uint64

	// checked and set count the keys that requests tested and wrote, for metrics. They are added
	// to while mu is held and sit next to it, likely on the cache line that taking mu has just
	// written, so the count costs no extra cache miss; nothing is shared with other filters.
	mu      sync.RWMutex
	checked atomic.Uint64
	set     atomic.Uint64
	layers  []*bloom.BloomFilter
	// newestItems counts the keys added to the newest layer, to know when it reaches
	// newestCapacity and a new layer is due.
	newestItems    uint64
	newestCapacity uint64
	// maxHashes is the largest k of all layers: one Locations call serves every layer, because
	// the i-th location of a key does not depend on the layer.
	maxHashes uint
	// dropped is set when the filter left its store; it then no longer grows, so the memory it
	// gave back cannot be taken again behind the store's back.
	dropped bool
}

func newFilter(s *Store, name string, opts Options, created time.Time) (*Filter, error) {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return nil, err
	}
	f := &Filter{name: name, opts: opts, created: created, store: s}
	f.lastAccess.Store(max(f.created.UnixNano(), s.clock().UnixNano()))
	f.journaledAccess.Store(f.created.UnixNano())
	if err := f.addLayer(shape, nil); err != nil {
		return nil, err
	}
	return f, nil
}

// addLayer reserves a layer's memory in the store's budget, allocates it holding a copy of words
// (nil: all zero) and appends it. A refused reservation or allocation leaves the filter and the
// budget as they were. The caller holds mu for writing, or is the only one who can reach f.
func (f *Filter) addLayer(shape LayerShape, words []uint64) error {
	// The first layer brings the filter's overhead into the budget.
	var extra uint64
	if len(f.layers) == 0 {
		extra = FilterOverhead
	}
	if err := f.store.memory.reserve(f.name, shape.SizeBytes(), f.bitsBytes(), extra); err != nil {
		return err
	}
	layer, err := newLayer(shape, words)
	if err != nil {
		f.store.memory.release(shape.SizeBytes() + extra)
		return fmt.Errorf("%w: filter %q: %w", ErrOutOfMemory, f.name, err)
	}
	f.appendLayer(shape, layer, extra)
	return nil
}

func (f *Filter) appendLayer(shape LayerShape, layer *bloom.BloomFilter, extra uint64) {
	f.layers = append(f.layers, layer)
	f.newestItems, f.newestCapacity = 0, shape.Capacity
	f.maxHashes = max(f.maxHashes, shape.Hashes)
	f.sizeBytes.Add(shape.SizeBytes() + extra)
}

// bitsBytes is what the filter's bit arrays take: sizeBytes less the overhead it was charged
// with its first layer.
func (f *Filter) bitsBytes() uint64 {
	if n := f.sizeBytes.Load(); n >= FilterOverhead {
		return n - FilterOverhead
	}
	return 0
}

// Name is the filter's name in its store.
func (f *Filter) Name() string { return f.name }

// Options are the options the filter was created with.
func (f *Filter) Options() Options { return f.opts }

// Created is when the filter was created.
func (f *Filter) Created() time.Time { return f.created }

// Generation names this incarnation of the filter's name: its creation time in nanoseconds, which
// replicas share (a replicated create carries it) and which a later incarnation always exceeds.
func (f *Filter) Generation() int64 { return f.created.UnixNano() }

// Check reports whether key may have been added.
func (f *Filter) Check(key string) bool {
	f.touch()
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.checked.Add(1)
	var buf [stackHashes]uint64
	return f.contains(f.locations(buf[:0], key))
}

// CheckMany answers Check for every key, in order, under one read lock. Keys are taken a chunk at
// a time: the chunk's locations are computed and their words loaded first, so that the cache
// misses of many keys overlap, then each key is tested.
func (f *Filter) CheckMany(keys []string) []bool {
	f.touch()
	out := make([]bool, len(keys))
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.checked.Add(uint64(len(keys)))
	for start := 0; start < len(keys); start += batchChunk {
		chunk := keys[start:min(start+batchChunk, len(keys))]
		s.locate(f.layers, f.maxHashes, chunk)
		for j := range chunk {
			out[start+j] = s.containsAt(f.layers, j)
		}
	}
	return out
}

// CheckAndSet adds key and reports whether it may have been present before. Of two concurrent
// calls with the same new key exactly one answers false.
func (f *Filter) CheckAndSet(key string) (bool, error) {
	f.touch()
	present, err := f.checkAndSetOne(key)
	if err != nil {
		return false, err
	}
	if f.store.currentJournal() == nil { // spares the one-key slice when there is no journal
		return present, nil
	}
	return present, f.journalAdded([]string{key})
}

// CheckAndSetMany answers CheckAndSet for every key, in order, under one write lock, so a key
// repeated later in keys answers true. On error the keys before the failing one are added (adds
// are never undone) and their answers are returned.
func (f *Filter) CheckAndSetMany(keys []string) ([]bool, error) {
	f.touch()
	out := make([]bool, len(keys))
	n, err := f.checkAndSetMany(keys, out)
	out = out[:n]
	if jerr := f.journalAdded(keys[:n]); err == nil {
		err = jerr
	}
	return out, err
}

// checkAndSetOne and checkAndSetMany take the write lock around the locked forms; the lock is
// released by defer, so that nothing, not even a panic, leaves the filter locked.
func (f *Filter) checkAndSetOne(key string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set.Add(1)
	return f.checkAndSetLocked(key)
}

func (f *Filter) checkAndSetMany(keys []string, out []bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set.Add(uint64(len(keys)))
	return f.checkAndSetManyLocked(keys, out)
}

// checkAndSetManyLocked answers CheckAndSet for keys into out and returns how many it answered:
// all of them, or those before the key whose insertion failed. It works a chunk at a time like
// CheckMany: locations and loads of the whole chunk first, then, key by key and in order, the test
// and the insert, which find their words in the cache. Keys are handled strictly one after the
// other in the second pass, so a key repeated later in the chunk sees the bits the first one set.
// When the filter grows a layer mid-chunk the rest of the chunk is located again, with the new
// layer. The caller holds mu for writing.
func (f *Filter) checkAndSetManyLocked(keys []string, out []bool) (int, error) {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	for start := 0; start < len(keys); {
		chunk := keys[start:min(start+batchChunk, len(keys))]
		s.locate(f.layers, f.maxHashes, chunk)
		layers := len(f.layers)
		next := start + len(chunk)
		for j, key := range chunk {
			if s.containsAt(f.layers, j) {
				out[start+j] = true
				continue
			}
			if err := f.growIfFullLocked(); err != nil {
				return start + j, err
			}
			if len(f.layers) != layers { // a new layer: this key goes there, the rest is located again
				var buf [stackHashes]uint64
				f.setLocked(f.locations(buf[:0], key))
				next = start + j + 1
				break
			}
			s.setAt(f.layers, j)
			f.countAdded()
		}
		start = next
	}
	return len(keys), nil
}

// journalAdded records keys after they are in the filter and before the caller answers. The
// journal records keys that were present too: a key that only tested present through a false
// positive must still test present after a replay in another order.
func (f *Filter) journalAdded(keys []string) error {
	if j := f.store.currentJournal(); j != nil && len(keys) > 0 {
		return j.Added(f.name, keys)
	}
	return nil
}

// Replay adds keys read back from a journal: it neither extends sliding expiry (the journal
// records accesses itself) nor journals them again.
func (f *Filter) Replay(keys []string) error {
	out := make([]bool, len(keys))
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.checkAndSetManyLocked(keys, out)
	return err
}

// Add adds key without answering whether it was present.
func (f *Filter) Add(key string) error {
	_, err := f.CheckAndSet(key)
	return err
}

// AddMany adds every key under one write lock.
func (f *Filter) AddMany(keys []string) error {
	_, err := f.CheckAndSetMany(keys)
	return err
}

func (f *Filter) checkAndSetLocked(key string) (bool, error) {
	var buf [stackHashes]uint64
	locs := f.locations(buf[:0], key)
	if f.contains(locs) {
		return true, nil
	}
	if err := f.growIfFullLocked(); err != nil {
		return false, err
	}
	if newest := f.layers[len(f.layers)-1]; newest.K() > uint(len(locs)) { // the new layer hashes more than the old ones did
		locs = f.locations(locs[:0], key)
	}
	f.setLocked(locs)
	return false, nil
}

// setLocked sets a new key's bits in the newest layer and counts it. The caller holds mu for
// writing and has checked that no layer holds the key.
func (f *Filter) setLocked(locs []uint64) {
	newest := f.layers[len(f.layers)-1]
	bits, m := newest.BitSet(), uint64(newest.Cap())
	for _, loc := range locs[:newest.K()] {
		bits.Set(uint(loc % m))
	}
	f.countAdded()
}

// countAdded counts a key just set in the newest layer. The caller holds mu for writing.
func (f *Filter) countAdded() {
	f.newestItems++
	f.items.Add(1)
}

func (f *Filter) growIfFullLocked() error {
	if !f.opts.Scalable || f.dropped || f.newestItems < f.newestCapacity {
		return nil
	}
	if len(f.layers) >= MaxLayers {
		return fmt.Errorf("%w: filter %q already has %d layers", ErrTooLarge, f.name, MaxLayers)
	}
	next, err := f.opts.LayerShape(len(f.layers))
	if err != nil {
		return err
	}
	if err := checkHashes(len(f.layers), next); err != nil {
		return fmt.Errorf("%w: filter %q: %w", ErrTooLarge, f.name, err)
	}
	return f.addLayer(next, nil)
}

// locations appends key's locations for every layer to dst, as bloom.Locations computes them,
// without allocating when dst has room. The caller holds mu, so maxHashes is stable.
func (f *Filter) locations(dst []uint64, key string) []uint64 {
	return appendLocations(dst, key, f.maxHashes)
}

func (f *Filter) contains(locs []uint64) bool {
	for _, layer := range f.layers {
		if layer.TestLocations(locs[:layer.K()]) {
			return true
		}
	}
	return false
}

// touch extends sliding expiry. Writing the shared timestamp at most once a millisecond keeps
// concurrent readers of a hot filter from fighting over its cache line.
func (f *Filter) touch() {
	if f.opts.ValidAfterAccess == 0 || f.override.Load() != nil { // an override ends sliding expiry
		return
	}
	now := f.store.clock().UnixNano()
	if now-f.lastAccess.Load() <= int64(time.Millisecond) {
		return
	}
	f.lastAccess.Store(now)
	last := f.journaledAccess.Load()
	if j := f.store.currentJournal(); j != nil && now-last > int64(time.Second) && f.journaledAccess.CompareAndSwap(last, now) {
		j.Accessed(f.name, time.Unix(0, now))
	}
}

// SetLastAccess moves sliding expiry to at if that is later; replays of the journal use it.
func (f *Filter) SetLastAccess(at time.Time) {
	for {
		last := f.lastAccess.Load()
		if at.UnixNano() <= last || f.lastAccess.CompareAndSwap(last, at.UnixNano()) {
			return
		}
	}
}

// Expiry is when the filter expires; the zero time means never.
func (f *Filter) Expiry() time.Time {
	return deadline(f.override.Load(), f.opts, f.created, time.Unix(0, f.lastAccess.Load()))
}

func expiry(opts Options, created, lastAccess time.Time) time.Time {
	switch {
	case opts.ValidAfterAccess > 0:
		return lastAccess.Add(opts.ValidAfterAccess)
	case opts.ValidAfterCreate > 0:
		return created.Add(opts.ValidAfterCreate)
	}
	return time.Time{}
}

// canExpire spares the clock read on the request path for filters that live forever.
func (f *Filter) canExpire() bool {
	if o := f.override.Load(); o != nil {
		return o.Mode == ExpiryAt
	}
	return f.opts.ValidAfterAccess > 0 || f.opts.ValidAfterCreate > 0
}

// Expired reports whether the filter has expired at now.
func (f *Filter) Expired(now time.Time) bool {
	expiry := f.Expiry()
	return !expiry.IsZero() && !now.Before(expiry)
}

// SizeBytes is the memory of all layers' bit arrays.
func (f *Filter) SizeBytes() uint64 { return f.bitsBytes() }

// Items approximates the number of distinct keys added.
func (f *Filter) Items() uint64 { return f.items.Load() }

// Traffic is Usage's Checked and Set without the lock, for totals over every filter.
func (f *Filter) Traffic() (checked, set uint64) { return f.checked.Load(), f.set.Load() }

// Info describes a filter's shape and state at one moment.
type Info struct {
	Name    string
	Options Options
	Created time.Time
	// Expiry is the zero time when the filter never expires.
	Expiry    time.Time
	Items     uint64
	Layers    int
	Bits      uint64
	Hashes    uint // of the newest layer
	SizeBytes uint64
	// FillRatio is the share of bits set across all layers.
	FillRatio float64
	// EstimatedFPP is the false positive probability given the bits set now.
	EstimatedFPP float64
}

// Info counts the bits set in every layer, which reads the whole bit array: it is meant for
// status requests, not for the request path.
func (f *Filter) Info() Info {
	f.mu.RLock()
	defer f.mu.RUnlock()
	info := Info{
		Name:      f.name,
		Options:   f.opts,
		Created:   f.created,
		Expiry:    f.Expiry(),
		Items:     f.items.Load(),
		Layers:    len(f.layers),
		SizeBytes: f.bitsBytes(),
	}
	var set uint64
	// A key is a false positive unless every layer rejects it; sum logarithms so that rates
	// as small as 1e-20 survive the arithmetic.
	logNoFalsePositive := 0.0
	for _, layer := range f.layers {
		m, ones := uint64(layer.Cap()), uint64(layer.BitSet().Count())
		info.Bits += m
		set += ones
		logNoFalsePositive += math.Log1p(-math.Pow(float64(ones)/float64(m), float64(layer.K())))
	}
	info.Hashes = f.layers[len(f.layers)-1].K()
	info.FillRatio = float64(set) / float64(info.Bits)
	info.EstimatedFPP = 0 - math.Expm1(logNoFalsePositive) // 0 - x, not -x: no "-0" for an empty filter
	return info
}

// Usage is what metrics read of a filter: cheap to take at every scrape, whatever the filter's size.
type Usage struct {
	Items     uint64
	SizeBytes uint64
	Layers    int
	// EstimatedFillRatio is the share of bits expected to be set, given the keys each layer took
	// (see fillAfter).
	EstimatedFillRatio float64
	// EstimatedFPP is the false positive probability those expected fill ratios give.
	EstimatedFPP float64
	// Checked counts the keys tested by check and multi-check; Set the keys written by set,
	// multi-set, check-and-set and multi-check-and-set. Both count from the filter's creation in
	// this process (restores start at 0) and leave out keys replayed from the journal.
	Checked, Set uint64
}

// Usage reads the filter's counters in O(layers), holding its read lock only to see a consistent
// list of layers. Info counts the bits instead, which reads the whole bit array (a 1e9-key filter
// is over 1 GiB) while writers wait: too much to do for every filter at every scrape. A cached
// count would be stale by however long the cache lives; the estimate is current and, for the
// sizes where it matters, within a fraction of a percent of the count.
func (f *Filter) Usage() Usage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fill, fpp := f.estimatesLocked()
	return Usage{
		Items:              f.items.Load(),
		SizeBytes:          f.bitsBytes(),
		Layers:             len(f.layers),
		EstimatedFillRatio: fill,
		EstimatedFPP:       fpp,
		Checked:            f.checked.Load(),
		Set:                f.set.Load(),
	}
}

// estimatesLocked is the expected share of set bits given the keys each layer took, and the false
// positive probability it gives, computed as Info computes it from the counted bits. Every layer
// but the newest took exactly its capacity (a layer is added when the newest is full); the newest
// took newestItems. The caller holds mu.
func (f *Filter) estimatesLocked() (fillRatio, fpp float64) {
	var bits, set float64
	logNoFalsePositive := 0.0
	for i, layer := range f.layers {
		m, k := float64(layer.Cap()), layer.K()
		n := float64(f.newestItems)
		if i < len(f.layers)-1 {
			shape, err := f.opts.LayerShape(i)
			if err != nil { // unreachable: the layer exists, so its shape was computed before
				continue
			}
			n = float64(shape.Capacity)
		}
		p := fillAfter(n, m, k)
		bits += m
		set += m * p
		logNoFalsePositive += math.Log1p(-math.Pow(p, float64(k)))
	}
	if bits == 0 {
		return 0, 0
	}
	return set / bits, -math.Expm1(logNoFalsePositive)
}

// fillAfter is the expected fill ratio p of m bits after n keys were inserted with k hashes each,
// where n counts only the keys that were not already present. That is what items counts, and it
// matters: a key that tests present sets nothing and is not counted, and every counted key set at
// least one new bit. The textbook p = 1 - e^(-kn/m) assumes independent insertions and falls
// short once the filter fills up (0.85 where 0.89 is set, three times past capacity).
//
// With p the fill ratio, a new key is already present with probability p^k, otherwise it sets
// k(1-p)/(1-p^k) new bits on average, so dn = m(1-p^k)/(k(1-p)) dp and
// n(p) = (m/k)·Σ_{j=1..k} p^j/j, which is increasing in p; bisection inverts it.
func fillAfter(n, m float64, k uint) float64 {
	target := float64(k) * n / m
	sum := func(p float64) float64 {
		total, pj := 0.0, 1.0
		for j := 1; j <= int(k); j++ {
			pj *= p
			total += pj / float64(j)
		}
		return total
	}
	if target <= 0 {
		return 0
	}
	if target >= sum(1) {
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 50 { // 2^-50: far below what a ratio on a dashboard needs
		mid := (lo + hi) / 2
		if sum(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// drop detaches the filter from its store's memory accounting and returns the bytes it held.
func (f *Filter) drop() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = true
	return f.sizeBytes.Load()
}
