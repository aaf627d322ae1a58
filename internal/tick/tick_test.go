package tick

import (
	"context"
	"testing"
	"time"
)

func TestEveryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() { calls <- struct{}{} })
	}()
	for range 3 {
		<-calls
	}
	cancel()
	<-done
}
