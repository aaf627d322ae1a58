package config

import "testing"

// The operator renders this figure into config.yaml and the data plane derives it itself: one
// function, so that a pod the operator runs and one run by hand give the filters the same memory.
func TestFiltersShareIsFortyPercent(t *testing.T) {
	t.Parallel()
	for limit, want := range map[uint64]uint64{0: 0, 1 << 30: 429_496_729, 256 << 20: 107_374_182} {
		if got := FiltersShare(limit); got != want {
			t.Errorf("FiltersShare(%d) = %d, want %d", limit, got, want)
		}
	}
}
