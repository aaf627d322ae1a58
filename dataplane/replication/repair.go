package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/tick"
)

// Inventory lists what this pod holds: a digest of every live filter and the tombstones.
func (n *Node) Inventory() wire.Inventory {
	now := time.Now()
	tombstones := n.opts.Store.Tombstones()
	inv := wire.Inventory{Filters: []wire.Digest{}, Tombstones: make([]wire.Tombstone, len(tombstones))}
	for i, t := range tombstones {
		inv.Tombstones[i] = wire.Tombstone{Name: t.Name, Generation: t.Generation, DeletedAt: t.DeletedAt}
	}
	n.opts.Store.Range(func(f *filter.Filter) bool {
		if !f.Expired(now) {
			d := f.Digest()
			w := wire.Digest{Name: d.Name, Generation: d.Generation, Layers: d.Layers(), Expiry: wireExpiry(f.ExpiryOverride())}
			if len(d.Parts) > 1 {
				w.Partitions = d.Parts
			}
			inv.Filters = append(inv.Filters, w)
		}
		return true
	})
	return inv
}

// RepairReport says what one repair from one peer changed here.
type RepairReport struct {
	Peer        string
	Filters     int   // filters the peer holds
	Differences int   // filters missing, older or different here, and tombstones new here
	Merged      int   // dumps that changed something
	Bytes       int64 // bytes of the layers they changed
	Pulled      int64 // bytes of the dumps pulled
}

// Repair makes this pod hold at least what peer holds: the peer's tombstones delete what they
// cover here, and every filter whose digest differs is pulled as a dump and OR-merged. With a
// rate (bytes per second) above 0, it paces the dumps it pulls. A filter that fails is skipped
// and reported in the error; the others are still repaired, and the report counts what was.
func (n *Node) Repair(ctx context.Context, peer wire.Member, rate int64) (RepairReport, error) {
	rep := RepairReport{Peer: peer.Name}
	inv, err := n.inventory(ctx, peer)
	if err != nil {
		return rep, err
	}
	rep.Filters = len(inv.Filters)
	store := n.opts.Store
	var errs []error
	for _, t := range inv.Tombstones {
		if err := checkGeneration(t.Generation, time.Now()); err != nil {
			errs = append(errs, fmt.Errorf("refusing %s's tombstone of %q: %w", peer.Name, t.Name, err))
			continue
		}
		if deleted, err := store.DeleteReplica(t.Name, t.Generation); err != nil {
			errs = append(errs, fmt.Errorf("applying %s's tombstone of %q: %w", peer.Name, t.Name, err))
		} else if deleted {
			rep.Differences++
		}
	}
	for _, d := range inv.Filters {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		expiry, err := engineExpiry(d.Expiry)
		if err == nil && expiry.Mode != filter.ExpiryByOptions {
			// A stamp far ahead would win over every later change, as a generation would.
			if err = checkGeneration(expiry.Stamp, time.Now()); err != nil {
				err = fmt.Errorf("stamp: %w", err)
			}
		}
		if err != nil { // the bits are still repaired, by the filter's own expiry
			errs = append(errs, fmt.Errorf("refusing %s's expiry of %q: %w", peer.Name, d.Name, err))
			expiry = filter.Expiry{}
		}
		if n.Placed() {
			n.repairPlaced(ctx, peer, d, expiry, rate, &rep, &errs)
			continue
		}
		if local, ok := store.Lookup(d.Name); ok && sameDigest(local.Digest(), d) {
			if n.convergeExpiry(local, d.Generation, expiry, &errs) {
				rep.Differences++
			}
			continue
		}
		rep.Differences++
		if err := n.repairFilter(ctx, peer, d.Name, nil, expiry, rate, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	n.stats.Differences.Add(int64(rep.Differences))
	return rep, errors.Join(errs...)
}

// repairPlaced repairs one filter of a placed membership from peer's digest of it: this pod takes
// the filter's definition, whether or not it holds any of its partitions, and pulls each
// partition it keeps that peer holds other bits of.
func (n *Node) repairPlaced(ctx context.Context, peer wire.Member, d wire.Digest, expiry filter.Expiry, rate int64, rep *RepairReport, errs *[]error) {
	local, ok := n.opts.Store.Lookup(d.Name)
	if !ok || local.Generation() < d.Generation {
		rep.Differences++
		if err := n.repairFilter(ctx, peer, d.Name, []int{}, expiry, rate, rep); err != nil {
			*errs = append(*errs, err)
			return
		}
		if local, ok = n.opts.Store.Lookup(d.Name); !ok || local.Generation() != d.Generation {
			return // stale, or replaced meanwhile
		}
		n.arrangeFilter(local)
	}
	if local.Generation() != d.Generation {
		return
	}
	if n.convergeExpiry(local, d.Generation, expiry, errs) {
		rep.Differences++
	}
	peerParts := d.Partitions
	if peerParts == nil { // a filter of one partition, which peer holds if it has layers
		peerParts = [][]uint32{d.Layers}
	}
	mine := local.Digest().Parts
	rt := n.Route(d.Name, local.Partitions())
	for p := range min(len(peerParts), len(mine)) {
		if !rt.Keeps(p) || len(peerParts[p]) == 0 || slices.Equal(mine[p], peerParts[p]) {
			continue
		}
		rep.Differences++
		if err := n.repairFilter(ctx, peer, d.Name, []int{p}, expiry, rate, rep); err != nil {
			*errs = append(*errs, err)
		}
	}
}

// repairFilter pulls one filter's dump from peer, of the partitions listed (nil: all the peer
// holds), and merges it. A dump holds no expiry override: the peer's comes from its inventory,
// and goes with the bits.
func (n *Node) repairFilter(ctx context.Context, peer wire.Member, name string, partitions []int, expiry filter.Expiry, rate int64, rep *RepairReport) error {
	start := time.Now()
	st, release, err := n.pullDump(ctx, peer, name, partitions)
	if err != nil {
		return err
	}
	defer release()
	rep.Pulled += stateBytes(st)
	st.Expiry = expiry
	res, err := n.merge(st)
	if err != nil {
		return fmt.Errorf("merging %s's dump of %q: %w", peer.Name, name, err)
	}
	if local, ok := n.opts.Store.Lookup(name); ok && !res.Installed {
		var errs []error
		n.convergeExpiry(local, st.Created.UnixNano(), expiry, &errs)
		if len(errs) > 0 {
			return errs[0]
		}
	}
	if res.LayersChanged > 0 || res.Installed {
		rep.Merged++
		rep.Bytes += int64(res.BytesChanged)
		n.stats.Merges.Add(1)
		n.stats.MergedBytes.Add(int64(res.BytesChanged))
	}
	if rate > 0 {
		return pace(ctx, st, rate, time.Since(start))
	}
	return nil
}

// convergeExpiry takes a peer's expiry override (checked by Repair) of the incarnation at
// generation when it is newer than local's, journaled as a replicated change is, and reports
// whether it did.
func (n *Node) convergeExpiry(local *filter.Filter, generation int64, peer filter.Expiry, errs *[]error) bool {
	if peer.Mode == filter.ExpiryByOptions || local.Generation() != generation {
		return false
	}
	changed, err := local.MergeExpiry(peer)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("taking the expiry of %q: %w", local.Name(), err))
	}
	return changed
}

// wireExpiry is an override as the inventory carries it; nil for none.
func wireExpiry(e filter.Expiry) *wire.ExpiryOverride {
	if e.Mode == filter.ExpiryByOptions {
		return nil
	}
	w := &wire.ExpiryOverride{Mode: e.Mode.String(), Stamp: e.Stamp, Origin: e.Origin}
	if e.Mode == filter.ExpiryAt {
		w.At = e.At.UTC()
	}
	return w
}

// engineExpiry reads an inventory's override back; nil is none.
func engineExpiry(w *wire.ExpiryOverride) (filter.Expiry, error) {
	if w == nil {
		return filter.Expiry{}, nil
	}
	e := filter.Expiry{Stamp: w.Stamp, Origin: w.Origin}
	switch w.Mode {
	case filter.ExpiryAt.String():
		e.Mode, e.At = filter.ExpiryAt, w.At
	case filter.ExpiryNever.String():
		e.Mode = filter.ExpiryNever
	default:
		return e, fmt.Errorf("unknown expiry mode %q", w.Mode)
	}
	return e, e.Validate()
}

func sameDigest(a filter.Digest, b wire.Digest) bool {
	return a.Generation == b.Generation && slices.Equal(a.Layers(), b.Layers)
}

func stateBytes(st filter.State) int64 {
	var size int64
	for _, l := range st.AllLayers() {
		size += int64(len(l.Words)) * 8
	}
	return size
}

// pace waits until a dump of st's size has taken at least size/rate.
func pace(ctx context.Context, st filter.State, rate int64, took time.Duration) error {
	wait := time.Duration(float64(stateBytes(st))/float64(rate)*float64(time.Second)) - took
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pullDump reads one filter's dump from peer, of the partitions listed (nil: all the peer holds);
// release gives its bits back. A dump of a large
// filter takes as long as it takes, but a peer that stops sending for the replication timeout is
// given up on.
func (n *Node) pullDump(ctx context.Context, peer wire.Member, name string, partitions []int) (st filter.State, release func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stalled := time.AfterFunc(n.opts.Timeout, cancel)
	defer stalled.Stop()
	body, size, err := n.peer(peer).Dump(ctx, name, partitions)
	if err != nil {
		return filter.State{}, nil, fmt.Errorf("dump of %q from %s: %w", name, peer.Name, err)
	}
	defer func() { _ = body.Close() }()
	limit := n.opts.MaxDumpBytes
	if size >= 0 {
		limit = min(limit, size)
	}
	st, release, err = persist.ReadDump(progress{body, func() { stalled.Reset(n.opts.Timeout) }}, limit)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: nothing received for %s", err, n.opts.Timeout)
		}
		return filter.State{}, nil, fmt.Errorf("dump of %q from %s: %w", name, peer.Name, err)
	}
	if st.Name != name {
		release()
		return filter.State{}, nil, fmt.Errorf("dump of %q from %s holds filter %q", name, peer.Name, st.Name)
	}
	return st, release, nil
}

// progress calls onRead after every read that returned bytes.
type progress struct {
	r      io.Reader
	onRead func()
}

func (p progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.onRead()
	}
	return n, err
}

func (n *Node) inventory(ctx context.Context, peer wire.Member) (wire.Inventory, error) {
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	inv, err := n.peer(peer).Inventory(ctx)
	if err != nil {
		return inv, fmt.Errorf("%s: %w", peer.Name, err)
	}
	return inv, nil
}

// catchUp repairs from every peer that answers, without pacing, then makes the merged bits
// durable. Peers that do not answer are skipped: they are down or starting, and what they alone
// hold reaches this pod through anti-entropy once they are back.
func (n *Node) catchUp(ctx context.Context) {
	start := time.Now()
	var merged, reached int
	var bytes, pulled int64
	for _, peer := range n.members.Peers() {
		rep, err := n.Repair(ctx, peer, 0)
		merged += rep.Merged
		bytes += rep.Bytes
		pulled += rep.Pulled
		if err != nil {
			n.opts.Log.Warn("Catch-up from a peer was incomplete; anti-entropy repairs the rest", "peer", peer.Name,
				"merged", rep.Merged, "error", err.Error())
			continue
		}
		reached++
	}
	n.makeDurable(merged)
	n.opts.Log.Info("Caught up", "peers", len(n.members.Peers()), "reached", reached, "merged", merged, "bytesChanged", bytes, "bytesPulled", pulled, "duration", time.Since(start).String())
}

func (n *Node) makeDurable(merged int) {
	if merged == 0 || n.opts.Durable == nil {
		return
	}
	if err := n.opts.Durable(); err != nil {
		n.opts.Log.Error("Could not make merged filters durable; a restart catches up again", "error", err.Error())
	}
}

// Run waits for the first membership, catches up, becomes ready, then runs anti-entropy every
// interval until ctx ends. Call it once the filters were recovered from disk.
func (n *Node) Run(ctx context.Context) {
	for {
		known, changed := n.members.Known()
		if known {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
	n.arrange() // the filters recovered hold what the membership places here, no more
	n.catchUp(ctx)
	n.caughtUp.Store(true)
	go n.watchMoves(ctx)
	if n.opts.AntiEntropyInterval <= 0 {
		return
	}
	tick.Every(ctx, n.opts.AntiEntropyInterval, func() { n.antiEntropy(ctx) })
}

// antiEntropy repairs from one peer chosen at random. Every pod pulls on its own timer, so a
// write one pod missed is found from whichever side holds it.
func (n *Node) antiEntropy(ctx context.Context) {
	peers := n.members.Peers()
	if len(peers) == 0 {
		return
	}
	peer := peers[rand.IntN(len(peers))]
	rep, err := n.Repair(ctx, peer, n.opts.AntiEntropyBytesPerSecond)
	n.stats.AntiEntropyPasses.Add(1)
	n.makeDurable(rep.Merged)
	if err != nil {
		n.opts.Log.Warn("Anti-entropy pass was incomplete", "peer", peer.Name, "merged", rep.Merged, "error", err.Error())
		return
	}
	if rep.Differences > 0 {
		n.opts.Log.Info("Anti-entropy repaired differences", "peer", rep.Peer, "filters", rep.Filters,
			"differences", rep.Differences, "merged", rep.Merged, "bytesChanged", rep.Bytes, "bytesPulled", rep.Pulled)
	}
}
