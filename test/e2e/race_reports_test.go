//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The scan for races reads the logs, and only them: the race-enabled binary holds the report's
// text too.
func TestRaceReportsReadLogsOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"bloomery":                    "binary with " + raceReport + " in its strings",
		"node/logs/ns/pod_c.log":      "ok\n",
		"node/logs/ns/pod_racy.log":   "line\n" + raceReport + "\nRead at 0x00c by goroutine 7:\n",
		"operator.log":                "started\n",
		"node/pods/ns/pod/data/x.bin": raceReport,
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := raceReports(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], filepath.Join(dir, "node/logs/ns/pod_racy.log")) || !strings.Contains(found[0], "Read at") {
		t.Errorf("race reports %q, want the racy pod's log alone", found)
	}
}
