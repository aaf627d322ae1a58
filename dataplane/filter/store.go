package filter

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrNotFound means there is no filter of that name, or it expired.
	ErrNotFound = errors.New("filter not found")
	// ErrInvalidName means the name breaks the rules of ValidateName.
	ErrInvalidName = errors.New("invalid filter name")
	// ErrTooLarge means the filter, or its next layer, would exceed the per-filter memory limit.
	ErrTooLarge = errors.New("filter too large")
	// ErrOutOfMemory means the filter, or its next layer, would exceed the total memory limit.
	ErrOutOfMemory = errors.New("memory limit reached")
)

// MaxNameLength is the longest filter name, the length of a Kubernetes object name, so that a
// BloomFilter resource can always name its filter.
const MaxNameLength = 253

// ValidateName accepts 1 to 253 characters of [A-Za-z0-9._:-], except "list", which the REST API
// uses for the listing of names, and "." and "..", which no URL can reach: clients resolve them as
// path segments. ':' is allowed for the Redis habit of names such as user:123.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("%w: %q must be 1 to %d characters long", ErrInvalidName, name, MaxNameLength)
	}
	switch name {
	case "list", ".", "..":
		return fmt.Errorf("%w: %q is reserved", ErrInvalidName, name)
	}
	for _, c := range []byte(name) {
		if c == '/' {
			return fmt.Errorf("%w: %q contains '/': a name is one segment of the path", ErrInvalidName, name)
		}
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return fmt.Errorf("%w: %q may only contain letters, digits, '.', '_', ':' and '-'", ErrInvalidName, name)
		}
	}
	return nil
}

// Limits bound the memory of filters; 0 means unlimited. TotalBytes counts every filter's bit
// arrays and its FilterOverhead; FilterBytes, one filter's bit arrays alone.
type Limits struct {
	FilterBytes uint64 // one partition of a filter (a filter of one partition: the filter), all its layers together
	TotalBytes  uint64 // all filters of the store together
	Filters     int    // filters in the store, expired ones until they are purged
}

// FilterOverhead is what the budget charges every filter beyond its bit arrays: the heap a filter
// takes besides its bits (the Filter and its layers' objects, its name, its entry in the store's
// map), about 470 bytes as measured over 10,000 tiny filters (docs/performance.md), rounded up
// to leave room for its share of the metrics' labels. It is reserved with the first layer and
// released with the filter, so that many tiny filters count against TotalBytes as they cost.
const FilterOverhead = 1 << 10

// budget is the store's memory account; filters reserve from it before they allocate.
type budget struct {
	limits Limits
	used   atomic.Uint64
	// released counts the bytes given back since the budget last asked for a collection, and
	// collecting is set while one runs (release).
	released   atomic.Uint64
	collecting atomic.Bool
}

// collectAfterBytes is how many bytes of bits a store gives back before it asks for a
// collection. The bit arrays live outside the heap (allocWords), which the collector does not
// count: dropping one brings no collection, and its pages stay mapped until one runs its cleanup.
// A filter replaced again and again (moved in with --replace, rotated) kept several copies
// mapped, and their unmapping, gigabytes at once, came in the middle of the next load: in
// bench/scandump.sh, rounds of 1.9 s took 4.8 s from the fourth on.
const collectAfterBytes = 64 << 20

// reserve takes n bytes of bits for a partition of a filter (what: the filter, or the partition
// of it) that already holds held bytes of bits, and extra bytes of its overhead, or says which
// limit refuses. The per-filter limit is of one partition's bits alone.
func (b *budget) reserve(what string, n, held, extra uint64) error {
	if limit := b.limits.FilterBytes; limit > 0 && held+n > limit {
		return fmt.Errorf("%w: %s would need %s, above the per-filter limit of %s",
			ErrTooLarge, what, FormatBytes(held+n), FormatBytes(limit))
	}
	n += extra
	for {
		used := b.used.Load()
		if limit := b.limits.TotalBytes; limit > 0 && used+n > limit {
			return fmt.Errorf("%w: %s needs %s more, but %s of the total limit of %s are in use",
				ErrOutOfMemory, what, FormatBytes(n), FormatBytes(used), FormatBytes(limit))
		}
		if b.used.CompareAndSwap(used, used+n) {
			return nil
		}
	}
}

// release gives back n bytes, and asks for a collection, in the background, once
// collectAfterBytes were given back since the last.
func (b *budget) release(n uint64) {
	b.used.Add(-n)
	if b.released.Add(n) >= collectAfterBytes && b.collecting.CompareAndSwap(false, true) {
		b.released.Store(0)
		go func() {
			defer b.collecting.Store(false)
			runtime.GC()
		}()
	}
}

// ErrNotJournaled wraps a journal's failure to record a change: the volume is full or failing.
var ErrNotJournaled = errors.New("the update log cannot be written")

// Journal records changes so that they survive a restart. The store calls it in the order the
// changes take effect: a filter's creation is recorded before anyone can write to the filter, so
// a replay never applies a write to the filter that the new one replaced.
type Journal interface {
	// Created is called before f becomes visible; an error aborts the create.
	Created(f *Filter) error
	// Deleted is called before the filter disappears, with the tombstone it leaves: every
	// incarnation of the name created up to generation is gone. An error aborts the delete.
	Deleted(name string, generation int64) error
	// Added is called before keys are added to a filter: an error (wrapping ErrNotJournaled)
	// refuses the write with nothing applied, since adds cannot be undone. After a nil error the
	// keys are applied, then Applied is called: a journal that drops records once a snapshot
	// holds their effect waits for it.
	Added(name string, keys []string) error
	// Applied ends what the writer's last successful Added began.
	Applied()
	// Accessed is told, at most once a second per filter, that sliding expiry moved on.
	Accessed(name string, at time.Time)
	// Purged is told of a filter removed because it expired.
	Purged(name string)
	// ExpiryChanged is called before the override e of the incarnation of name at generation
	// takes effect; an error aborts the change.
	ExpiryChanged(name string, generation int64, e Expiry) error
	// Loaded is called before a piece of a dump is applied to the incarnation of name at
	// generation, as Added is before keys: after a nil error the piece is applied, then Applied
	// is called.
	Loaded(name string, generation int64, l Load) error
}

// Store holds the filters of one data plane by name. Lookups take no lock shared by all filters.
type Store struct {
	filters sync.Map // name → *Filter
	memory  budget
	clock   func() time.Time
	// changes serializes creates and deletes (rare next to checks and sets), so that the
	// journal hears of them in the order they take effect.
	changes sync.Mutex
	// journal is attached once recovery has filled the store, while requests may already be
	// arriving: an atomic, so that attaching it races with nothing.
	journal atomic.Pointer[attachedJournal]
	// tombstones remember deleted filters, guarded by changes: a replica's stale copy of a deleted
	// filter must not come back through a merge (see replica.go).
	tombstones map[string]Tombstone
	// retiredChecked and retiredSet keep the counts of filters that left the store, so that totals
	// over all filters never go down when one is deleted, purged or replaced.
	retiredChecked atomic.Uint64
	retiredSet     atomic.Uint64
	// count is how many filters the map holds.
	count atomic.Int64
}

// NewStore returns an empty store. clock is the time source for expiry; nil means time.Now.
func NewStore(limits Limits, clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{memory: budget{limits: limits}, clock: clock, tombstones: make(map[string]Tombstone)}
}

// attachedJournal holds the Journal interface behind an atomic pointer.
type attachedJournal struct{ Journal }

// SetJournal makes the store record its changes from now on: recovery fills the store first,
// without a journal, then attaches one.
func (s *Store) SetJournal(j Journal) { s.journal.Store(&attachedJournal{j}) }

// currentJournal is the attached journal, nil before SetJournal.
func (s *Store) currentJournal() Journal {
	if a := s.journal.Load(); a != nil {
		return a.Journal
	}
	return nil
}

// Create makes a filter. If a live filter of that name exists and overwrite is false, it returns
// that filter and created=false; with overwrite it replaces it.
func (s *Store) Create(name string, opts Options, overwrite bool) (f *Filter, created bool, err error) {
	return s.CreateHolding(name, opts, overwrite, All)
}

// CreateHolding is Create of a filter of which this pod holds only the partitions holds names.
func (s *Store) CreateHolding(name string, opts Options, overwrite bool, holds Holds) (f *Filter, created bool, err error) {
	if err := ValidateName(name); err != nil {
		return nil, false, err
	}
	if err := opts.Validate(); err != nil {
		return nil, false, err
	}
	// Validate took the first layer's shape already.
	if shape, _ := opts.LayerShape(0); checkHashes(0, shape) != nil {
		return nil, false, fmt.Errorf("%w: fpp %v needs %d hash functions per key, more than the %d a layer may use; the smallest fpp is about %.1e",
			ErrInvalidOptions, opts.FPP, shape.Hashes, MaxHashes, opts.smallestFPP())
	}
	s.changes.Lock()
	defer s.changes.Unlock()
	if !overwrite {
		if existing, err := s.Get(name); err == nil {
			return existing, false, nil
		}
	}
	if err := s.roomFor(name); err != nil {
		return nil, false, err
	}
	at := s.nextCreated(name)
	fresh, err := newFilter(s, name, opts, at, at, holds)
	if err != nil {
		return nil, false, err
	}
	if err := s.install(fresh); err != nil {
		return nil, false, err
	}
	return fresh, true, nil
}

// install journals the creation of f, which no one has seen yet, and makes it the filter of its
// name; the caller holds changes.
func (s *Store) install(fresh *Filter) error {
	if j := s.currentJournal(); j != nil {
		if err := j.Created(fresh); err != nil {
			s.memory.release(fresh.drop()) // never visible: nothing was counted on it
			return err
		}
	}
	s.publish(fresh)
	return nil
}

// publish makes f the filter of its name; the caller holds changes.
func (s *Store) publish(f *Filter) {
	if old, loaded := s.filters.Swap(f.name, f); loaded {
		s.retire(old.(*Filter))
	} else {
		s.count.Add(1)
	}
}

// roomFor refuses a filter of a new name once the store holds as many as its limit allows; a
// filter that replaces one of its name takes no more room. The caller holds changes.
func (s *Store) roomFor(name string) error {
	limit := s.memory.limits.Filters
	if _, exists := s.filters.Load(name); exists || limit <= 0 || s.count.Load() < int64(limit) {
		return nil
	}
	return fmt.Errorf("%w: this pod holds %d filters, the most it may (maxFilters)", ErrOutOfMemory, limit)
}

// CheckRoom reports whether a new filter of opts, holding the partitions holds names, fits the
// limits now: each partition's first layer under the per-filter limit, all of them with the
// overhead under the total one, and the filter under maxFilters. It reserves nothing: a cluster
// asks every pod before it creates a filter that some cannot hold.
func (s *Store) CheckRoom(name string, opts Options, holds Holds) error {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return err
	}
	held := 0
	for p := range opts.PartitionCount() {
		if holds.holds(p) {
			held++
		}
	}
	if limit := s.memory.limits.FilterBytes; held > 0 && limit > 0 && shape.SizeBytes() > limit {
		return fmt.Errorf("%w: a partition of filter %q would need %s, above the per-filter limit of %s",
			ErrTooLarge, name, FormatBytes(shape.SizeBytes()), FormatBytes(limit))
	}
	need, used := FilterOverhead+uint64(held)*shape.SizeBytes(), s.memory.used.Load()
	if limit := s.memory.limits.TotalBytes; limit > 0 && used+need > limit {
		return fmt.Errorf("%w: filter %q needs %s here (%d partitions), but %s of the total limit of %s are in use",
			ErrOutOfMemory, name, FormatBytes(need), held, FormatBytes(used), FormatBytes(limit))
	}
	return s.roomFor(name)
}

// retire gives back the memory of a filter already removed from the map and keeps its counts.
// Removing it first matters to Retired's callers: a filter is never both in the map and retired.
func (s *Store) retire(f *Filter) {
	s.memory.release(f.drop())
	checked, set := f.Traffic()
	s.retiredChecked.Add(checked)
	s.retiredSet.Add(set)
}

// Get returns the live filter of that name, or ErrNotFound if it is absent or expired. An expired
// filter stays in memory until PurgeExpired removes it.
func (s *Store) Get(name string) (*Filter, error) {
	v, ok := s.filters.Load(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	f := v.(*Filter)
	if f.canExpire() && f.Expired(s.clock()) {
		return nil, fmt.Errorf("%w: %q expired at %s", ErrNotFound, name, f.Expiry().UTC().Format(time.RFC3339))
	}
	return f, nil
}

// Lookup returns the filter of that name even if it expired; journal replays use it, because a
// later record may still extend a filter's sliding expiry.
func (s *Store) Lookup(name string) (*Filter, bool) {
	v, ok := s.filters.Load(name)
	if !ok {
		return nil, false
	}
	return v.(*Filter), true
}

// Delete removes the filter and reports whether there was one, and the tombstone's generation
// that replicas are told: the deleted filter's, or the present time when there was none here (a
// replica may hold one this store never heard of).
func (s *Store) Delete(name string) (deleted bool, generation int64, err error) {
	s.changes.Lock()
	defer s.changes.Unlock()
	generation = s.clock().UnixNano()
	if f, ok := s.Lookup(name); ok {
		generation = f.Generation()
	}
	deleted, err = s.deleteUpTo(name, generation)
	return deleted, generation, err
}

// deleteUpTo removes the filter of that name if it was created at or before generation, and
// leaves a tombstone; the caller holds changes.
func (s *Store) deleteUpTo(name string, generation int64) (bool, error) {
	f, ok := s.Lookup(name)
	ok = ok && f.Generation() <= generation
	// A tombstone is left where an incarnation was deleted (or an older tombstone moves on), not
	// for every name a client deletes in vain: the pods that held the filter keep it deleted.
	if t, had := s.tombstones[name]; ok || had && t.Generation < generation {
		if j := s.currentJournal(); j != nil {
			if err := j.Deleted(name, generation); err != nil {
				return false, err
			}
		}
		s.bury(name, generation)
	}
	if ok && s.filters.CompareAndDelete(name, f) {
		s.count.Add(-1)
		s.retire(f)
		return true, nil
	}
	return false, nil
}

// Range calls fn for every filter, live or expired, until fn returns false.
func (s *Store) Range(fn func(f *Filter) bool) {
	s.filters.Range(func(_, v any) bool { return fn(v.(*Filter)) })
}

// Names lists the live filters, sorted.
func (s *Store) Names() []string {
	now := s.clock()
	var names []string
	s.filters.Range(func(_, v any) bool {
		if f := v.(*Filter); !f.Expired(now) {
			names = append(names, f.name)
		}
		return true
	})
	slices.Sort(names)
	return names
}

// PurgeExpired removes expired filters, returns their memory and their names.
func (s *Store) PurgeExpired() []string {
	now := s.clock()
	var purged []string
	s.filters.Range(func(k, v any) bool {
		if f := v.(*Filter); f.Expired(now) && s.filters.CompareAndDelete(k, v) {
			s.count.Add(-1)
			s.retire(f)
			purged = append(purged, f.name)
			if j := s.currentJournal(); j != nil {
				j.Purged(f.name)
			}
		}
		return true
	})
	return purged
}

// Retired are the keys checked and set on filters that have left the store. Read it before
// ranging over the live filters: a filter leaves the map before its counts are retired, so the
// sum is then never counted twice (it may miss a filter that leaves meanwhile; callers that need
// a monotonic total keep the largest they have seen).
func (s *Store) Retired() (checked, set uint64) {
	return s.retiredChecked.Load(), s.retiredSet.Load()
}

// UsedBytes is the memory the budget counts: all filters' bit arrays and a FilterOverhead each.
func (s *Store) UsedBytes() uint64 { return s.memory.used.Load() }

// Now is the time of the store's clock, by which filters expire.
func (s *Store) Now() time.Time { return s.clock() }

// Limits are the store's memory limits.
func (s *Store) Limits() Limits { return s.memory.limits }

// FormatBytes writes n in binary units, for messages people read.
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
