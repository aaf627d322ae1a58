package wire

import (
	"strings"
	"testing"
)

func TestConsistencyCount(t *testing.T) {
	for _, tc := range []struct {
		level Consistency
		n     int
		want  int
	}{
		{ConsistencyOne, 3, 1}, {ConsistencyQuorum, 1, 1}, {ConsistencyQuorum, 2, 2},
		{ConsistencyQuorum, 3, 2}, {ConsistencyQuorum, 4, 3}, {ConsistencyQuorum, 5, 3}, {ConsistencyAll, 5, 5},
	} {
		if got := tc.level.Count(tc.n); got != tc.want {
			t.Errorf("%s of %d = %d, want %d", tc.level, tc.n, got, tc.want)
		}
	}
	if _, err := ParseConsistency("most", ConsistencyQuorum); err == nil || !strings.Contains(err.Error(), `"most"`) {
		t.Errorf("an unknown level: %v", err)
	}
	if got, _ := ParseConsistency("", ConsistencyAll); got != ConsistencyAll {
		t.Errorf("no level = %s, want the default", got)
	}
}
