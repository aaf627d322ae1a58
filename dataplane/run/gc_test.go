package run

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentKeepsTheHeadroom(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400},
		{1 << 20, 400},
		{4 << 20, 400},
		{5 << 20, 300}, // 320 rounded down
		{8 << 20, 200},
		{16 << 20, 100},
		{1 << 30, 100}, // a large live heap keeps Go's default
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("live heap of %d bytes: GOGC %d, want %d", c.live, got, c.want)
		}
	}
}

func TestTuneGCSetsThePercentUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	run := func() int {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		tuneGC(ctx)
		return debug.SetGCPercent(100)
	}
	t.Setenv("GOGC", "100")
	if got := run(); got != 100 {
		t.Errorf("with GOGC set in the environment, the percent became %d, want it left at 100", got)
	}
	t.Setenv("GOGC", "")
	if got := run(); got <= 100 {
		t.Errorf("the percent stayed %d for a test binary's small heap, want it raised", got)
	}
}
