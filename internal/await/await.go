// Package await is the one way tests wait: they poll a condition until it holds or a timeout
// passes, rather than sleep for a fixed time that is too long on a fast machine and too short on
// a loaded one.
package await

import (
	"testing"
	"time"
)

// firstPause is the first pause between two looks: short, so that a condition that holds a moment
// after the first look is seen at once.
const firstPause = time.Millisecond

// pauseShare caps the pause at the timeout divided by it, so that an expensive condition (a
// kubectl call in the end-to-end suite, with minutes to hold) is not run many times a second,
// while a short timeout still gets a hundred looks and a condition is seen soon after it holds.
const pauseShare = 100

// Until calls cond until it answers true, or fails the test after timeout with what and the
// detail of the last look. The pause between looks starts at a millisecond and doubles, up to a
// hundredth of the timeout. cond runs on the calling goroutine, and may call t.Fatal.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	maxPause := max(timeout/pauseShare, firstPause)
	pause := firstPause
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, timeout, detail)
			return // a fake testing.TB's Fatalf returns
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, maxPause)
	}
}

// True is Until for a condition with nothing to say when it does not hold.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, timeout, what, func() (bool, string) { return cond(), "false" })
}
