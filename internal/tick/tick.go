// Package tick runs the data plane's periodic work: flushes, snapshots, anti-entropy, purges.
package tick

import (
	"context"
	"time"
)

// Func is the signature of Every. Loops that take a Func in place of calling Every let their tests
// run the work when they choose (ticktest.Ticker) rather than wait for the period to pass.
type Func func(ctx context.Context, period time.Duration, do func())

// Every calls do every period until ctx ends; the first call is one period from now. A call that
// takes longer than the period delays the next instead of piling up.
func Every(ctx context.Context, period time.Duration, do func()) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			do()
		}
	}
}
