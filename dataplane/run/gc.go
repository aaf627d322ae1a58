package run

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcHeadroom is how much garbage the collector lets accumulate between two passes while the live
// heap is smaller than that. The bit arrays live outside the Go heap, so the heap holds a few MiB
// of bookkeeping, and with Go's default (a pass whenever the heap has doubled) a loaded data plane
// collected it 50 times a second, re-marking the same objects: 4% of its CPU, and check-and-set
// took about 5% more CPU per request than with a larger goal (docs/performance.md). The price is
// up to this much memory more while requests come in.
const gcHeadroom = 16 << 20

// gcRetune is how often the live heap is looked at again.
const gcRetune = 5 * time.Second

// tuneGC keeps the collector's goal about gcHeadroom above the live heap, until ctx ends. A
// GOGC set in the environment is left alone.
func tuneGC(ctx context.Context) {
	if os.Getenv("GOGC") != "" {
		return
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := -1
	for {
		metrics.Read(live)
		if percent := gcPercentFor(live[0].Value.Uint64()); percent != current {
			debug.SetGCPercent(percent)
			current = percent
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(gcRetune):
		}
	}
}

// gcPercentFor is the GOGC that puts the goal gcHeadroom above a live heap of live bytes, between
// Go's default of 100 and 400, rounded down to a multiple of 50 so that small changes of the live
// heap do not retune it. Above 400 the runtime's floor, 4 MiB times GOGC/100, would pass
// gcHeadroom while the heap is nearly empty.
func gcPercentFor(live uint64) int {
	const most = 400
	if live < gcHeadroom/most*100 {
		return most
	}
	return max(100, int(gcHeadroom*100/live)/50*50)
}
