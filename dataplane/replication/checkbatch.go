package replication

import (
	"context"
	"fmt"
	"sync"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// A client that checks one value at a time through a pod that does not hold the value's
// partition makes that pod send a request to an owner for every check. Checks of one filter
// bound for one peer that arrive while a request of them is under way wait for it and then go
// together, as one multi-check: a check that finds none under way goes at once, and under load
// each request carries what arrived during the one before.

// maxCheckBatchValues bounds the values of checks that go together, as checkBatcher.maxBytes
// bounds their bytes; a larger check goes alone.
const maxCheckBatchValues = 1024

// checkRoute is where checks go together: one filter on one peer. The peer answers them from its
// own copy (they are marked as forwarded), whatever the level of the reads they serve.
type checkRoute struct {
	peer wire.Member
	name string
}

// pendingCheck is one caller's check, waiting to be sent or answered.
type pendingCheck struct {
	ctx     context.Context
	values  []string
	bytes   int // of values
	answers []bool
	err     error
	done    chan struct{}
}

// checkQueue is the checks of one route waiting for the request under way.
type checkQueue struct {
	waiting []*pendingCheck
}

// checkBatcher sends checks of each route one request at a time, each carrying every check that
// waited for it.
type checkBatcher struct {
	// send serves values on the route's peer: one request.
	send func(r checkRoute, values []string) ([]bool, error)
	// maxBytes bounds the bytes of the values of checks that go together.
	maxBytes int

	mu sync.Mutex
	// busy holds the routes with a request under way; the checks that arrive meanwhile wait in
	// its queue.
	busy map[checkRoute]*checkQueue
}

func newCheckBatcher(maxBytes int, send func(r checkRoute, values []string) ([]bool, error)) *checkBatcher {
	return &checkBatcher{send: send, maxBytes: maxBytes, busy: make(map[checkRoute]*checkQueue)}
}

// check answers values of r's filter from r's peer, together with the checks that wait for the
// same route.
func (b *checkBatcher) check(ctx context.Context, r checkRoute, values []string) ([]bool, error) {
	size := 0
	for _, v := range values {
		size += len(v)
	}
	if len(values) >= maxCheckBatchValues || size >= b.maxBytes {
		return b.send(r, values)
	}
	c := &pendingCheck{ctx: ctx, values: values, bytes: size, done: make(chan struct{})}
	b.mu.Lock()
	q, busy := b.busy[r]
	if !busy {
		q = &checkQueue{}
		b.busy[r] = q
	}
	q.waiting = append(q.waiting, c)
	b.mu.Unlock()
	if !busy {
		go b.run(r, q)
	}
	select {
	case <-c.done:
		return c.answers, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run sends r's waiting checks, a request at a time, until none waits.
func (b *checkBatcher) run(r checkRoute, q *checkQueue) {
	for {
		batch := b.next(r, q)
		if len(batch) == 0 {
			return
		}
		b.sendBatch(r, batch)
	}
}

// next takes the checks of q that go in the next request: those still wanted, in the order they
// came, up to maxCheckBatchValues values and maxBytes bytes. With none left, r is no longer busy.
func (b *checkBatcher) next(r checkRoute, q *checkQueue) []*pendingCheck {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*pendingCheck
	values, size, taken := 0, 0, 0
	for _, c := range q.waiting {
		if c.ctx.Err() != nil { // its caller has gone
			taken++
			continue
		}
		if len(batch) > 0 && (values+len(c.values) > maxCheckBatchValues || size+c.bytes > b.maxBytes) {
			break
		}
		batch = append(batch, c)
		values, size = values+len(c.values), size+c.bytes
		taken++
	}
	left := copy(q.waiting, q.waiting[taken:])
	clear(q.waiting[left:]) // the taken checks are their callers' alone
	q.waiting = q.waiting[:left]
	if len(batch) == 0 {
		delete(b.busy, r)
	}
	return batch
}

// sendBatch sends batch's values in one request and hands each check its answers, or the
// request's error. The request is no one caller's: it goes on when the caller that started it
// has gone.
func (b *checkBatcher) sendBatch(r checkRoute, batch []*pendingCheck) {
	var values []string
	for _, c := range batch {
		values = append(values, c.values...)
	}
	answers, err := b.send(r, values)
	if err == nil && len(answers) != len(values) {
		err = fmt.Errorf("%s answered %d of %d values", r.peer.Name, len(answers), len(values))
	}
	for _, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.answers, answers = answers[:len(c.values):len(c.values)], answers[len(c.values):]
		}
		close(c.done)
	}
}
