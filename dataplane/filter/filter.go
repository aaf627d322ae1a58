// Package filter is the engine of the data plane: named scalable bloom filters with expiry,
// memory accounting and the locking that lets many requests use one filter at once. It knows
// nothing of HTTP or disk.
package filter

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Filter is one named bloom filter, split by a hash of the key into partitions (one, unless its
// options ask for more). Each partition is a list of layers, of which only the newest takes new
// keys. bits-and-blooms filters are not safe for concurrent writers, so every partition owns an
// RWMutex: checks share it, writes take it exclusively, and batches take it once per partition.
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
	// sizeBytes is what the budget holds for the filter: the bit arrays of every partition and,
	// once it has a layer, FilterOverhead. Dropping the filter releases it whole.
	sizeBytes atomic.Uint64

	// parts are the partitions, nil where this pod does not hold one (a cluster places each on
	// some of its pods); a key belongs to parts[PartitionOf(key, len(parts))]. Holding or
	// releasing a partition replaces the slice, under holdMu, so that requests read it unlocked.
	parts  atomic.Pointer[[]*partition]
	holdMu sync.Mutex
	// dropped is set, with holdMu and every held partition's lock held, when the filter left its
	// store; it then no longer grows, so the memory it gave back cannot be taken again behind the
	// store's back. holdMu or any one partition's lock suffices to read it.
	dropped bool

	// loading is the progress of a load from a dump (Load) while it is not finished; nil
	// otherwise.
	loading atomic.Pointer[loadProgress]
}

// Holds says which partitions of a filter this pod holds; nil holds them all.
type Holds func(partition int) bool

func (h Holds) holds(partition int) bool { return h == nil || h(partition) }

// All holds every partition.
var All Holds

// newFilter makes a filter created at created that came to this store at arrived: its sliding
// expiry counts from the later of the two. A local create arrives as it is created; a replica
// made after its creation has its own time to live here.
func newFilter(s *Store, name string, opts Options, created, arrived time.Time, holds Holds) (*Filter, error) {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return nil, err
	}
	f, err := newFilterShell(s, name, opts, created, holds)
	if err != nil {
		return nil, err
	}
	f.lastAccess.Store(max(f.created.UnixNano(), arrived.UnixNano()))
	f.journaledAccess.Store(f.created.UnixNano())
	for _, p := range f.partList() {
		if p == nil {
			continue
		}
		if err := p.addLayer(shape, nil); err != nil {
			s.memory.release(f.sizeBytes.Load())
			return nil, err
		}
	}
	return f, nil
}

// newFilterShell is a filter whose held partitions have no layers yet, its overhead reserved.
func newFilterShell(s *Store, name string, opts Options, created time.Time, holds Holds) (*Filter, error) {
	f := &Filter{name: name, opts: opts, created: created, store: s}
	if err := s.memory.reserve(fmt.Sprintf("filter %q", name), 0, 0, FilterOverhead); err != nil {
		return nil, err
	}
	f.sizeBytes.Store(FilterOverhead)
	parts := make([]*partition, opts.PartitionCount())
	for i := range parts {
		if holds.holds(i) {
			parts[i] = &partition{f: f, index: i}
		}
	}
	f.parts.Store(&parts)
	return f, nil
}

// partList is the current list of partitions, nil where not held.
func (f *Filter) partList() []*partition { return *f.parts.Load() }

// Holds reports whether this pod holds partition p.
func (f *Filter) Holds(p int) bool {
	parts := f.partList()
	return p >= 0 && p < len(parts) && parts[p] != nil
}

// Hold makes this pod hold partition p, empty, if it does not: a partition placed here anew, to
// be filled by merges. It reports whether it added the partition.
func (f *Filter) Hold(p int) (bool, error) {
	f.holdMu.Lock()
	defer f.holdMu.Unlock()
	if f.dropped || f.Holds(p) {
		return false, nil
	}
	shape, err := f.opts.LayerShape(0)
	if err != nil {
		return false, err
	}
	part := &partition{f: f, index: p}
	if err := part.addLayer(shape, nil); err != nil {
		return false, err
	}
	parts := slices.Clone(f.partList())
	parts[p] = part
	f.parts.Store(&parts)
	return true, nil
}

// Release gives partition p's bits back, when this pod no longer holds it, and reports the bytes
// it freed. A request that found the partition before may still probe it; a write to it is lost,
// which placement prevents: a partition is released only once its new owners hold it.
func (f *Filter) Release(p int) uint64 {
	f.holdMu.Lock()
	defer f.holdMu.Unlock()
	if !f.Holds(p) {
		return 0
	}
	parts := slices.Clone(f.partList())
	part := parts[p]
	parts[p] = nil
	f.parts.Store(&parts)
	part.mu.Lock()
	part.released = true
	freed := part.bitsBytes()
	part.mu.Unlock()
	f.sizeBytes.Add(-freed)
	f.store.memory.release(freed)
	checked, set := part.checked.Load(), part.set.Load()
	f.store.retiredChecked.Add(checked)
	f.store.retiredSet.Add(set)
	return freed
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

// partOf is the partition key belongs to, nil when this pod does not hold it.
func (f *Filter) partOf(key string) *partition {
	parts := f.partList()
	if len(parts) == 1 {
		return parts[0]
	}
	return parts[PartitionOf(key, len(parts))]
}

// PartitionOf is the partition key belongs to.
func (f *Filter) PartitionOf(key string) int { return PartitionOf(key, f.opts.PartitionCount()) }

// ErrNotHeld refuses a write to a partition this pod does not hold.
var ErrNotHeld = errors.New("partition not held by this pod")

// notHeld is ErrNotHeld for a partition of f.
func (f *Filter) notHeld(key string) error {
	return fmt.Errorf("%w: filter %q partition %d", ErrNotHeld, f.name, f.PartitionOf(key))
}

// Check reports whether key may have been added; false when this pod does not hold key's
// partition, which the cluster's routing never asks it.
func (f *Filter) Check(key string) bool {
	f.touch()
	p := f.partOf(key)
	return p != nil && p.check(key)
}

// CheckMany answers Check for every key, in order, under one read lock per partition.
func (f *Filter) CheckMany(keys []string) []bool {
	f.touch()
	out := make([]bool, len(keys))
	_, _ = f.byPartition(keys, out, func(p *partition, keys []string, out []bool) (int, error) {
		if p != nil {
			p.checkMany(keys, out)
		}
		return len(keys), nil
	})
	return out
}

// CheckAndSet adds key and reports whether it may have been present before. Of two concurrent
// calls with the same new key exactly one answers false.
func (f *Filter) CheckAndSet(key string) (bool, error) {
	f.touch()
	p := f.partOf(key)
	if p == nil {
		return false, f.notHeld(key)
	}
	j := f.store.currentJournal()
	if j == nil {
		return p.checkAndSetOne(key)
	}
	if err := j.Added(f.name, []string{key}); err != nil {
		return false, err
	}
	defer j.Applied()
	return p.checkAndSetOne(key)
}

// CheckAndSetMany answers CheckAndSet for every key, in order, under one write lock per
// partition, so a key repeated later in keys answers true. The journal records the keys first:
// when it cannot, nothing is added. When the engine then fails at a key (a memory limit), the
// keys before it are added (adds are never undone) and their answers are returned; the journal
// holds the rest as well, which a replay may add: false positives, never a lost key.
func (f *Filter) CheckAndSetMany(keys []string) ([]bool, error) {
	f.touch()
	if j := f.store.currentJournal(); j != nil && len(keys) > 0 {
		if err := j.Added(f.name, keys); err != nil {
			return nil, err
		}
		defer j.Applied()
	}
	out := make([]bool, len(keys))
	n, err := f.byPartition(keys, out, func(p *partition, keys []string, out []bool) (int, error) {
		if p == nil {
			return 0, f.notHeld(keys[0])
		}
		return p.checkAndSetMany(keys, out, true)
	})
	return out[:n], err
}

// byPartition runs fn on each partition's share of keys (nil for a partition not held), in their
// order, with the answers going to out in keys' order. It returns how many keys, from the first,
// were answered: all of them, or those before the first key whose partition failed at it, with
// that failure. A partition after the failing one still takes its keys: a batch is not atomic,
// and adds are never undone.
func (f *Filter) byPartition(keys []string, out []bool, fn func(p *partition, keys []string, out []bool) (int, error)) (int, error) {
	parts := f.partList()
	if len(keys) == 0 {
		return 0, nil
	}
	if len(parts) == 1 {
		return fn(parts[0], keys, out)
	}
	// A counting sort by partition: order lists keys' indices partition by partition.
	of := make([]int32, len(keys))
	starts := make([]int, len(parts)+1)
	for i, key := range keys {
		p := PartitionOf(key, len(parts))
		of[i] = int32(p)
		starts[p+1]++
	}
	for p := range parts {
		starts[p+1] += starts[p]
	}
	next := slices.Clone(starts[:len(parts)])
	order := make([]int, len(keys))
	for i, p := range of {
		order[next[p]] = i
		next[p]++
	}
	grouped, answers := make([]string, len(keys)), make([]bool, len(keys))
	for at, i := range order {
		grouped[at] = keys[i]
	}
	answered, firstErr := len(keys), error(nil)
	for p, part := range parts {
		lo, hi := starts[p], starts[p+1]
		if lo == hi {
			continue
		}
		n, err := fn(part, grouped[lo:hi], answers[lo:hi])
		if err != nil && order[lo+n] < answered {
			answered, firstErr = order[lo+n], err
		}
	}
	for at, i := range order {
		out[i] = answers[at]
	}
	return answered, firstErr
}

// Replay adds keys read back from a journal: it neither extends sliding expiry (the journal
// records accesses itself) nor journals them again.
func (f *Filter) Replay(keys []string) error {
	out := make([]bool, len(keys))
	_, err := f.byPartition(keys, out, func(p *partition, keys []string, out []bool) (int, error) {
		if p == nil { // written before this pod gave the partition up
			return len(keys), nil
		}
		return p.checkAndSetMany(keys, out, false)
	})
	return err
}

// Add adds key without answering whether it was present.
func (f *Filter) Add(key string) error {
	_, err := f.CheckAndSet(key)
	return err
}

// AddMany adds every key under one write lock per partition.
func (f *Filter) AddMany(keys []string) error {
	_, err := f.CheckAndSetMany(keys)
	return err
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
func (f *Filter) SizeBytes() uint64 {
	if n := f.sizeBytes.Load(); n >= FilterOverhead {
		return n - FilterOverhead
	}
	return 0
}

// Partitions is how many partitions the filter has.
func (f *Filter) Partitions() int { return f.opts.PartitionCount() }

// HeldPartitions counts the partitions this pod holds.
func (f *Filter) HeldPartitions() int {
	n := 0
	for _, p := range f.partList() {
		if p != nil {
			n++
		}
	}
	return n
}

// held is the partitions this pod holds.
func (f *Filter) held() []*partition {
	parts := f.partList()
	if len(parts) == 1 && parts[0] != nil {
		return parts
	}
	out := make([]*partition, 0, len(parts))
	for _, p := range parts {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Items approximates the number of distinct keys added to the partitions held here.
func (f *Filter) Items() uint64 {
	var n uint64
	for _, p := range f.held() {
		n += p.items.Load()
	}
	return n
}

// Traffic is Usage's Checked and Set without the lock, for totals over every filter.
func (f *Filter) Traffic() (checked, set uint64) {
	for _, p := range f.held() {
		checked += p.checked.Load()
		set += p.set.Load()
	}
	return checked, set
}

// Info describes a filter's shape and state at one moment.
type Info struct {
	Name    string
	Options Options
	Created time.Time
	// Expiry is the zero time when the filter never expires.
	Expiry time.Time
	Items  uint64
	// Layers is the most layers any partition has; Bits and SizeBytes are of all partitions.
	Layers    int
	Bits      uint64
	Hashes    uint // of the newest layer
	SizeBytes uint64
	// FillRatio is the share of bits set across all layers.
	FillRatio float64
	// EstimatedFPP is the false positive probability given the bits set now: the mean of the
	// partitions', since a key is tested in one partition, each as likely as any other.
	EstimatedFPP float64
	// Partitions counts the partitions described: those this pod holds, of the ones asked for.
	Partitions int
}

// Info describes the filter from the counts of bits set that the engine keeps as it sets them:
// O(layers), under each partition's read lock, whatever the filter's size.
func (f *Filter) Info() Info { return f.InfoOf(All) }

// InfoOf is Info of the held partitions that only holds.
func (f *Filter) InfoOf(only Holds) Info {
	info := Info{
		Name:    f.name,
		Options: f.opts,
		Created: f.created,
		Expiry:  f.Expiry(),
	}
	var set uint64
	var held []*partition
	for _, p := range f.held() {
		if only.holds(p.index) {
			held = append(held, p)
		}
	}
	info.Partitions = len(held)
	for _, p := range held {
		info.Items += p.items.Load()
		p.mu.RLock()
		info.SizeBytes += p.bitsBytes()
		p.mu.RUnlock()
		c := p.count()
		info.Layers = max(info.Layers, c.layers)
		info.Hashes = max(info.Hashes, c.hashes)
		info.Bits += c.bits
		set += c.set
		info.EstimatedFPP += c.fpp / float64(len(held))
	}
	if info.Bits > 0 {
		info.FillRatio = float64(set) / float64(info.Bits)
	}
	return info
}

// Usage is what metrics read of a filter: cheap to take at every scrape, whatever the filter's size.
type Usage struct {
	Items     uint64
	SizeBytes uint64
	// Layers is the most layers any partition has.
	Layers int
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

// Usage reads the filter's counters in O(layers), holding each partition's read lock only to see
// a consistent list of its layers. Its fill ratio is estimated from the keys each layer took,
// where Info reads the bits set; for the sizes where it matters the estimate is within a
// fraction of a percent of the count.
func (f *Filter) Usage() Usage {
	u := Usage{Items: f.Items(), SizeBytes: f.SizeBytes()}
	u.Checked, u.Set = f.Traffic()
	var bits, set float64
	held := f.held()
	for _, p := range held {
		e := p.estimate()
		u.Layers = max(u.Layers, e.layers)
		bits += e.bits
		set += e.set
		u.EstimatedFPP += e.fpp / float64(len(held))
	}
	if bits > 0 {
		u.EstimatedFillRatio = set / bits
	}
	return u
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
	f.holdMu.Lock()
	defer f.holdMu.Unlock()
	held := f.held()
	for _, p := range held {
		p.mu.Lock()
	}
	f.dropped = true
	for _, p := range held {
		p.mu.Unlock()
	}
	return f.sizeBytes.Load()
}
