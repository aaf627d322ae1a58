package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
)

// writer adds distinct values to a filter through a Service, one at a time, as an application
// that follows the README's advice does: each add is retried, with a growing pause, after an
// error, up to five attempts. It remembers what was acknowledged, so that a test can check that
// a disruption lost none of it.
type writer struct {
	api    *client.Client
	filter string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	acked  []string
	failed []error // adds that failed every attempt
	tries  int     // attempts that failed and were retried
}

func startWriter(t *testing.T, api *client.Client, filter string) *writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{api: api, filter: filter, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *writer) run(ctx context.Context, prefix string) {
	defer close(w.done)
	for i := 0; ctx.Err() == nil; i++ {
		value := fmt.Sprintf("%s-%d", prefix, i)
		err := w.add(ctx, value)
		w.mu.Lock()
		switch {
		case err == nil:
			w.acked = append(w.acked, value)
		case ctx.Err() == nil:
			w.failed = append(w.failed, fmt.Errorf("%s: %w", value, err))
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// add adds value, with up to five attempts 200 ms, 400 ms, ... apart.
func (w *writer) add(ctx context.Context, value string) error {
	pause := 200 * time.Millisecond
	var errs []error
	for range 5 {
		err := w.api.Set(ctx, w.filter, value)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		w.mu.Lock()
		w.tries++
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause *= 2
	}
	return errors.Join(errs...)
}

// acknowledged returns how many adds were acknowledged so far.
func (w *writer) acknowledged() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// stopAndCheck stops the writer and checks, through the Service, that every acknowledged value
// is in the filter and that no add failed every attempt.
func (w *writer) stopAndCheck(t *testing.T) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("writer: %d adds acknowledged, %d attempts retried, %d adds failed", len(w.acked), w.tries, len(w.failed))
	if len(w.acked) == 0 {
		t.Fatal("the writer had no add acknowledged")
	}
	for _, err := range w.failed {
		t.Errorf("an add failed after five attempts: %v", err)
	}
	lost := 0
	for i := 0; i < len(w.acked); i += 500 {
		batch := w.acked[i:min(i+500, len(w.acked))]
		found, err := w.api.MultiCheck(t.Context(), w.filter, batch)
		if err != nil {
			t.Fatalf("checking the acknowledged values: %v", err)
		}
		for j, ok := range found {
			if !ok {
				lost++
				if lost <= 10 {
					t.Errorf("acknowledged value %q is not in the filter", batch[j])
				}
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged values lost", lost, len(w.acked))
	}
}
