package await_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// fakeTB records a failure instead of ending the test, so that the failure itself can be tested.
type fakeTB struct {
	testing.TB
	failed  atomic.Bool
	message string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed.Store(true)
	f.message = fmt.Sprintf(format, args...)
}

// A condition that holds at the first look returns at once, without a pause.
func TestUntilReturnsAsSoonAsTheConditionHolds(t *testing.T) {
	var looks int
	start := time.Now()
	await.Until(t, time.Hour, "at once", func() (bool, string) { looks++; return true, "" })
	if looks != 1 {
		t.Errorf("%d looks at a condition that held at the first, want 1", looks)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v for a condition that held at the first look", d)
	}

	// One that holds at the fifth look is seen after about 1+2+4+8 ms of pauses, not after a
	// hundredth of the hour's timeout.
	looks = 0
	start = time.Now()
	await.True(t, time.Hour, "the fifth look", func() bool { looks++; return looks == 5 })
	if looks != 5 {
		t.Errorf("%d looks, want 5", looks)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v for a condition that held at the fifth look", d)
	}
}

// On timeout the test fails with what was awaited, the timeout and the last detail seen.
func TestUntilFailsAfterTheTimeout(t *testing.T) {
	tb := &fakeTB{TB: t}
	var looks int
	start := time.Now()
	await.Until(tb, 50*time.Millisecond, "the answer", func() (bool, string) {
		looks++
		return false, fmt.Sprint("look ", looks)
	})
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the timeout of 50ms", d)
	}
	if !tb.failed.Load() {
		t.Fatal("the test did not fail")
	}
	if want := fmt.Sprintf("the answer: not within 50ms; last seen: look %d", looks); tb.message != want {
		t.Errorf("message %q, want %q", tb.message, want)
	}
	if looks < 3 {
		t.Errorf("%d looks within 50ms, want several", looks)
	}

	tb = &fakeTB{TB: t}
	await.True(tb, 10*time.Millisecond, "never", func() bool { return false })
	if want := "never: not within 10ms; last seen: false"; tb.message != want {
		t.Errorf("True's message %q, want %q", tb.message, want)
	}
}
