//go:build e2e && race

package e2e

// raceDetector says this test binary runs with the race detector: the product's binary is then
// built with it too, so that a race in a process the tests start fails them.
const raceDetector = true
