// Package ticktest stands in for tick.Every in tests, so that periodic work runs when the test
// says a period has passed instead of when the wall clock does.
package ticktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Ticker is a tick.Func whose periods pass only when Tick says so. The zero value is ready.
type Ticker struct {
	mu    sync.Mutex
	loops map[time.Duration][]*loop
	// changed is closed, and replaced, whenever a loop starts.
	changed chan struct{}
}

// loop is one call of Every.
type loop struct {
	ctx   context.Context
	ticks chan chan struct{} // a tick carries the channel closed once the work is done
}

// Every has tick.Every's signature: it runs do once for every Tick of period until ctx ends. As
// with tick.Every, do runs in Every's goroutine and one call at a time.
func (tk *Ticker) Every(ctx context.Context, period time.Duration, do func()) {
	l := &loop{ctx: ctx, ticks: make(chan chan struct{})}
	tk.mu.Lock()
	if tk.loops == nil {
		tk.loops = make(map[time.Duration][]*loop)
	}
	tk.loops[period] = append(tk.loops[period], l)
	tk.notifyLocked()
	tk.mu.Unlock()
	defer func() {
		tk.mu.Lock()
		defer tk.mu.Unlock()
		loops := tk.loops[period]
		for i, other := range loops {
			if other == l {
				tk.loops[period] = append(loops[:i:i], loops[i+1:]...)
				break
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case done := <-l.ticks:
			do()
			close(done)
		}
	}
}

func (tk *Ticker) notifyLocked() {
	if tk.changed != nil {
		close(tk.changed)
	}
	tk.changed = make(chan struct{})
}

// Tick lets period pass once for the loops running at that period, and returns when each has
// done its work. Loops start in goroutines of their own, so Tick waits up to 10 seconds for the
// first to run at period, and fails the test if none does.
func (tk *Ticker) Tick(t testing.TB, period time.Duration) {
	t.Helper()
	ctx := t.Context()
	loops, err := tk.running(ctx, period)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loops {
		done := make(chan struct{})
		select {
		case l.ticks <- done:
		case <-l.ctx.Done(): // the loop ended meanwhile: it has no work to do
			continue
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// running waits until at least one loop runs at period and returns those that do.
func (tk *Ticker) running(ctx context.Context, period time.Duration) ([]*loop, error) {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		tk.mu.Lock()
		loops := make([]*loop, 0, len(tk.loops[period]))
		for _, l := range tk.loops[period] {
			if l.ctx.Err() == nil {
				loops = append(loops, l)
			}
		}
		if tk.changed == nil {
			tk.changed = make(chan struct{})
		}
		changed := tk.changed
		tk.mu.Unlock()
		if len(loops) > 0 {
			return loops, nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return nil, fmt.Errorf("no loop runs every %s", period)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Clock is a settable time source, safe for concurrent use. The zero value is not ready: use
// NewClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time; pass the method value as a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
