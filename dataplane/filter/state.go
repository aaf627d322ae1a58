package filter

import "time"

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
}

// LayerState is one layer's shape and bits.
type LayerState struct {
	Bits   uint
	Hashes uint
	Words  []uint64
}

// ExpiredAt reports whether the filter of this state has expired at now.
func (st State) ExpiredAt(now time.Time) bool {
	e := expiry(st.Options, st.Created, st.LastAccess)
	return !e.IsZero() && !now.Before(e)
}

// EmptyState is the state of a filter just created: one layer, no bits set.
func EmptyState(name string, opts Options, created time.Time) (State, error) {
	shape, err := opts.LayerShape(0)
	if err != nil {
		return State{}, err
	}
	layer := LayerState{Bits: shape.Bits, Hashes: shape.Hashes, Words: make([]uint64, shape.SizeBytes()/8)}
	return State{Name: name, Options: opts, Created: created, LastAccess: created, Layers: []LayerState{layer}}, nil
}

// State copies the filter's bits under its read lock: checks go on meanwhile, and writers wait
// only for the copy.
func (f *Filter) State() State {
	st := State{
		Name:       f.name,
		Options:    f.opts,
		Created:    f.created,
		LastAccess: time.Unix(0, f.lastAccess.Load()),
		Items:      f.items.Load(),
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	st.NewestItems = f.newestItems
	st.Layers = make([]LayerState, len(f.layers))
	for i, layer := range f.layers {
		st.Layers[i] = LayerState{Bits: layer.Cap(), Hashes: layer.K(), Words: append([]uint64(nil), layer.BitSet().Words()...)}
	}
	return st
}

// Restore installs a filter from its state, replacing any filter of that name, without telling
// the journal: the state comes from the journal's own files. It checks that every layer has the
// shape its options define, so bits of a foreign shape never mix with ours.
func (s *Store) Restore(st State) error {
	if err := st.validate(); err != nil {
		return err
	}
	f := &Filter{name: st.Name, opts: st.Options, created: st.Created, store: s}
	f.lastAccess.Store(st.LastAccess.UnixNano())
	f.journaledAccess.Store(st.LastAccess.UnixNano())
	for i, layer := range st.Layers {
		shape, _ := st.Options.LayerShape(i)
		if err := f.addLayer(shape, layer.Words); err != nil {
			s.memory.release(f.sizeBytes.Load())
			return err
		}
	}
	f.items.Store(st.Items)
	f.newestItems = st.NewestItems
	s.changes.Lock()
	defer s.changes.Unlock()
	s.publish(f)
	return nil
}
