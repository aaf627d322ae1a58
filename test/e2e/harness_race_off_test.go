//go:build e2e && !race

package e2e

// raceDetector says this test binary runs with the race detector (see harness_race_on_test.go).
const raceDetector = false
