package filter

import (
	"fmt"
	"time"
)

// A filter's expiry is decided by its create options (ValidAfterCreate, ValidAfterAccess) until a
// client changes it (Redis's EXPIRE and PERSIST): from then on an override decides, a deadline or
// never. Replicas of a filter may see concurrent changes in different orders, so every override
// carries a stamp, and the newest stamp wins on every pod whatever the order (last writer wins):
// replays of the log, replicated writes and anti-entropy all apply an override only if it is newer
// than the one the filter holds.

// ExpiryMode says what an override decides.
type ExpiryMode uint8

// The modes. ExpiryByOptions is the zero value: no override, the options decide.
const (
	ExpiryByOptions ExpiryMode = iota
	// ExpiryAt expires the filter at Expiry.At, whatever its options say, sliding expiry included.
	ExpiryAt
	// ExpiryNever keeps the filter until it is deleted.
	ExpiryNever
)

// String names the mode as the inventory and logs write it.
func (m ExpiryMode) String() string {
	switch m {
	case ExpiryByOptions:
		return "options"
	case ExpiryAt:
		return "at"
	case ExpiryNever:
		return "never"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Expiry is a filter's expiry override.
type Expiry struct {
	Mode ExpiryMode `json:"mode"`
	// At is the deadline of ExpiryAt, the zero time otherwise.
	At time.Time `json:"at,omitzero"`
	// Stamp orders the changes of one filter's expiry: Unix nanoseconds of the clock of the pod
	// that made the change, raised past the stamp it replaced so that a pod's later change always
	// wins over what it had seen.
	Stamp int64 `json:"stamp"`
	// Origin names the pod that made the change; it breaks ties between equal stamps.
	Origin string `json:"origin"`
}

// Newer reports whether e wins over o: a later stamp, or the same stamp from a later origin.
func (e Expiry) Newer(o Expiry) bool {
	return e.Stamp > o.Stamp || e.Stamp == o.Stamp && e.Origin > o.Origin
}

// Equal reports whether e and o are the same override, their deadlines the same instant.
func (e Expiry) Equal(o Expiry) bool {
	return e.Mode == o.Mode && e.At.Equal(o.At) && e.Stamp == o.Stamp && e.Origin == o.Origin
}

// Validate refuses an override no change could have made.
func (e Expiry) Validate() error {
	switch {
	case e.Mode != ExpiryAt && e.Mode != ExpiryNever:
		return fmt.Errorf("%w: expiry mode %d is neither a deadline nor never", ErrInvalidOptions, e.Mode)
	case e.Mode == ExpiryAt && e.At.UnixNano() <= 0:
		return fmt.Errorf("%w: an expiry deadline must be after 1970", ErrInvalidOptions)
	case e.Mode == ExpiryNever && !e.At.IsZero():
		return fmt.Errorf("%w: an expiry of never has no deadline", ErrInvalidOptions)
	case e.Stamp <= 0:
		return fmt.Errorf("%w: expiry stamp must be > 0, got %d", ErrInvalidOptions, e.Stamp)
	}
	return nil
}

// deadline is when a filter expires: the override's decision when there is one, else the options'.
// The zero time means never.
func deadline(override *Expiry, opts Options, created, lastAccess time.Time) time.Time {
	if override != nil {
		return override.At // zero for ExpiryNever
	}
	return expiry(opts, created, lastAccess)
}

// ExpiryOverride is the filter's override; Mode is ExpiryByOptions when it has none.
func (f *Filter) ExpiryOverride() Expiry {
	if o := f.override.Load(); o != nil {
		return *o
	}
	return Expiry{}
}

// ExpiryChange is a client's change of expiry: given the filter's expiry now (the zero time:
// never), it answers the override to set, or false to leave the filter as it is (Redis's NX, XX,
// GT and LT conditions).
type ExpiryChange func(current time.Time) (Expiry, bool)

// ChangeExpiry applies a client's change, made on this pod by origin: change decides, under the
// filter's expiry lock so that conditions see no concurrent change, and the override it answers
// gets this pod's stamp. The change is journaled before it takes effect. It answers the override
// set, and false when change declined.
func (f *Filter) ChangeExpiry(origin string, change ExpiryChange) (Expiry, bool, error) {
	f.expiryMu.Lock()
	defer f.expiryMu.Unlock()
	next, ok := change(f.Expiry())
	if !ok {
		return Expiry{}, false, nil
	}
	next.Stamp = max(f.store.clock().UnixNano(), successor(f.ExpiryOverride().Stamp))
	next.Origin = origin
	if err := next.Validate(); err != nil {
		return Expiry{}, false, err
	}
	if err := f.setOverrideLocked(next, true); err != nil {
		return Expiry{}, false, err
	}
	return next, true, nil
}

// MergeExpiry applies an override a peer made (a replicated write, or anti-entropy) if it is
// newer than the filter's, journaled; it reports whether it was.
func (f *Filter) MergeExpiry(e Expiry) (bool, error) {
	if err := e.Validate(); err != nil {
		return false, err
	}
	f.expiryMu.Lock()
	defer f.expiryMu.Unlock()
	if !e.Newer(f.ExpiryOverride()) {
		return false, nil
	}
	return true, f.setOverrideLocked(e, true)
}

// RestoreExpiry applies an override read back from the journal's own files if it is newer than
// the filter's, without journaling it again.
func (f *Filter) RestoreExpiry(e Expiry) {
	if e.Validate() != nil {
		return
	}
	f.expiryMu.Lock()
	defer f.expiryMu.Unlock()
	if e.Newer(f.ExpiryOverride()) {
		_ = f.setOverrideLocked(e, false) // without a journal nothing fails
	}
}

// setOverrideLocked journals e (when asked and a journal is attached) and makes it the filter's
// override. The caller holds expiryMu.
func (f *Filter) setOverrideLocked(e Expiry, journal bool) error {
	if j := f.store.currentJournal(); journal && j != nil {
		if err := j.ExpiryChanged(f.name, f.Generation(), e); err != nil {
			return err
		}
	}
	f.override.Store(&e)
	return nil
}

// ExpireReplica applies a change of expiry a peer made to the incarnation of name at generation.
// It reports whether this store holds the change's effect: false when it lacks that incarnation
// (it missed the create; anti-entropy brings both), true when a newer incarnation replaced it.
func (s *Store) ExpireReplica(name string, generation int64, e Expiry) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	f, ok := s.Lookup(name)
	switch {
	case !ok || f.Generation() < generation:
		return false, nil
	case f.Generation() > generation:
		return true, nil
	}
	_, err := f.MergeExpiry(e)
	return err == nil, err
}
