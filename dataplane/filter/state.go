package filter

import (
	"slices"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// State is a filter's complete state: what a snapshot stores and a restore rebuilds.
type State struct {
	Name       string
	Options    Options
	Created    time.Time
	LastAccess time.Time
	// Parts are the partitions' states, as many as the options' PartitionCount; a partition
	// without layers is one the state leaves out (its pod does not hold it, or a dump of some
	// partitions only).
	Parts []PartState
	// Expiry is the filter's expiry override; Mode ExpiryByOptions when it has none.
	Expiry Expiry
}

// PartState is one partition's state.
type PartState struct {
	Items uint64
	// NewestItems counts the keys in the newest layer, so a restored partition grows when the
	// original would have.
	NewestItems uint64
	Layers      []LayerState
}

// LayerState is one layer's shape and bits. Nil Words are a layer of zeros, which a restore maps
// without writing a page.
type LayerState struct {
	Bits   uint
	Hashes uint
	Words  []uint64
}

// Items is the sum of the partitions' items.
func (st State) Items() uint64 {
	var n uint64
	for _, p := range st.Parts {
		n += p.Items
	}
	return n
}

// holds says which partitions the state holds: those with layers.
func (st State) holds(p int) bool { return len(st.Parts[p].Layers) > 0 }

// AllLayers lists every partition's layers, partition by partition: the order in which bits are
// stored, streamed and filled.
func (st State) AllLayers() []LayerState {
	var out []LayerState
	for _, p := range st.Parts {
		out = append(out, p.Layers...)
	}
	return out
}

// WordCount is the number of words of the layer's bit array.
func (l LayerState) WordCount() int { return int((l.Bits + 63) / 64) }

// ExpiredAt reports whether the filter of this state has expired at now.
func (st State) ExpiredAt(now time.Time) bool {
	e := deadline(st.override(), st.Options, st.Created, st.LastAccess)
	return !e.IsZero() && !now.Before(e)
}

// override is the state's Expiry as the filter holds it: nil when there is none.
func (st State) override() *Expiry {
	if st.Expiry.Mode == ExpiryByOptions {
		return nil
	}
	return &st.Expiry
}

// EmptyState is the state of a filter just created: one layer per partition, no bits set.
func EmptyState(name string, opts Options, created time.Time) (State, error) {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return State{}, err
	}
	st := State{Name: name, Options: opts, Created: created, LastAccess: created, Parts: make([]PartState, opts.PartitionCount())}
	for i := range st.Parts {
		st.Parts[i].Layers = []LayerState{{Bits: shape.Bits, Hashes: shape.Hashes}}
	}
	return st, nil
}

// State copies the filter's bits, a partition at a time under its read lock: checks go on
// meanwhile, and writers wait only for the copy. StreamState does without the copy.
func (f *Filter) State() State {
	st, layers := f.head(All)
	for i, p := range f.partList() {
		if layers[i] == nil {
			continue
		}
		p.mu.RLock()
		for j, layer := range layers[i] {
			st.Parts[i].Layers[j].Words = slices.Clone(layer.BitSet().Words())
		}
		p.mu.RUnlock()
	}
	return st
}

// CopyState is State, of the held partitions that only holds, with the bits copied into
// TransientWords: release gives them back, after which the state's Words must not be used.
func (f *Filter) CopyState(only Holds) (State, func(), error) {
	st, layers := f.head(only)
	release, err := st.AllocTransient()
	if err != nil {
		return State{}, nil, err
	}
	for i, p := range f.partList() {
		if layers[i] == nil {
			continue
		}
		p.mu.RLock()
		for j, layer := range layers[i] {
			copy(st.Parts[i].Layers[j].Words, layer.BitSet().Words())
		}
		p.mu.RUnlock()
	}
	return st, release, nil
}

// AllocTransient gives every layer of a state without bits TransientWords of its size, for a
// passing copy; release gives them all back.
func (st *State) AllocTransient() (release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for _, p := range st.Parts {
		for i, l := range p.Layers {
			words, r, err := TransientWords(l.WordCount())
			if err != nil {
				release()
				return nil, err
			}
			releases = append(releases, r)
			p.Layers[i].Words = words
		}
	}
	return release, nil
}

// Restore installs a filter from its state, replacing any filter of that name, without telling
// the journal: the state comes from the journal's own files. It checks that every layer has the
// shape its options define, so bits of a foreign shape never mix with ours.
func (s *Store) Restore(st State) error {
	all := st.AllLayers()
	return s.RestoreFilling(st, func(layers [][]uint64) error {
		for i, words := range layers {
			copy(words, all[i].Words)
		}
		return nil
	})
}

// RestoreFilling is Restore for a state without its bits (every Words nil): fill reads them
// straight into the memory the filter keeps, one slice of words per layer in AllLayers' order,
// so that recovery holds no second copy of a filter. The filter is installed only when fill
// succeeds.
func (s *Store) RestoreFilling(st State, fill func(layers [][]uint64) error) error {
	if err := st.validate(); err != nil {
		return err
	}
	f, err := newFilterShell(s, st.Name, st.Options, st.Created, st.holds)
	if err != nil {
		return err
	}
	f.override.Store(st.override())
	f.lastAccess.Store(st.LastAccess.UnixNano())
	f.journaledAccess.Store(st.LastAccess.UnixNano())
	var layers [][]uint64
	for i, p := range f.partList() {
		if p == nil {
			continue
		}
		for j := range st.Parts[i].Layers {
			shape, _ := st.Options.LayerShape(j)
			if err := p.addLayer(shape, nil); err != nil {
				s.memory.release(f.sizeBytes.Load())
				return err
			}
			layers = append(layers, p.layers[j].BitSet().Words())
		}
	}
	if err := fill(layers); err != nil {
		s.memory.release(f.sizeBytes.Load())
		return err
	}
	all := st.AllLayers()
	for i, words := range layers {
		clearTail(words, all[i].Bits)
	}
	at := 0 // layers lists the held partitions' layers in turn
	for i, p := range f.partList() {
		if p != nil {
			p.items.Store(st.Parts[i].Items)
			p.newestItems = st.Parts[i].NewestItems
			for j := range p.ones {
				p.ones[j] = countOnes(layers[at]) // once, before anyone can reach the filter
				at++
			}
		}
	}
	s.changes.Lock()
	defer s.changes.Unlock()
	s.publish(f)
	return nil
}

// StreamState hands the state of the filter's partitions that only holds (All: every one held)
// out without a copy of its bits: head receives the state with every Words nil, then emit receives the bits of each layer in AllLayers' order, at most
// len(buf) words at a time, copied into buf under the partition's read lock. Writers wait for one
// chunk, never for the whole filter, and a chunk may hold bits set after head was called: bits
// are only ever set, and the layers head announced are the ones emitted, whatever the filter
// grows to meanwhile.
func (f *Filter) StreamState(buf []uint64, only Holds, head func(State) error, emit func(words []uint64) error) error {
	st, layers := f.head(only)
	if err := head(st); err != nil {
		return err
	}
	for i, p := range f.partList() {
		for _, layer := range layers[i] {
			for at := 0; ; {
				p.mu.RLock()
				words := layer.BitSet().Words()
				n := copy(buf, words[at:])
				p.mu.RUnlock()
				if n == 0 {
					break
				}
				if err := emit(buf[:n]); err != nil {
					return err
				}
				at += n
			}
		}
	}
	return nil
}

// head is the state of the held partitions that only holds, without their bits (every Words
// nil), and in layers each such partition's layers it describes (nil for the others), taken
// together under the partition's read lock.
func (f *Filter) head(only Holds) (State, [][]*bloom.BloomFilter) {
	st := State{Name: f.name, Options: f.opts, Created: f.created, LastAccess: time.Unix(0, f.lastAccess.Load()), Expiry: f.ExpiryOverride()}
	parts := f.partList()
	st.Parts = make([]PartState, len(parts))
	layers := make([][]*bloom.BloomFilter, len(parts))
	for i, p := range parts {
		if p == nil || !only.holds(i) {
			continue
		}
		p.mu.RLock()
		st.Parts[i].Items, st.Parts[i].NewestItems = p.items.Load(), p.newestItems
		layers[i] = slices.Clone(p.layers)
		p.mu.RUnlock()
		st.Parts[i].Layers = make([]LayerState, len(layers[i]))
		for j, layer := range layers[i] {
			st.Parts[i].Layers[j] = LayerState{Bits: layer.Cap(), Hashes: layer.K()}
		}
	}
	return st, layers
}
