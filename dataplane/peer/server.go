package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Host is what a pod serves its peers and the operator: its part of the cluster
// (replication.Node).
type Host interface {
	// Apply applies a batch of a peer's writes and answers per write whether the pod holds it.
	Apply(ops []Op) ([]Outcome, error)
	// CheckRoom answers whether the pod can hold a filter of opts (the engine's error if not).
	CheckRoom(name string, opts filter.Options) error
	Inventory() wire.Inventory
	Membership() wire.Membership
	// SetMembership installs a membership; one older than the pod's is ErrStaleEpoch, one it
	// could not keep on its disk ErrMembershipNotKept.
	SetMembership(m wire.Membership) error
	PlacementStatus() wire.PlacementStatus
}

// ErrStaleEpoch refuses a membership older than the one held.
var ErrStaleEpoch = errors.New("stale membership epoch")

// ErrMembershipNotKept refuses a membership the pod could not keep on its disk.
var ErrMembershipNotKept = errors.New("could not keep the membership")

// ErrBadDump refuses a dump to merge that does not decode.
var ErrBadDump = errors.New("invalid dump")

// ErrDumpTooLarge refuses a dump that would copy more than MaxDumpBytes.
var ErrDumpTooLarge = errors.New("dump larger than maxDumpBytes")

// ServerOptions configure the receiving end.
type ServerOptions struct {
	Host Host
	// Store holds the filters the in-memory Network dumps; the HTTP handlers look filters up
	// themselves.
	Store *filter.Store
	// MaxRequestBytes is the pod's limit of a request body; binary batches of writes may take
	// ApplyBodyLimit of it.
	MaxRequestBytes int64
	// Timeout bounds reading a streamed batch once its first bytes came, and writing its answer;
	// IdleTimeout closes a stream that waits longer for its next batch.
	Timeout, IdleTimeout time.Duration
	// Durable makes the store's current state survive a crash: bits merged from a dump are not
	// in the log. Nil when in memory.
	Durable func() error
	// DumpCopyBytes bounds the bits that the copies of dumps being written hold at once (see
	// Dump); 0 is 64 MiB.
	DumpCopyBytes int64
	// MaxDumpBytes bounds the bits a client's dump copies: a larger one is refused with
	// ErrDumpTooLarge rather than copied (maxDumpBytes). 0 is unbounded.
	MaxDumpBytes int64
}

// Server is the receiving end of the protocol, which the internal port's handlers call: they
// decode and encode HTTP, it applies. The Host's answers are its own (Server embeds it).
type Server struct {
	Host
	opts    ServerOptions
	streams *StreamServer
	// dumps bounds the bits that dumps being written hold copies of (see Dump).
	dumps copyBudget
}

// NewServer is the receiving end over o.Host.
func NewServer(o ServerOptions) *Server {
	if o.Durable == nil {
		o.Durable = func() error { return nil }
	}
	if o.DumpCopyBytes <= 0 {
		o.DumpCopyBytes = 64 << 20
	}
	s := &Server{Host: o.Host, opts: o, dumps: newCopyBudget(o.DumpCopyBytes)}
	s.streams = NewStreamServer(s.ApplyBatch, StreamOptions{
		MaxBatchBytes: int(min(s.BatchLimit(), math.MaxInt32)),
		Timeout:       o.Timeout,
		IdleTimeout:   o.IdleTimeout,
	})
	return s
}

// BatchLimit is the largest binary batch of writes taken (as a request body or a frame).
func (s *Server) BatchLimit() int64 { return ApplyBodyLimit(s.opts.MaxRequestBytes) }

// ApplyBatch applies a batch in the binary form of wire.OpsContentType; an error refuses it.
func (s *Server) ApplyBatch(raw []byte) ([]Outcome, error) {
	ops, err := DecodeOps(raw)
	if err != nil {
		return nil, err
	}
	return s.Apply(ops)
}

// RoomFor answers whether this pod can hold the filters of a batch of creates (binary), as it
// would answer the creates. A batch that is not one of creates is ErrMalformedOps.
func (s *Server) RoomFor(raw []byte) error {
	ops, err := DecodeOps(raw)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if op.Kind != OpCreate || op.Options == nil {
			return fmt.Errorf("%w: a room check takes creates, not %q", ErrMalformedOps, op.Kind)
		}
		if err := s.CheckRoom(op.Name, *op.Options); err != nil {
			return err
		}
	}
	return nil
}

// Upgrade takes a peer's stream of batches over from the HTTP server (StreamServer.Upgrade).
func (s *Server) Upgrade(w http.ResponseWriter, r *http.Request) error {
	return s.streams.Upgrade(w, r)
}

// CloseStreams ends the peers' streams and returns once none is served: the pod is shutting
// down, and what they would apply must not race the final snapshot.
func (s *Server) CloseStreams() { s.streams.Close() }

// Dump writes the partitions only of f in the snapshot's record format to the writer that open
// answers, which it calls once the state is copied: errors before that are the engine's, to
// answer as such. The checksum comes first, so the bits are copied: a client's dump (bounded) of
// more than MaxDumpBytes is ErrDumpTooLarge, copied never, while the cluster's own (catch-up,
// anti-entropy) are not bounded, since refusing them would leave a large filter unrepaired;
// copies share DumpCopyBytes, and a dump that would exceed it waits for others to finish (one
// larger than all of it runs alone).
func (s *Server) Dump(ctx context.Context, f *filter.Filter, only filter.Holds, bounded bool, open func() io.Writer) error {
	size := dumpBytes(f, only)
	if limit := s.opts.MaxDumpBytes; bounded && limit > 0 && size > uint64(limit) {
		return fmt.Errorf("%w: the dump of %q would copy %d bytes of bits, and maxDumpBytes is %d", ErrDumpTooLarge, f.Name(), size, limit)
	}
	release, err := s.dumps.acquire(ctx, size)
	if err != nil {
		return fmt.Errorf("waiting for other dumps to finish: %w", err)
	}
	defer release()
	st, releaseCopy, err := f.CopyState(only)
	if err != nil {
		return err
	}
	defer releaseCopy()
	return persist.WriteDump(open(), st)
}

// Merge ORs a dump into f, which must have the dump's shape; with placed, only the partitions
// this pod holds (the others' owners are not asked). The bits reach the other pods through
// anti-entropy. A dump that does not decode is ErrBadDump.
func (s *Server) Merge(f *filter.Filter, raw []byte, placed bool) (filter.MergeResult, error) {
	st, release, err := persist.ReadDump(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return filter.MergeResult{}, fmt.Errorf("%w: %w", ErrBadDump, err)
	}
	defer release()
	if placed && len(st.Parts) == f.Partitions() {
		for p := range st.Parts {
			if !f.Holds(p) {
				st.Parts[p].Layers = nil
			}
		}
	}
	res, err := f.MergeBits(st)
	if err != nil {
		return res, err
	}
	if res.LayersChanged > 0 {
		if err := s.opts.Durable(); err != nil {
			return res, fmt.Errorf("merged, but not yet durable: %w", err)
		}
	}
	return res, nil
}

// dumpBytes is the bytes of bits a dump of the partitions only of f copies: the sizes of the
// layers its head announces, read without copying a bit.
func dumpBytes(f *filter.Filter, only filter.Holds) uint64 {
	var size uint64
	_ = f.StreamState(nil, only, func(st filter.State) error {
		for _, l := range st.AllLayers() {
			size += uint64(l.WordCount()) * 8
		}
		return errHeadOnly
	}, nil)
	return size
}

// errHeadOnly stops StreamState after the head, which is all dumpBytes reads.
var errHeadOnly = errors.New("head only")

// DumpBytesHeld is the share of DumpCopyBytes that the dumps being written hold.
func (s *Server) DumpBytesHeld() int64 { return s.dumps.held.Load() }

// copyBudget shares a number of bytes between copies: a copy larger than all of it takes all of
// it, and so runs alone.
type copyBudget struct {
	sem   *semaphore.Weighted
	limit int64
	held  *atomic.Int64
}

func newCopyBudget(limit int64) copyBudget {
	return copyBudget{sem: semaphore.NewWeighted(limit), limit: limit, held: new(atomic.Int64)}
}

// acquire waits until a copy of size bytes fits; release gives its share back.
func (b copyBudget) acquire(ctx context.Context, size uint64) (release func(), err error) {
	share := int64(min(size, uint64(b.limit)))
	if err := b.sem.Acquire(ctx, share); err != nil {
		return nil, err
	}
	b.held.Add(share)
	return func() {
		b.held.Add(-share)
		b.sem.Release(share)
	}, nil
}
