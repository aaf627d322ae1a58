package writes

import (
	"log/slog"
	"testing"
)

// A warning that every request of an outage would repeat is a warning once per kind and period,
// and debug in between.
func TestSpacedLevel(t *testing.T) {
	s := &Service{}
	if got := s.spacedLevel("peer down"); got != slog.LevelWarn {
		t.Fatalf("first warning of a kind: %v, want WARN", got)
	}
	for range 3 {
		if got := s.spacedLevel("peer down"); got != slog.LevelDebug {
			t.Fatalf("the same kind again at once: %v, want DEBUG", got)
		}
	}
	if got := s.spacedLevel("another kind"); got != slog.LevelWarn {
		t.Fatalf("first warning of another kind: %v, want WARN", got)
	}
}
