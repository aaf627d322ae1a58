// Package writes runs every write of the data plane — create, delete, set, check-and-set, their
// batch forms and the pieces of a dump loaded in chunks — the same way: the engine applies it
// and journals it (the store's journal is the persister), then the write goes to the peers and
// waits for the acknowledgements of the request's consistency level. It also decides which pod serves the writes that only a filter's
// home may serve. The HTTP handlers decode requests and encode what it returns.
package writes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// ErrCatchingUp refuses a create on a pod that has not caught up from its peers: the filter
// would be a new incarnation that replaces, on every pod, the one its peers already hold.
var ErrCatchingUp = errors.New("catching up from the peers; retry shortly")

// ErrReplication is replication's: a write applied here that too few pods acknowledged in time.
var ErrReplication = replication.ErrReplication

// NotHomeError refuses values routed to this pod that it does not hold (or cannot answer for
// yet); the sender of a check or a description takes it as its cue to try the next owner.
type NotHomeError struct{ Reason string }

func (e *NotHomeError) Error() string { return e.Reason }

// HomeUnavailableError refuses a check-and-set or create that its home, as the membership names
// it, does not serve: Code is wire.CodeHomeUnavailable (unreachable, not serving as home yet,
// fenced by a newer epoch) or wire.CodeLeaseLapsed. No other pod serves it in the home's place,
// and no false was answered for it; the write may have been applied.
type HomeUnavailableError struct {
	Code   int
	Reason string
}

func (e *HomeUnavailableError) Error() string { return e.Reason }

// homeUnavailable is a HomeUnavailableError of code 13.
func homeUnavailable(format string, args ...any) error {
	return &HomeUnavailableError{Code: wire.CodeHomeUnavailable, Reason: fmt.Sprintf(format, args...)}
}

// Service runs the writes of one data plane.
type Service struct {
	store *filter.Store
	node  *replication.Node
	log   *slog.Logger
	// warned holds, per kind of warning, when it was last logged (spacedLevel).
	warned sync.Map
}

// New returns the write service over a store and the node that replicates its writes.
func New(store *filter.Store, node *replication.Node, log *slog.Logger) *Service {
	return &Service{store: store, node: node, log: log}
}

// Create creates a filter, or returns the existing one (created false) unless overwrite. Options
// that leave Partitions out get the fewest whose partition fits the per-filter limit.
func (s *Service) Create(ctx context.Context, level wire.Consistency, name string, opts filter.Options, overwrite bool) (f *filter.Filter, created bool, err error) {
	if !s.node.Ready() {
		return nil, false, ErrCatchingUp
	}
	if opts.Partitions == 0 {
		opts.Partitions = opts.AutoPartitions(s.store.Limits().FilterBytes)
	}
	if s.node.Placed() {
		if _, err := s.store.Get(name); err != nil || overwrite { // a create of an existing filter takes no room
			if err := s.node.CheckRoomEverywhere(ctx, name, opts); err != nil {
				return nil, false, err
			}
		}
	}
	f, created, err = s.store.CreateHolding(name, opts, overwrite, s.node.Holds(name, opts))
	if err != nil || !created {
		return f, created, err
	}
	s.log.Info("Created filter", "filter", name, "capacity", opts.Capacity, "fpp", opts.FPP,
		"scalable", opts.Scalable, "partitions", opts.PartitionCount(), "sizeBytes", f.SizeBytes(), "overwrite", overwrite, "generation", f.Generation())
	o := f.Options()
	return f, true, s.replicate(ctx, level, peer.Op{Kind: peer.OpCreate, Name: name, Generation: f.Generation(), Options: &o})
}

// Delete deletes a filter; deleting one that does not exist is not an error, and is replicated
// too, so that a peer that still holds it forgets it.
func (s *Service) Delete(ctx context.Context, level wire.Consistency, name string) error {
	deleted, generation, err := s.store.Delete(name)
	if err != nil {
		return err
	}
	if deleted {
		s.log.Info("Deleted filter", "filter", name, "generation", generation)
	}
	return s.replicate(ctx, level, peer.Op{Kind: peer.OpDelete, Name: name, Generation: generation})
}

// ChangeExpiry changes f's expiry as change decides (Redis's EXPIRE, PEXPIRE, PERSIST and their
// conditions), journals the change and replicates it, stamped by this pod (filter.Expiry). It
// reports whether it changed anything. A deadline that is already past deletes the filter instead,
// as Redis deletes a key given a time in the past; the delete is replicated as any other.
// The change is served by the pod that receives it, as a delete is: the stamps order concurrent
// changes made on different pods the same way on every pod.
func (s *Service) ChangeExpiry(ctx context.Context, level wire.Consistency, f *filter.Filter, change filter.ExpiryChange) (bool, error) {
	past := false
	e, changed, err := f.ChangeExpiry(s.node.Self(), func(current time.Time) (filter.Expiry, bool) {
		next, ok := change(current)
		if ok && next.Mode == filter.ExpiryAt && !next.At.After(s.store.Now()) {
			past = true
			return filter.Expiry{}, false
		}
		return next, ok
	})
	switch {
	case err != nil:
		return false, err
	case past:
		return true, s.Delete(ctx, level, f.Name())
	case !changed:
		return false, nil
	}
	return true, s.replicate(ctx, level, peer.Op{Kind: peer.OpExpire, Name: f.Name(), Generation: f.Generation(), Expiry: &e})
}

// CheckAndSet adds key to f and reports whether it may have been present before. It is applied
// as the key's home (replication.Node.ServeAsHome), and a false is answered only once a quorum of
// the pods holds the key, whatever level asks (CheckAndSetLevel).
func (s *Service) CheckAndSet(ctx context.Context, level wire.Consistency, f *filter.Filter, key string) (bool, error) {
	var present bool
	var err error
	epoch, herr := s.node.ServeAsHome(f, []string{key}, func() { present, err = f.CheckAndSet(key) })
	switch {
	case herr != nil:
		return false, asHomeError(herr)
	case err != nil || !s.node.Replicating(): // alone, the one-key slice is not worth making
		return present, err
	}
	return present, s.replicateAdd(ctx, CheckAndSetLevel(level, present), f, []string{key}, epoch)
}

// asHomeError is the answer to a check-and-set that this pod did not serve as the home
// (replication.ErrNotHome: code 13) or whose answer it must not give (ErrLeaseLapsed: code 14).
// The values a lapsed home applied stay applied here (adds are monotone) and are not
// replicated: anti-entropy brings them to the peers.
func asHomeError(err error) error {
	code := wire.CodeHomeUnavailable
	if errors.Is(err, replication.ErrLeaseLapsed) {
		code = wire.CodeLeaseLapsed
	}
	return &HomeUnavailableError{Code: code, Reason: err.Error()}
}

// Set adds key to f.
func (s *Service) Set(ctx context.Context, level wire.Consistency, f *filter.Filter, key string) error {
	if _, err := f.CheckAndSet(key); err != nil || !s.node.Replicating() {
		return err
	}
	return s.replicateAdd(ctx, level, f, []string{key}, 0)
}

// CheckAndSetMany is CheckAndSet for every key, in order. When the engine fails part-way (a
// memory limit reached), the keys it added before are replicated before the error is returned,
// so that the peers hold what this pod holds.
func (s *Service) CheckAndSetMany(ctx context.Context, level wire.Consistency, f *filter.Filter, keys []string) ([]bool, error) {
	var present []bool
	var err error
	epoch, herr := s.node.ServeAsHome(f, keys, func() { present, err = f.CheckAndSetMany(keys) })
	if herr != nil {
		return nil, asHomeError(herr)
	}
	if rerr := s.replicateAdd(ctx, CheckAndSetLevel(level, present...), f, keys[:len(present)], epoch); err == nil {
		err = rerr
	}
	return present, err
}

// SetMany adds every key to f, as CheckAndSetMany does.
func (s *Service) SetMany(ctx context.Context, level wire.Consistency, f *filter.Filter, keys []string) error {
	present, err := f.CheckAndSetMany(keys)
	if rerr := s.replicateAdd(ctx, level, f, keys[:len(present)], 0); err == nil {
		err = rerr
	}
	return err
}

// CheckAndSetLevel is the level a check-and-set waits for, given what it answers: a key that was
// new (false) must be held by a quorum of the pods before it is answered, even at consistency
// one, so that whichever pod serves the key's next check-and-set holds it, or asks a pod that
// does, and no second check-and-set of the key answers false. A key that was present (true) needs
// no more than the request asked.
func CheckAndSetLevel(level wire.Consistency, present ...bool) wire.Consistency {
	if level == wire.ConsistencyOne && slices.Contains(present, false) {
		return wire.ConsistencyQuorum
	}
	return level
}

// replicateAdd replicates keys added to f, when there are any. homeEpoch, when not 0, is the epoch
// under which this pod served them as their home (a check-and-set): the peers fence them.
func (s *Service) replicateAdd(ctx context.Context, level wire.Consistency, f *filter.Filter, keys []string, homeEpoch uint64) error {
	if len(keys) == 0 {
		return nil
	}
	op := peer.Op{Kind: peer.OpAdd, Name: f.Name(), Generation: f.Generation(), Keys: keys}
	if homeEpoch != 0 {
		op.HomeEpoch, op.Home = homeEpoch, s.node.Self()
	}
	return s.replicate(ctx, level, op)
}

// replicate sends a write applied here to the peers and waits for the level's acknowledgements;
// without peers there is nothing to wait for.
func (s *Service) replicate(ctx context.Context, level wire.Consistency, op peer.Op) error {
	if !s.node.Replicating() {
		return nil
	}
	err := s.node.Replicate(ctx, op, level)
	if errors.Is(err, peer.ErrFenced) {
		return fenced(err)
	}
	return s.unacknowledged(ctx, op.Name, op.Kind, err)
}

// unacknowledged warns of err, a write's replication, when it fell short, and answers it.
func (s *Service) unacknowledged(ctx context.Context, name, kind string, err error) error {
	if errors.Is(err, replication.ErrReplication) {
		// Each such write is answered 503 and counted (bloomery_replication_write_failures_total);
		// while a peer is down that is every write, so the warning is spaced out.
		s.log.Log(ctx, s.spacedLevel("write not acknowledged"),
			"Write not acknowledged by enough pods (warned at most every 10 s; bloomery_replication_write_failures_total counts them all)",
			"filter", name, "op", kind, "error", err.Error())
	}
	return err
}

// fenced is the answer to a check-and-set that fell short of its level because peers refused it:
// they hold a newer membership, under which this pod is not the home of its values. No false is
// answered for it.
func fenced(err error) error {
	return homeUnavailable("a newer membership moved the home of these values elsewhere: %s", err)
}

// Replicating reports whether this pod has peers, to which its writes go.
func (s *Service) Replicating() bool { return s.node.Replicating() }

// Route is how the filter name of that many partitions is placed under the membership held.
func (s *Service) Route(name string, partitions int) *replication.Route {
	return s.node.Route(name, partitions)
}

// Request is a client's request as it arrived, to forward to a filter's home unchanged.
type Request struct {
	Method, URI, ContentType string
	Body                     []byte
}

// AcceptForwarded checks that this pod can serve, as the home of the filter name, a check-and-set
// or create a peer forwarded. A pod still catching up would answer false for values its peers
// hold; a pod that knows no peers (its membership is behind the sender's) would acknowledge a
// write that no other pod holds; a pod that the membership it holds does not name as the home
// (the sender's is behind, or ahead) is not the one that decides.
func (s *Service) AcceptForwarded(name string) error {
	switch {
	case !s.node.Ready():
		return homeUnavailable("catching up from the peers; not serving as a filter's home yet")
	case !s.node.Replicating():
		return homeUnavailable("this pod knows no peers yet; not serving as a filter's home")
	case s.HomeElsewhere(name):
		return homeUnavailable("this pod is not the home of %q under membership epoch %d", name, s.node.Membership().Epoch)
	}
	return nil
}

// HomeElsewhere reports whether a check-and-set or create of the filter must be sent to another
// pod: its home is a peer. Creates of one name are serialized by its home, so that two pods cannot
// create two incarnations at once; check-and-sets, so that of two concurrent ones of the same new
// value on different pods exactly one answers false.
func (s *Service) HomeElsewhere(name string) bool {
	if !s.node.Replicating() {
		return false
	}
	order, self := s.node.HomeOrder(name)
	return len(order) > 0 && order[0].Name != self
}

// ForwardToHome sends req to the filter's home and returns the answer to give; nil when this pod
// is the home, which then serves it. A home that does not serve it (unreachable, or refusing as
// a home) is answered for with 503 code 13, and no other pod is tried: the home is decided by
// the membership alone, since a pod that stood in on its own could not know which values the
// home had already answered false for.
func (s *Service) ForwardToHome(ctx context.Context, name string, req Request) *client.Answer {
	order, self := s.node.HomeOrder(name)
	if len(order) == 0 || order[0].Name == self {
		return nil
	}
	home := order[0]
	a, err := s.node.Forward(ctx, home, req.Method, req.URI, req.ContentType, req.Body)
	if err != nil {
		s.homeDidNotServe(ctx, name, home.Name, err)
		body, _ := json.Marshal(wire.ErrorBody{Code: wire.CodeHomeUnavailable, //nolint:errchkjson // a string and an int
			Error: fmt.Sprintf("the home of %q, %s, did not serve the request; no other pod serves it in its place: %s", name, home.Name, err)})
		return &client.Answer{Status: http.StatusServiceUnavailable, ContentType: "application/json", Body: body}
	}
	return &a
}

// homeDidNotServe counts a request that its home did not serve, and warns about that home.
func (s *Service) homeDidNotServe(ctx context.Context, filter, home string, err error) {
	s.node.Stats().HomeUnavailable.Add(1)
	s.log.Log(ctx, s.spacedLevel("home unavailable: "+home),
		"Filter's home pod did not serve a request; answered 503 code 13 (warned at most every 10 s per home; bloomery_replication_home_unavailable_total counts them all)",
		"filter", filter, "home", home, "error", err.Error())
}

// warnEvery spaces the warnings of one kind: while a pod is down or restarts, every write (or
// every check-and-set of the filters it is home of) meets the same problem, hundreds a second.
const warnEvery = 10 * time.Second

// spacedLevel is the level of a warning of the given kind: warning at most every warnEvery,
// debug in between.
func (s *Service) spacedLevel(kind string) slog.Level {
	v, _ := s.warned.LoadOrStore(kind, new(atomic.Int64))
	last := v.(*atomic.Int64)
	now, prev := time.Now().UnixNano(), last.Load()
	if now-prev < int64(warnEvery) || !last.CompareAndSwap(prev, now) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// Load applies a piece of a dump to f (filter.Load, journaled) and replicates it as any write:
// its bytes go in ops of at most replication.Node.MaxOpBytes, and level counts the pods that
// acknowledged them all. A head travels behind the filter's create, so that a peer that has not
// yet heard of the create from the filter's home applies the head all the same; a create of an
// incarnation a pod holds changes nothing. Under a placed membership the write goes to the
// writers of its partitions only. The peers get a copy of l's bytes: the caller may reuse them
// once Load returns, while a peer beyond the level's count may still be sent them.
func (s *Service) Load(ctx context.Context, level wire.Consistency, f *filter.Filter, l filter.Load) error {
	if s.node.Replicating() {
		l.Bytes = slices.Clone(l.Bytes)
	}
	var ops []peer.Op
	if l.Head != nil {
		o := f.Options()
		ops = append(ops, peer.Op{Kind: peer.OpCreate, Name: f.Name(), Generation: f.Generation(), Options: &o})
	}
	for _, piece := range splitLoad(l, s.node.MaxOpBytes()) {
		if err := f.Load(piece); err != nil {
			return err
		}
		ops = append(ops, peer.Op{Kind: peer.OpLoad, Name: f.Name(), Generation: f.Generation(), Load: &piece})
	}
	if !s.node.Replicating() {
		return nil
	}
	var writers []string
	if s.node.Placed() {
		rt := s.node.Route(f.Name(), f.Partitions())
		writers = rt.Writers(l.Partition)
		if l.Head != nil {
			writers = nil
			for p := range f.Partitions() {
				for _, w := range rt.Writers(p) {
					if !slices.Contains(writers, w) {
						writers = append(writers, w)
					}
				}
			}
		}
	}
	return s.unacknowledged(ctx, f.Name(), peer.OpLoad, s.node.ReplicateAll(ctx, ops, level, writers))
}

// splitLoad splits a piece's bytes into pieces of at most size bytes, whole words each but the
// last, so that they are ORed a word at a time; a head stays whole.
func splitLoad(l filter.Load, size int) []filter.Load {
	size = max(8, size/8*8)
	if l.Head != nil || len(l.Bytes) <= size {
		return []filter.Load{l}
	}
	pieces := make([]filter.Load, 0, (len(l.Bytes)+size-1)/size)
	for at := 0; at < len(l.Bytes); at += size {
		piece := l
		piece.Offset, piece.Bytes = l.Offset+uint64(at), l.Bytes[at:min(at+size, len(l.Bytes))]
		pieces = append(pieces, piece)
	}
	return pieces
}
