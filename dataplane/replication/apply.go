package replication

import (
	"errors"
	"fmt"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
)

// ErrBadOp refuses an op that could not have come from a peer.
var ErrBadOp = errors.New("invalid replicated write")

// Apply applies a batch of a peer's writes, in order, and says per write whether this pod now
// holds its effect (durably, as far as its log's sync policy goes), lacks its filter, or refused
// it: a home's add that a newer membership fences (home.go). Consecutive adds to the same
// incarnation are applied as one, so that a batch costs one log commit per filter rather than
// one per write.
func (n *Node) Apply(ops []peer.Op) ([]peer.Outcome, error) {
	for i, op := range ops {
		if err := checkOp(op); err != nil {
			return nil, fmt.Errorf("ops[%d]: %w", i, err)
		}
	}
	n.fence.RLock()
	defer n.fence.RUnlock()
	applied := make([]peer.Outcome, len(ops))
	for i, op := range ops {
		if n.fences(op) {
			applied[i] = peer.Fenced
		}
	}
	for i := 0; i < len(ops); {
		op := ops[i]
		if applied[i] == peer.Fenced {
			i++
			continue
		}
		switch op.Kind {
		case peer.OpCreate:
			_, err := n.opts.Store.CreateReplica(op.Name, *op.Options, time.Unix(0, op.Generation), n.Holds(op.Name, *op.Options))
			applied[i] = outcome(n.logFailure(op, err))
			i++
		case peer.OpDelete:
			_, err := n.opts.Store.DeleteReplica(op.Name, op.Generation)
			applied[i] = outcome(n.logFailure(op, err))
			i++
		case peer.OpExpire:
			held, err := n.opts.Store.ExpireReplica(op.Name, op.Generation, *op.Expiry)
			applied[i] = outcome(n.logFailure(op, err) && held)
			i++
		case peer.OpLoad:
			applied[i] = outcome(n.applyLoad(op))
			i++
		case peer.OpAdd:
			j := i + 1
			for j < len(ops) && ops[j].Kind == peer.OpAdd && ops[j].Name == op.Name && ops[j].Generation == op.Generation && applied[j] != peer.Fenced {
				j++
			}
			ok := outcome(n.applyAdds(ops[i:j]))
			for k := i; k < j; k++ {
				applied[k] = ok
			}
			i = j
		}
	}
	return applied, nil
}

// outcome is Holds when the pod holds a write, else Lacks.
func outcome(held bool) peer.Outcome {
	if held {
		return peer.Holds
	}
	return peer.Lacks
}

// applyAdds adds the keys of a run of adds to the same incarnation.
func (n *Node) applyAdds(run []peer.Op) bool {
	op := run[0]
	f, ok := n.opts.Store.Lookup(op.Name)
	switch {
	case !ok || f.Generation() < op.Generation:
		return false // missed the create: repair will bring the filter
	case f.Generation() > op.Generation:
		return true // the filter was replaced: the write's incarnation is gone everywhere
	}
	if len(run) == 1 && len(op.Keys) == op.KeyCount() { // no packed keys: Keys holds them all
		return n.logFailure(op, n.add(f, op.Keys))
	}
	// The keys go to the filter applyChunk at a time, through one slice: a batch of packed keys
	// never takes a string header for each of its keys at once.
	total := 0
	for _, o := range run {
		total += o.KeyCount()
	}
	chunk := make([]string, 0, min(total, applyChunk))
	var err error
	for _, o := range run {
		for k := range o.EachKey {
			if chunk = append(chunk, k); len(chunk) == applyChunk {
				if err = n.add(f, chunk); err != nil {
					return n.logFailure(op, err)
				}
				chunk = chunk[:0]
			}
		}
	}
	if len(chunk) > 0 {
		err = n.add(f, chunk)
	}
	return n.logFailure(op, err)
}

// applyLoad applies a piece of a dump loaded into an incarnation, as applyAdds applies keys.
func (n *Node) applyLoad(op peer.Op) bool {
	f, ok := n.opts.Store.Lookup(op.Name)
	switch {
	case !ok || f.Generation() < op.Generation:
		return false // missed the create: repair will bring the filter
	case f.Generation() > op.Generation:
		return true // the filter was replaced: the write's incarnation is gone everywhere
	}
	err := f.Load(*op.Load)
	if errors.Is(err, filter.ErrNotHeld) {
		n.arrangeFilter(f)
		err = f.Load(*op.Load)
	}
	return n.logFailure(op, err)
}

// add adds keys to f. A partition placed here that f does not hold yet (f was made while the
// membership changed) is held then, and the keys are added again: adds are idempotent.
func (n *Node) add(f *filter.Filter, keys []string) error {
	err := f.AddMany(keys)
	if errors.Is(err, filter.ErrNotHeld) {
		n.arrangeFilter(f)
		err = f.AddMany(keys)
	}
	return err
}

// applyChunk is how many of a batch's keys applyAdds hands the filter at once.
const applyChunk = 4096

func (n *Node) logFailure(op peer.Op, err error) bool {
	if err != nil {
		n.opts.Log.Warn("Could not apply a peer's write", "op", op.Kind, "filter", op.Name, "generation", op.Generation, "error", err.Error())
	}
	return err == nil
}

// MaxGenerationSkew bounds how far ahead of this pod's clock a replicated create or delete may
// be. Generations are creation times, which only grow: one far in the future would make every
// later create of the name lose to it, and a delete at it would leave a tombstone that outlives
// every create for as long as the skew.
const MaxGenerationSkew = 10 * time.Minute

func checkOp(op peer.Op) error {
	if err := filter.ValidateName(op.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOp, err)
	}
	if op.Generation <= 0 {
		return fmt.Errorf("%w: generation must be > 0, got %d", ErrBadOp, op.Generation)
	}
	if op.Kind == peer.OpCreate || op.Kind == peer.OpDelete {
		if err := checkGeneration(op.Generation, time.Now()); err != nil {
			return fmt.Errorf("%w: %s of %q: %w", ErrBadOp, op.Kind, op.Name, err)
		}
	}
	switch op.Kind {
	case peer.OpCreate:
		if op.Options == nil {
			return fmt.Errorf("%w: create of %q without options", ErrBadOp, op.Name)
		}
		if err := op.Options.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOp, err)
		}
	case peer.OpExpire:
		if op.Expiry == nil {
			return fmt.Errorf("%w: expire of %q without an expiry", ErrBadOp, op.Name)
		}
		if err := op.Expiry.Validate(); err != nil {
			return fmt.Errorf("%w: expire of %q: %w", ErrBadOp, op.Name, err)
		}
		// A stamp far ahead would win over every later change, as a generation would.
		if err := checkGeneration(op.Expiry.Stamp, time.Now()); err != nil {
			return fmt.Errorf("%w: expire of %q: stamp: %w", ErrBadOp, op.Name, err)
		}
	case peer.OpLoad:
		if op.Load == nil {
			return fmt.Errorf("%w: load of %q without a piece", ErrBadOp, op.Name)
		}
	case peer.OpDelete, peer.OpAdd:
	default:
		return fmt.Errorf("%w: unknown op %q", ErrBadOp, op.Kind)
	}
	return nil
}

// checkGeneration refuses a generation more than MaxGenerationSkew ahead of now. Adds need no
// check: one at a generation no pod holds applies nowhere.
func checkGeneration(generation int64, now time.Time) error {
	if limit := now.Add(MaxGenerationSkew).UnixNano(); generation > limit {
		return fmt.Errorf("generation %d is more than %s ahead of this pod's clock (%d)", generation, MaxGenerationSkew, now.UnixNano())
	}
	return nil
}
