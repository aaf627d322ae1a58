package ticktest

import (
	"context"
	"testing"
	"time"
)

// Work runs once per Tick of its period, and Tick returns once it is done; other periods and
// ended loops are left alone.
func TestTickRunsTheWorkOfItsPeriod(t *testing.T) {
	var tk Ticker
	ctx, cancel := context.WithCancel(t.Context())
	var second, minute int // written by the loops, read after Tick: Tick waits for the work
	done := make(chan struct{}, 2)
	go func() { tk.Every(ctx, time.Second, func() { second++ }); done <- struct{}{} }()
	go func() { tk.Every(ctx, time.Minute, func() { minute++ }); done <- struct{}{} }()
	tk.Tick(t, time.Second)
	tk.Tick(t, time.Second)
	tk.Tick(t, time.Minute)
	if second != 2 || minute != 1 {
		t.Errorf("%d and %d runs, want 2 and 1", second, minute)
	}
	cancel()
	<-done
	<-done
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Errorf("Now() = %s, want %s", got, start.Add(time.Minute))
	}
}
