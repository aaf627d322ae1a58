package run

import (
	"log/slog"
	"os"
	"path/filepath"
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

// A token file that cannot be read, or holds a token short enough to guess, stops the start with
// a message naming the key.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("  secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "internalTokenFile: open " + filepath.Join(dir, "missing") + ": no such file or directory",
		short:                         "internalTokenFile " + short + ": the token must have at least 16 characters, it has 6",
	} {
		cfg := config.Default()
		cfg.InternalTokenFile = path
		if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || err.Error() != want {
			t.Errorf("New with %s: %v, want %q", path, err, want)
		}
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if token, err := readToken(good); err != nil || token != "0123456789abcdef0123" {
		t.Errorf("readToken = %q, %v; want the token without its newline", token, err)
	}
}
