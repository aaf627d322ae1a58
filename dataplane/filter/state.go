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
	Items      uint64
	// NewestItems counts the keys in the newest layer, so a restored filter grows when the
	// original would have.
	NewestItems uint64
	Layers      []LayerState
	// Expiry is the filter's expiry override; Mode ExpiryByOptions when it has none.
	Expiry Expiry
}

// LayerState is one layer's shape and bits. Nil Words are a layer of zeros, which a restore maps
// without writing a page.
type LayerState struct {
	Bits   uint
	Hashes uint
	Words  []uint64
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

// EmptyState is the state of a filter just created: one layer, no bits set.
func EmptyState(name string, opts Options, created time.Time) (State, error) {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return State{}, err
	}
	layer := LayerState{Bits: shape.Bits, Hashes: shape.Hashes}
	return State{Name: name, Options: opts, Created: created, LastAccess: created, Layers: []LayerState{layer}}, nil
}

// State copies the filter's bits under its read lock: checks go on meanwhile, and writers wait
// only for the copy. StreamState does without the copy.
func (f *Filter) State() State {
	st, layers := f.head()
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i, layer := range layers {
		st.Layers[i].Words = slices.Clone(layer.BitSet().Words())
	}
	return st
}

// CopyState is State with the bits copied into TransientWords: release gives them back, after
// which the state's Words must not be used.
func (f *Filter) CopyState() (State, func(), error) {
	st, layers := f.head()
	release, err := st.AllocTransient()
	if err != nil {
		return State{}, nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i, layer := range layers {
		copy(st.Layers[i].Words, layer.BitSet().Words())
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
	for i, l := range st.Layers {
		words, r, err := TransientWords(l.WordCount())
		if err != nil {
			release()
			return nil, err
		}
		releases = append(releases, r)
		st.Layers[i].Words = words
	}
	return release, nil
}

// Restore installs a filter from its state, replacing any filter of that name, without telling
// the journal: the state comes from the journal's own files. It checks that every layer has the
// shape its options define, so bits of a foreign shape never mix with ours.
func (s *Store) Restore(st State) error {
	return s.RestoreFilling(st, func(layers [][]uint64) error {
		for i, words := range layers {
			copy(words, st.Layers[i].Words)
		}
		return nil
	})
}

// RestoreFilling is Restore for a state without its bits (every Words nil): fill reads them
// straight into the memory the filter keeps, one slice of words per layer, so that recovery holds
// no second copy of a filter. The filter is installed only when fill succeeds.
func (s *Store) RestoreFilling(st State, fill func(layers [][]uint64) error) error {
	if err := st.validate(); err != nil {
		return err
	}
	f := &Filter{name: st.Name, opts: st.Options, created: st.Created, store: s}
	f.override.Store(st.override())
	f.lastAccess.Store(st.LastAccess.UnixNano())
	f.journaledAccess.Store(st.LastAccess.UnixNano())
	for i := range st.Layers {
		shape, _ := st.Options.LayerShape(i)
		if err := f.addLayer(shape, nil); err != nil {
			s.memory.release(f.sizeBytes.Load())
			return err
		}
	}
	layers := make([][]uint64, len(f.layers))
	for i, layer := range f.layers {
		layers[i] = layer.BitSet().Words()
	}
	if err := fill(layers); err != nil {
		s.memory.release(f.sizeBytes.Load())
		return err
	}
	f.items.Store(st.Items)
	f.newestItems = st.NewestItems
	s.changes.Lock()
	defer s.changes.Unlock()
	s.publish(f)
	return nil
}

// StreamState hands the filter's state out without a copy of its bits: head receives the state
// with every Words nil, then emit receives the bits of each layer in turn, at most len(buf) words
// at a time, copied into buf under the read lock. Writers wait for one chunk, never for the whole
// filter, and a chunk may hold bits set after head was called: bits are only ever set, and the
// layers head announced are the ones emitted, whatever the filter grows to meanwhile.
func (f *Filter) StreamState(buf []uint64, head func(State) error, emit func(words []uint64) error) error {
	st, layers := f.head()
	if err := head(st); err != nil {
		return err
	}
	for _, layer := range layers {
		for at := 0; ; {
			f.mu.RLock()
			words := layer.BitSet().Words()
			n := copy(buf, words[at:])
			f.mu.RUnlock()
			if n == 0 {
				break
			}
			if err := emit(buf[:n]); err != nil {
				return err
			}
			at += n
		}
	}
	return nil
}

// head is the filter's state without its bits (every Words nil), and in layers the layers it
// describes, taken together under the read lock.
func (f *Filter) head() (State, []*bloom.BloomFilter) {
	st := State{Name: f.name, Options: f.opts, Created: f.created, LastAccess: time.Unix(0, f.lastAccess.Load()), Items: f.items.Load(), Expiry: f.ExpiryOverride()}
	f.mu.RLock()
	st.NewestItems = f.newestItems
	layers := slices.Clone(f.layers)
	f.mu.RUnlock()
	st.Layers = make([]LayerState, len(layers))
	for i, layer := range layers {
		st.Layers[i] = LayerState{Bits: layer.Cap(), Hashes: layer.K()}
	}
	return st, layers
}
