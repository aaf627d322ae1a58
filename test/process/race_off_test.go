//go:build !race

package process

// raceDetector says this test binary runs with the race detector (see race_on_test.go).
const raceDetector = false
