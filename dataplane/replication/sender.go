package replication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/batchstream"
	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

const (
	// queueLength bounds the writes waiting for one peer. A peer that falls this far behind is
	// down or far too slow: further writes skip it (failing their wait on it) and anti-entropy
	// repairs it, rather than memory growing without bound.
	queueLength = 1 << 14
	// maxBatchOps bounds one request to a peer; so does Options.MaxBatchBytes.
	maxBatchOps = 1024
	// A batch of at least lingerBatch writes waits up to lingerTime for more before it goes.
	lingerBatch = 4
	lingerTime  = 200 * time.Microsecond
)

// encodedSize bounds an op's size in JSON, the larger of the two encodings a pod accepts: a key's
// bytes may each take six (\u00XX), and the fields around them less than 200.
func encodedSize(op Op) int64 {
	size := int64(200 + 6*len(op.Name))
	for k := range op.EachKey {
		size += int64(3 + 6*len(k))
	}
	return size
}

// pending is a write waiting for one peer; its outcome goes to ack.
type pending struct {
	op  Op
	ack ackTo
}

// ackTo is where the outcome of a write on one peer goes, tagged with that peer's place among the
// peers the write was sent to: a writer counting acknowledgements per peer tells them apart.
type ackTo struct {
	ch   chan<- ack
	peer int
}

// ack is the outcome of a write on the peer at its place.
type ack struct {
	peer int
	err  error
}

func (a ackTo) send(err error) { a.ch <- ack{a.peer, err} }

// sender sends the writes for one peer, in order, batched: one request in flight at a time, and
// every write queued meanwhile goes in the next. Order matters: a filter's create reaches the
// peer before the adds to it.
type sender struct {
	node   *Node
	peer   wire.Member
	client *client.Client
	queue  chan pending
	quit   chan struct{}
	queued atomic.Int64

	// Owned by run: the stream to the peer (nil until the next batch opens one), the time until
	// which the peer is sent requests instead, and the buffer batches are framed in.
	stream     *batchstream.Conn
	streamless time.Time
	frame      []byte
}

func newSender(n *Node, peer wire.Member) *sender {
	return &sender{node: n, peer: peer, client: n.newClient(peer), queue: make(chan pending, queueLength), quit: make(chan struct{})}
}

func (s *sender) stop() { close(s.quit) }

// enqueue never blocks the writer: a full queue fails this peer's part of the write at once.
func (s *sender) enqueue(op Op, ack ackTo) {
	select {
	case <-s.quit:
		ack.send(fmt.Errorf("%s left the cluster", s.peer.Name))
		return
	default:
	}
	select {
	case s.queue <- pending{op, ack}:
		s.queued.Add(1)
	default:
		s.node.stats.DroppedOps.Add(1)
		ack.send(fmt.Errorf("%s: %d writes already queued for it", s.peer.Name, queueLength))
	}
}

func (s *sender) run(ctx context.Context) {
	batch := make([]pending, 0, maxBatchOps)
	linger := time.NewTimer(lingerTime)
	linger.Stop()
	// carried is the write that did not fit in the last batch; it opens the next.
	var carried *pending
	for {
		// Leaving comes first: a select that also had writes waiting would pick at random, and
		// send a departed pod what is queued for it.
		if err := s.stopped(ctx); err != nil {
			s.closeStream()
			s.fail(carried, err)
			s.drain(err)
			return
		}
		batch = batch[:0]
		if carried != nil {
			batch = append(batch, *carried)
		} else {
			select {
			case <-ctx.Done():
				continue
			case <-s.quit:
				continue
			case p := <-s.queue:
				batch = append(batch, p)
			}
		}
		// The first write goes even if it alone is over the budget: the peer's limit for
		// batches is above any write a client's request can make.
		size := encodedSize(batch[0].op)
		batch, size, carried = s.fill(batch, size, nil)
		if carried == nil && len(batch) >= lingerBatch && len(batch) < maxBatchOps {
			// A batch that many writes were waiting for is a sign of more coming: waiting a
			// moment for them makes fewer, larger batches, and each costs both pods a request.
			linger.Reset(lingerTime)
			batch, _, carried = s.fill(batch, size, linger.C)
			linger.Stop()
		}
		s.queued.Add(-int64(len(batch)))
		s.send(ctx, batch)
	}
}

// fill adds the writes queued to batch, up to maxBatchOps and the batch budget, and answers it,
// its size and the write that did not fit, if one did not. With wait nil it takes what is
// queued now; else it waits for more until wait fires.
func (s *sender) fill(batch []pending, size int64, wait <-chan time.Time) ([]pending, int64, *pending) {
	for len(batch) < maxBatchOps {
		var p pending
		if wait == nil {
			select {
			case p = <-s.queue:
			default:
				return batch, size, nil
			}
		} else {
			select {
			case p = <-s.queue:
			case <-wait:
				return batch, size, nil
			}
		}
		next := encodedSize(p.op)
		if size+next > s.node.opts.MaxBatchBytes {
			return batch, size, &p
		}
		batch, size = append(batch, p), size+next
	}
	return batch, size, nil
}

// stopped answers why the sender must stop sending, nil while it sends.
func (s *sender) stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return fmt.Errorf("%s left the cluster", s.peer.Name)
	default:
		return nil
	}
}

// fail fails the write p, if any.
func (s *sender) fail(p *pending, err error) {
	if p != nil {
		s.queued.Add(-1)
		p.ack.send(fmt.Errorf("%s: %w", s.peer.Name, err))
	}
}

// drain fails whatever is still queued.
func (s *sender) drain(err error) {
	for {
		select {
		case p := <-s.queue:
			s.queued.Add(-1)
			p.ack.send(fmt.Errorf("%s: %w", s.peer.Name, err))
		default:
			return
		}
	}
}

func (s *sender) send(ctx context.Context, batch []pending) {
	ops := make([]Op, len(batch))
	for i, p := range batch {
		ops[i] = p.op
	}
	applied, err := s.post(ctx, ops)
	for i, p := range batch {
		switch {
		case err != nil:
			p.ack.send(err)
		case !applied[i]:
			p.ack.send(fmt.Errorf("%s lacks filter %q (generation %d); anti-entropy will repair it", s.peer.Name, p.op.Name, p.op.Generation))
		default:
			p.ack.send(nil)
		}
	}
}

func (s *sender) post(ctx context.Context, ops []Op) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.node.opts.Timeout)
	defer cancel()
	applied, err := s.apply(ctx, ops)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.peer.Name, err)
	}
	if len(applied) != len(ops) {
		return nil, fmt.Errorf("%s answered %d results for %d writes", s.peer.Name, len(applied), len(ops))
	}
	s.node.stats.SentBatches.Add(1)
	return applied, nil
}

// apply sends ops on the stream to the peer, or as a request when the peer takes none.
func (s *sender) apply(ctx context.Context, ops []Op) ([]bool, error) {
	applied, again, err := s.applyOnce(ctx, ops)
	if again {
		// The stream waited since its last batch, and the peer may have closed it meanwhile
		// (restarted, or closed it idle): the batch goes once more. Writes are idempotent, so
		// one that did arrive the first time is only applied twice.
		applied, _, err = s.applyOnce(ctx, ops)
	}
	return applied, err
}

// applyOnce is apply without trying again; again reports a failure on a stream that waited since
// its last batch.
func (s *sender) applyOnce(ctx context.Context, ops []Op) (applied []bool, again bool, err error) {
	stream, err := s.openStream(ctx)
	if err != nil {
		return nil, false, err
	}
	if stream == nil {
		// A buffer of its own per batch: the transport may still read a body after the answer
		// came (when the peer answers before reading it all).
		applied, err := s.client.Apply(ctx, AppendOps(make([]byte, 0, encodedSizeHint(ops)), ops))
		return applied, false, err
	}
	s.frame = AppendOps(append(s.frame[:0], make([]byte, batchstream.HeaderSize)...), ops)
	defer s.trimFrame()
	waited := stream.Used()
	applied, err = stream.Apply(ctx, s.frame)
	if err == nil {
		s.node.stats.StreamedBatches.Add(1)
	}
	if err == nil || batchstream.IsRefused(err) {
		return applied, false, err
	}
	s.stream = nil
	return nil, waited && ctx.Err() == nil, err
}

// streamRetry is how long a sender sends requests to a peer that takes no stream before it asks
// again: a pod of an earlier version, which the rollout replaces in minutes.
const streamRetry = time.Minute

// openStream answers the stream to the peer, opened now if need be, or nil when the peer takes
// batches as requests only.
func (s *sender) openStream(ctx context.Context) (*batchstream.Conn, error) {
	if s.stream != nil || time.Now().Before(s.streamless) {
		return s.stream, nil
	}
	conn, err := s.client.Upgrade(ctx, wire.ApplyStreamPath, wire.ApplyStreamProtocol)
	if err == nil {
		s.stream = batchstream.NewConn(conn)
		return s.stream, nil
	}
	apiErr, answered := errors.AsType[*client.Error](err)
	if !answered {
		return nil, err // unreachable: a request would not reach it either
	}
	// The batch goes as a request, which a recovering peer (503) refuses as it refused the
	// stream; a peer that does not know streams is sent requests for a while.
	if apiErr.Status != http.StatusServiceUnavailable {
		s.streamless = time.Now().Add(streamRetry)
		s.node.opts.Log.Info("Peer takes no stream of writes: sending them as requests", "peer", s.peer.Name,
			"retry", streamRetry.String(), "answer", err.Error())
	}
	return nil, nil
}

// trimFrame lets go of a batch's buffer that a burst made large: each peer's sender keeps its own.
func (s *sender) trimFrame() {
	if cap(s.frame) > maxKeptFrame {
		s.frame = nil
	}
}

// maxKeptFrame is the largest buffer a sender keeps from one batch to the next.
const maxKeptFrame = 1 << 20

// closeStream closes the stream to the peer, if one is open.
func (s *sender) closeStream() {
	if s.stream != nil {
		_ = s.stream.Close()
		s.stream = nil
	}
}
