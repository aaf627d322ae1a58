package peer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

const (
	// queueLength bounds the writes waiting for one peer. A peer that falls this far behind is
	// down or far too slow: further writes skip it (failing their wait on it) and anti-entropy
	// repairs it, rather than memory growing without bound.
	queueLength = 1 << 14
	// maxBatchOps bounds one batch to a peer; so does SenderOptions.MaxBatchBytes.
	maxBatchOps = 1024
	// A batch of at least lingerBatch writes waits up to lingerTime for more before it goes.
	lingerBatch = 4
	lingerTime  = 200 * time.Microsecond
)

// encodedSize bounds an op's size in JSON, the larger of the two encodings a pod accepts: a key's
// bytes may each take six (\u00XX), and the fields around them less than 200; a load's bytes
// take four for every three (base64), and each partition of its head less than 100.
func encodedSize(op Op) int64 {
	size := int64(200 + 6*len(op.Name))
	for k := range op.EachKey {
		size += int64(3 + 6*len(k))
	}
	if op.Load != nil {
		size += int64(4*(len(op.Load.Bytes)+2)/3 + 100*len(op.Load.Head))
	}
	return size
}

// ApplyBodyLimit is the largest batch of writes a pod accepts from a peer whose batches are
// bounded by maxBatchBytes: a batch may exceed the bound by one op, which encodes a client's
// request of at most maxBatchBytes in at most six times its size.
func ApplyBodyLimit(maxBatchBytes int64) int64 { return 8 * maxBatchBytes }

// ErrFenced is a peer's refusal of a check-and-set's add (Op.HomeEpoch): the peer was told a newer
// membership, under which the sender is no longer the home of the values.
var ErrFenced = errors.New("refused a home's write")

// pending is a write waiting for one peer; its outcome goes to ack.
type pending struct {
	op  Op
	ack AckTo
}

// AckTo is where the outcome of a write on one peer goes, tagged with that peer's place among the
// peers the write was sent to: a writer counting acknowledgements per peer tells them apart.
type AckTo struct {
	Ch   chan<- Ack
	Peer int
}

// Ack is the outcome of a write on the peer at its place: nil when the peer holds it.
type Ack struct {
	Peer int
	Err  error
}

func (a AckTo) send(err error) { a.Ch <- Ack{a.Peer, err} }

// SenderOptions configure a Sender.
type SenderOptions struct {
	// MaxBatchBytes bounds a batch, as encoded; peers accept batches of up to
	// ApplyBodyLimit(MaxBatchBytes).
	MaxBatchBytes int64
	// Timeout bounds the sending of one batch.
	Timeout time.Duration
	// Sent counts the batches a peer answered; Dropped the writes refused because the queue
	// was full. Both must be set.
	Sent, Dropped *atomic.Int64
}

// Sender sends the writes for one peer, in order, batched: one batch in flight at a time, and
// every write queued meanwhile goes in the next. Order matters: a filter's create reaches the
// peer before the adds to it.
type Sender struct {
	name   string
	link   Peer
	opts   SenderOptions
	queue  chan pending
	quit   chan struct{}
	queued atomic.Int64
}

// NewSender is the sender of the writes for the peer name over link; Run sends them.
func NewSender(name string, link Peer, o SenderOptions) *Sender {
	return &Sender{name: name, link: link, opts: o, queue: make(chan pending, queueLength), quit: make(chan struct{})}
}

// Stop makes Run fail what is queued and return.
func (s *Sender) Stop() { close(s.quit) }

// Queued is the number of writes waiting to be sent: the peer's replication lag.
func (s *Sender) Queued() int64 { return s.queued.Load() }

// Enqueue queues a write whose outcome goes to ack. It never blocks the writer: a full queue
// fails this peer's part of the write at once.
func (s *Sender) Enqueue(op Op, ack AckTo) {
	select {
	case <-s.quit:
		ack.send(fmt.Errorf("%s left the cluster", s.name))
		return
	default:
	}
	select {
	case s.queue <- pending{op, ack}:
		s.queued.Add(1)
	default:
		s.opts.Dropped.Add(1)
		ack.send(fmt.Errorf("%s: %d writes already queued for it", s.name, queueLength))
	}
}

// Run sends what is queued until ctx ends or Stop is called, then fails the rest.
func (s *Sender) Run(ctx context.Context) {
	batch := make([]pending, 0, maxBatchOps)
	linger := time.NewTimer(lingerTime)
	linger.Stop()
	// carried is the write that did not fit in the last batch; it opens the next.
	var carried *pending
	for {
		// Leaving comes first: a select that also had writes waiting would pick at random, and
		// send a departed pod what is queued for it.
		if err := s.stopped(ctx); err != nil {
			_ = s.link.Close()
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
func (s *Sender) fill(batch []pending, size int64, wait <-chan time.Time) ([]pending, int64, *pending) {
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
		if size+next > s.opts.MaxBatchBytes {
			return batch, size, &p
		}
		batch, size = append(batch, p), size+next
	}
	return batch, size, nil
}

// stopped answers why the sender must stop sending, nil while it sends.
func (s *Sender) stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return fmt.Errorf("%s left the cluster", s.name)
	default:
		return nil
	}
}

// fail fails the write p, if any.
func (s *Sender) fail(p *pending, err error) {
	if p != nil {
		s.queued.Add(-1)
		p.ack.send(fmt.Errorf("%s: %w", s.name, err))
	}
}

// drain fails whatever is still queued.
func (s *Sender) drain(err error) {
	for {
		select {
		case p := <-s.queue:
			s.queued.Add(-1)
			p.ack.send(fmt.Errorf("%s: %w", s.name, err))
		default:
			return
		}
	}
}

func (s *Sender) send(ctx context.Context, batch []pending) {
	ops := make([]Op, len(batch))
	for i, p := range batch {
		ops[i] = p.op
	}
	applied, err := s.post(ctx, ops)
	for i, p := range batch {
		switch {
		case err != nil:
			p.ack.send(err)
		case applied[i] == Holds:
			p.ack.send(nil)
		case applied[i] == Fenced:
			p.ack.send(fmt.Errorf("%s %w: it holds a membership of epoch %d or later, under which %s is not the home of these values",
				s.name, ErrFenced, p.op.HomeEpoch, p.op.Home))
		default:
			p.ack.send(fmt.Errorf("%s lacks filter %q (generation %d); anti-entropy will repair it", s.name, p.op.Name, p.op.Generation))
		}
	}
}

func (s *Sender) post(ctx context.Context, ops []Op) ([]Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	applied, err := s.link.Apply(ctx, ops)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	if len(applied) != len(ops) {
		return nil, fmt.Errorf("%s answered %d results for %d writes", s.name, len(applied), len(ops))
	}
	s.opts.Sent.Add(1)
	return applied, nil
}

// Name is the name of the peer the sender sends to.
func (s *Sender) Name() string { return s.name }
