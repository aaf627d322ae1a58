package run

import (
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/persist"
)

// The configuration spells its policies itself, for the operator's sake; each must reach the
// persister as a distinct policy the persister accepts.
func TestLogSyncPolicies(t *testing.T) {
	seen := map[persist.SyncPolicy]config.LogSync{}
	for _, p := range config.LogSyncPolicies {
		cfg := config.Default()
		cfg.LogSync = p
		got := persistOptions(cfg, nil, nil).Sync
		if _, err := persist.ParseSyncPolicy(string(got)); err != nil {
			t.Errorf("logSync %q: %v", p, err)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("logSync %q and %q are both the persister's %q", p, other, got)
		}
		seen[got] = p
	}
}

// The configuration's criteria mirror the persister's; every one must reach it unchanged.
func TestPersistOptionsCriteria(t *testing.T) {
	cfg := config.Default()
	cfg.TriggerPersistenceCriteria = []config.TriggerPersistenceCriterion{{Period: time.Minute, UpdatesMoreThan: 3}, {Period: time.Hour, UpdatesMoreThan: 0}}
	got := persistOptions(cfg, nil, nil).Criteria
	want := []persist.Criterion{{Period: time.Minute, UpdatesMoreThan: 3}, {Period: time.Hour, UpdatesMoreThan: 0}}
	if !slices.Equal(got, want) {
		t.Errorf("criteria = %+v, want %+v", got, want)
	}
}
