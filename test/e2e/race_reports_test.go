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
	writeTree(t, dir, files)
	found, err := raceReports(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], filepath.Join(dir, "node/logs/ns/pod_racy.log")) || !strings.Contains(found[0], "Read at") {
		t.Errorf("race reports %q, want the racy pod's log alone", found)
	}
}

// The scan for RBAC's refusals reads the operators' logs, in both of their formats (client-go's
// klog lines and the operator's JSON), and tells a refusal from a namespace being deleted.
func TestRBACDenialsReadOperatorLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const user = `system:serviceaccount:ns:bloomery-operator`
	files := map[string]string{
		// client-go's event broadcaster, as the leader election's event was refused.
		"operator-namespaced.log": `E1201 17:37:28.515139    7928 event.go:365] "Server rejected event (will not retry!)" err="events is forbidden: User \"` +
			user + `\" cannot create resource \"events\" in API group \"\" in the namespace \"ns\""` + "\n",
		// A reconcile's error, in the operator's JSON.
		"operator.log": `{"level":"info","msg":"started"}` + "\n" +
			`{"level":"error","msg":"Reconciler error","error":"statefulsets.apps \"example\" is forbidden: User \"` + user +
			`\" cannot update resource \"statefulsets\" in API group \"apps\" in the namespace \"ns\""}` + "\n",
		// Not a refusal of RBAC: the namespace is going.
		"operator-other.log": `{"level":"error","msg":"Reconciler error","error":"configmaps \"example-config\" is forbidden: ` +
			`unable to create new content in namespace ns because it is being terminated"}` + "\n",
		// Not an operator's log.
		"node/logs/ns/pod.log": `nodes is forbidden: User "` + user + `" cannot list resource "nodes"` + "\n",
	}
	writeTree(t, dir, files)
	found, err := rbacDenials(dir)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(found, "\n")
	if len(found) != 2 || !strings.Contains(all, "cannot update resource") || !strings.Contains(all, "cannot create resource") {
		t.Errorf("RBAC refusals %q, want operator.log's and operator-namespaced.log's", found)
	}
}

// writeTree writes each file of files, by its path under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
