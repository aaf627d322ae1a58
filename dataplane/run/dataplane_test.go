package run

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A token file that cannot be read, or holds a token easy to guess (short, or long but of few
// distinct characters), stops the start with a message naming the key and the estimate.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("  secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "same")
	if err := os.WriteFile(same, []byte(strings.Repeat("a", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	hex31 := filepath.Join(dir, "hex31")
	if err := os.WriteFile(hex31, []byte("0123456789abcdef0123456789abcde"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "internalTokenFile: open " + filepath.Join(dir, "missing") + ": no such file or directory",
		short:                         "internalTokenFile " + short + ": the token is too easy to guess: 6 characters, 5 of them distinct, estimate 14 bits",
		same:                          "internalTokenFile " + same + ": the token is too easy to guess: 64 characters, 1 of them distinct, estimate 0 bits",
		// 31 hexadecimal digits are 124 bits, one short of the 128 that 32 have.
		hex31: "internalTokenFile " + hex31 + ": the token is too easy to guess: 31 characters, 16 of them distinct, estimate 124 bits",
	} {
		cfg := config.Default()
		cfg.InternalTokenFile = path
		if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("New with %s: %v, want %q", path, err, want)
		}
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if token, err := readToken(good); err != nil || token != "0123456789abcdef0123456789abcdef" {
		t.Errorf("readToken = %q, %v; want the token without its newline", token, err)
	}
}
