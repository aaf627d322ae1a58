package process

import (
	"strings"
	"testing"
)

// raceReport is what the race detector writes when it finds a data race; a process built with
// -race then also exits 66.
const raceReport = "WARNING: DATA RACE"

// noDataRace fails the test if a process's output holds a race report.
func noDataRace(t *testing.T, what, output string) {
	t.Helper()
	if i := strings.Index(output, raceReport); i >= 0 {
		end := min(len(output), i+4000)
		t.Errorf("%s reported a data race:\n%s", what, output[i:end])
	}
}

// buildFlags are the flags the binary under test is built with.
func buildFlags() []string {
	if raceDetector {
		return []string{"-race"}
	}
	return nil
}
