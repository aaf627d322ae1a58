package filter

import (
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"time"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"
)

// Replicas of a store converge without a log order: a filter of fixed shape is a state-based CRDT
// under bitwise OR, and the incarnations of one name are ordered by their generation (creation
// time in nanoseconds, carried by replicated creates). A delete leaves a tombstone that refuses
// every incarnation up to its generation, so a stale replica's copy cannot come back.

// TombstoneRetention is how long a tombstone is kept. A replica away for longer than this may
// bring a deleted filter back; pods are expected back (or replaced empty) well within it.
const TombstoneRetention = 7 * 24 * time.Hour

// Tombstone records that every incarnation of a name up to Generation was deleted, at DeletedAt.
type Tombstone struct {
	Name       string
	Generation int64
	DeletedAt  time.Time
}

// bury records a tombstone; the caller holds changes.
func (s *Store) bury(name string, generation int64) {
	if t, ok := s.tombstones[name]; !ok || t.Generation < generation {
		s.tombstones[name] = Tombstone{Name: name, Generation: generation, DeletedAt: s.clock()}
	}
}

// nextCreated is the creation time of a new incarnation of name: now, or just after the newest
// incarnation this store knows of if the clock is behind it, so generations only grow. The caller
// holds changes.
func (s *Store) nextCreated(name string) time.Time {
	next := s.clock().UnixNano()
	if f, ok := s.Lookup(name); ok {
		next = max(next, successor(f.Generation()))
	}
	if t, ok := s.tombstones[name]; ok {
		next = max(next, successor(t.Generation))
	}
	return time.Unix(0, next)
}

// successor is the generation after g; at the largest it stays there rather than wrap to the
// smallest, which every incarnation would then outlive.
func successor(g int64) int64 {
	if g == math.MaxInt64 {
		return g
	}
	return g + 1
}

// stale reports whether an incarnation of name at generation is dead: tombstoned, or older than
// the one this store holds. The caller holds changes.
func (s *Store) stale(name string, generation int64) bool {
	if t, ok := s.tombstones[name]; ok && generation <= t.Generation {
		return true
	}
	f, ok := s.Lookup(name)
	return ok && f.Generation() > generation
}

// Tombstones lists the tombstones younger than TombstoneRetention.
func (s *Store) Tombstones() []Tombstone {
	s.changes.Lock()
	defer s.changes.Unlock()
	out := make([]Tombstone, 0, len(s.tombstones))
	for _, t := range s.tombstones {
		out = append(out, t)
	}
	return out
}

// RestoreTombstone puts back a tombstone read from the journal's files, without journaling it.
func (s *Store) RestoreTombstone(t Tombstone) {
	s.changes.Lock()
	defer s.changes.Unlock()
	if cur, ok := s.tombstones[t.Name]; !ok || cur.Generation < t.Generation {
		s.tombstones[t.Name] = t
	}
}

// PurgeTombstones forgets the tombstones older than TombstoneRetention.
func (s *Store) PurgeTombstones() int {
	s.changes.Lock()
	defer s.changes.Unlock()
	cutoff := s.clock().Add(-TombstoneRetention)
	n := 0
	for name, t := range s.tombstones {
		if t.DeletedAt.Before(cutoff) {
			delete(s.tombstones, name)
			n++
		}
	}
	return n
}

// DeleteReplica applies a delete a peer made: it removes the filter of that name if it was
// created at or before generation, and leaves a tombstone if it did.
func (s *Store) DeleteReplica(name string, generation int64) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	s.changes.Lock()
	defer s.changes.Unlock()
	return s.deleteUpTo(name, generation)
}

// CreateReplica applies a create a peer made: an incarnation of name created at created, holding
// the partitions holds names. It is a no-op if this store holds that incarnation or a newer one,
// or a tombstone covers it; it replaces an older incarnation. It reports whether it created the
// filter.
func (s *Store) CreateReplica(name string, opts Options, created time.Time, holds Holds) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if err := opts.Validate(); err != nil {
		return false, err
	}
	s.changes.Lock()
	defer s.changes.Unlock()
	generation := created.UnixNano()
	if f, ok := s.Lookup(name); s.stale(name, generation) || ok && f.Generation() == generation {
		return false, nil
	}
	if err := s.roomFor(name); err != nil {
		return false, err
	}
	fresh, err := newFilter(s, name, opts, created, s.clock(), holds)
	if err != nil {
		return false, err
	}
	return true, s.install(fresh)
}

// MergeResult says what a merge changed.
type MergeResult struct {
	// Installed: the store had no live incarnation this recent, and took the state's.
	Installed bool
	// Stale: the state is of a deleted, replaced or expired incarnation and was ignored.
	Stale bool
	// LayersChanged counts the layers that gained bits (or were added); BytesChanged their bytes.
	LayersChanged int
	BytesChanged  uint64
}

// Merge ORs a replica's state of a filter into the store, partition by partition: a partition the
// state holds and the store does not is held from then on. Layers of the same index have the
// same shape by construction, so the OR is exact however the replicas grew. A state of a newer
// incarnation replaces the local one, with the state's expiry override; an older, tombstoned or
// expired one is ignored. The override of an incarnation held here is left to MergeExpiry.
//
// Bits merged in are not journaled key by key: the caller makes them durable with a snapshot.
func (s *Store) Merge(st State) (MergeResult, error) {
	if err := st.validateMerge(); err != nil {
		return MergeResult{}, err
	}
	if st.ExpiredAt(s.clock()) {
		return MergeResult{Stale: true}, nil
	}
	generation := st.Created.UnixNano()
	s.changes.Lock()
	if s.stale(st.Name, generation) {
		s.changes.Unlock()
		return MergeResult{Stale: true}, nil
	}
	f, ok := s.Lookup(st.Name)
	installed := !ok || f.Generation() < generation
	if installed {
		defer s.changes.Unlock()
		fresh, err := newFilter(s, st.Name, st.Options, st.Created, s.clock(), st.holds)
		if err != nil {
			return MergeResult{}, err
		}
		// The override comes with the bits: neither is journaled, the caller's snapshot keeps both.
		fresh.override.Store(st.override())
		if err := s.install(fresh); err != nil {
			return MergeResult{}, err
		}
		f = fresh
	} else {
		// The OR runs outside changes: a large filter must not hold up every create and delete.
		// If the filter is deleted meanwhile, the bits go to a filter no one sees.
		s.changes.Unlock()
	}
	res, err := f.merge(st)
	res.Installed = installed
	f.mergedFromElsewhere(res)
	return res, err
}

// MergeBits ORs a dump into f whatever its generation, for a merge a client asks for (such as a
// migration from another cluster): the state must have f's shape, which its options define.
func (f *Filter) MergeBits(st State) (MergeResult, error) {
	if err := st.validateMerge(); err != nil {
		return MergeResult{}, err
	}
	a, b := f.opts, st.Options
	if !a.SameShape(b) {
		return MergeResult{}, fmt.Errorf("%w: the dump's filter (capacity %d, fpp %g, scalable %t, partitions %d, layout %s) has another shape than %q (capacity %d, fpp %g, scalable %t, partitions %d, layout %s)",
			ErrInvalidOptions, b.Capacity, b.FPP, b.Scalable, b.PartitionCount(), b.Layout, f.name, a.Capacity, a.FPP, a.Scalable, a.PartitionCount(), a.Layout)
	}
	res, err := f.merge(st)
	f.mergedFromElsewhere(res)
	return res, err
}

// mergedFromElsewhere ends the tracking of a load (LoadProgress) when a merge changed bits: which
// of the load's bytes the filter holds is no longer known, and a pod that missed a piece of the
// load would otherwise wait for it for good, while anti-entropy brought its bits.
func (f *Filter) mergedFromElsewhere(res MergeResult) {
	if res.LayersChanged > 0 {
		f.loading.Store(nil)
	}
}

// SameShape reports whether filters of options o and other have layers of the same shapes and hash
// keys to the same bits, so that the bits of one may be ORed into the other.
func (o Options) SameShape(other Options) bool {
	return o.Capacity == other.Capacity && o.FPP == other.FPP && o.Scalable == other.Scalable &&
		(!o.Scalable || (o.Growth == other.Growth && o.Tightening == other.Tightening)) &&
		o.PartitionCount() == other.PartitionCount() && o.Layout == other.Layout
}

// merge ORs st's layers into f's, partition by partition, adding the layers f lacks. What can
// fail (holding a partition, the memory of the layers f lacks) is done for every partition
// first, so that a merge refused leaves every bit as it was.
func (f *Filter) merge(st State) (MergeResult, error) {
	var res MergeResult
	spares, err := f.prepareMerge(st)
	if err != nil {
		return res, err
	}
	defer spares.release()
	for i, part := range st.Parts {
		if p := f.partList()[i]; p != nil && spares[i] != nil {
			p.merge(part, spares[i], &res)
		}
	}
	// A last access in the future would keep a filter that expires after access alive for good.
	last := st.LastAccess
	if now := f.store.clock(); last.After(now) {
		last = now
	}
	f.SetLastAccess(last)
	return res, nil
}

// spareLayers are layers allocated for a merge before it ORs anything: those a partition lacked,
// from index from on. The merge takes those the partition still lacks; release gives the others
// back.
type spareLayers struct {
	p      *partition
	from   int
	layers []*bloom.BloomFilter
	shapes []LayerShape
	ones   []uint64 // the bits set in each of layers
}

type mergeSpares []*spareLayers

// prepareMerge holds every partition st has layers of and allocates the layers each lacks,
// holding st's bits; on an error it gives back what it took. A partition the filter no longer
// holds (dropped meanwhile) gets no spares, and its bits go nowhere.
func (f *Filter) prepareMerge(st State) (mergeSpares, error) {
	spares := make(mergeSpares, len(st.Parts))
	for i, part := range st.Parts {
		if len(part.Layers) == 0 {
			continue
		}
		if _, err := f.Hold(i); err != nil {
			spares.release()
			return nil, err
		}
		p := f.partList()[i]
		if p == nil {
			continue
		}
		s, err := p.spares(part.Layers)
		if err != nil {
			spares.release()
			return nil, err
		}
		spares[i] = s
	}
	return spares, nil
}

// spares allocates the layers of layers that p lacks now, holding their bits.
func (p *partition) spares(layers []LayerState) (*spareLayers, error) {
	p.mu.RLock()
	from, held := len(p.layers), p.bitsBytes()
	p.mu.RUnlock()
	s := &spareLayers{p: p, from: from}
	for i := from; i < len(layers); i++ {
		shape, err := p.f.opts.LayerShape(i)
		if err == nil {
			var layer *bloom.BloomFilter
			if layer, err = p.newLayer(shape, layers[i].Words, held); err == nil {
				s.layers, s.shapes = append(s.layers, layer), append(s.shapes, shape)
				s.ones = append(s.ones, countOnes(layer.BitSet().Words())) // outside the lock
				held += shape.SizeBytes()
				continue
			}
		}
		s.release()
		return nil, err
	}
	return s, nil
}

// take hands out the spare of layer i, once, with its bits set; nil when there is none.
func (s *spareLayers) take(i int) (*bloom.BloomFilter, LayerShape, uint64) {
	if i < s.from || i-s.from >= len(s.layers) || s.layers[i-s.from] == nil {
		return nil, LayerShape{}, 0
	}
	layer := s.layers[i-s.from]
	s.layers[i-s.from] = nil
	return layer, s.shapes[i-s.from], s.ones[i-s.from]
}

// release gives back the memory of the spares not taken.
func (s *spareLayers) release() {
	for i, layer := range s.layers {
		if layer != nil {
			s.p.f.store.memory.release(s.shapes[i].SizeBytes())
			s.layers[i] = nil
		}
	}
}

func (ms mergeSpares) release() {
	for _, s := range ms {
		if s != nil {
			s.release()
		}
	}
}

// merge ORs a partition's state into p, appending the spares of the layers p lacks; it cannot
// fail.
func (p *partition) merge(st PartState, spares *spareLayers, res *MergeResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f.dropped || p.released {
		return
	}
	for i, layer := range st.Layers {
		if i < len(p.layers) {
			if layer.Words == nil { // a layer of zeros: nothing to OR
				continue
			}
			if added := orWords(p.layers[i].BitSet().Words(), layer.Words); added > 0 {
				p.ones[i] += added
				res.LayersChanged++
				res.BytesChanged += uint64(len(layer.Words)) * 8
			}
			continue
		}
		spare, shape, ones := spares.take(i)
		if spare == nil { // unreachable: p had at most spares.from layers, and layers only grow
			return
		}
		p.appendLayer(shape, spare, ones)
		p.newestItems = st.NewestItems
		res.LayersChanged++
		res.BytesChanged += shape.SizeBytes()
	}
	if len(st.Layers) == len(p.layers) {
		p.newestItems = max(p.newestItems, st.NewestItems)
	}
	if items := p.items.Load(); st.Items > items {
		p.items.CompareAndSwap(items, st.Items)
	}
}

// orWords ORs src into dst and answers how many bits of dst it set.
func orWords(dst, src []uint64) uint64 {
	var added uint64
	for i, w := range src[:len(dst)] {
		added += uint64(bits.OnesCount64(w &^ dst[i]))
		dst[i] |= w
	}
	return added
}

// Digest summarises a filter for anti-entropy: its generation and a checksum per layer of each
// partition held (nil for the others). Two replicas with equal digests of a partition hold the
// same bits of it (up to checksum collisions, which the next write to it resolves).
type Digest struct {
	Name       string
	Generation int64
	Parts      [][]uint32
}

// Layers are the checksums of every partition's layers in turn.
func (d Digest) Layers() []uint32 {
	var out []uint32
	for _, p := range d.Parts {
		out = append(out, p...)
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digest checksums every layer under its partition's read lock.
func (f *Filter) Digest() Digest {
	parts := f.partList()
	d := Digest{Name: f.name, Generation: f.Generation(), Parts: make([][]uint32, len(parts))}
	for i, p := range parts {
		if p == nil {
			continue
		}
		p.mu.RLock()
		for _, layer := range p.layers {
			words := layer.BitSet().Words()
			d.Parts[i] = append(d.Parts[i], crc32.Checksum(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8), castagnoli))
		}
		p.mu.RUnlock()
	}
	return d
}

// validate checks that a state's layers have the shapes its options define, so bits of a
// foreign shape never mix with ours.
func (st State) validate() error {
	if err := ValidateName(st.Name); err != nil {
		return err
	}
	if err := st.Options.Validate(); err != nil {
		return err
	}
	if o := st.override(); o != nil {
		if err := o.Validate(); err != nil {
			return err
		}
	}
	if len(st.Parts) != st.Options.PartitionCount() {
		return fmt.Errorf("%w: filter %q has %d partitions, its options %d", ErrInvalidOptions, st.Name, len(st.Parts), st.Options.PartitionCount())
	}
	for p, part := range st.Parts {
		if len(part.Layers) > MaxLayers || (!st.Options.Scalable && len(part.Layers) > 1) {
			return fmt.Errorf("%w: filter %q partition %d has %d layers", ErrInvalidOptions, st.Name, p, len(part.Layers))
		}
		for i, layer := range part.Layers {
			want, err := st.Options.LayerShape(i)
			if err != nil {
				return err
			}
			if layer.Bits != want.Bits || layer.Hashes != want.Hashes || (layer.Words != nil && uint64(len(layer.Words))*8 != want.SizeBytes()) {
				return fmt.Errorf("%w: filter %q partition %d layer %d has m=%d k=%d and %d words, its options define m=%d k=%d",
					ErrInvalidOptions, st.Name, p, i, layer.Bits, layer.Hashes, len(layer.Words), want.Bits, want.Hashes)
			}
			// Bits past m in the last word are set by no key and tested by none, but counted:
			// merged in, they would make the fill ratio exceed 1 and the estimates NaN.
			if layer.Words != nil && tailBits(layer.Words, layer.Bits) != 0 {
				return fmt.Errorf("%w: filter %q partition %d layer %d has bits set past its m=%d", ErrInvalidOptions, st.Name, p, i, layer.Bits)
			}
		}
	}
	return nil
}

// validateMerge is validate, and for a state to merge the partitions' counts too: a restore
// takes the counts its own files hold, whatever an older version wrote.
func (st State) validateMerge() error {
	if err := st.validate(); err != nil {
		return err
	}
	for p, part := range st.Parts {
		if err := part.validateCounts(st.Options); err != nil {
			return fmt.Errorf("%w: filter %q partition %d: %w", ErrInvalidOptions, st.Name, p, err)
		}
	}
	return nil
}

// validateCounts checks that a partition's counts are ones the engine could have reached: the
// newest layer's count within the items, and within the newest layer's capacity when the filter
// scales (a full newest layer makes the next add grow the partition).
func (part PartState) validateCounts(o Options) error {
	if part.NewestItems > part.Items {
		return fmt.Errorf("%d items in the newest layer, %d in all", part.NewestItems, part.Items)
	}
	if !o.Scalable || len(part.Layers) == 0 {
		return nil
	}
	newest, err := o.LayerShape(len(part.Layers) - 1)
	if err != nil {
		return err
	}
	if part.NewestItems > newest.Capacity {
		return fmt.Errorf("%d items in the newest layer, which holds %d", part.NewestItems, newest.Capacity)
	}
	return nil
}

// tailBits are the bits of words past the first m.
func tailBits(words []uint64, m uint) uint64 {
	if m%64 == 0 || uint(len(words)) != (m+63)/64 {
		return 0
	}
	return words[len(words)-1] &^ (1<<(m%64) - 1)
}

// clearTail clears the bits of words past the first m: files written before merges were
// validated may hold them.
func clearTail(words []uint64, m uint) {
	if t := tailBits(words, m); t != 0 {
		words[len(words)-1] &^= t
	}
}
