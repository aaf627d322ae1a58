//go:build e2e

package e2e

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// logTailLines is how much of each log a failed test prints.
const logTailLines = 60

// newNamespace creates a namespace of the test's own, so tests run side by side. When the test
// fails, it prints what explains the failure; in every case it deletes the namespace without
// waiting, which stops the test's pods.
func newNamespace(t *testing.T) namespace {
	t.Helper()
	if h.clusterWideOperator() == nil {
		t.Fatal("the cluster-wide operator is not running: TestNamespacedOperator could not start it again")
	}
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	name = fmt.Sprintf("%.40s-%s", name, strings.ToLower(rand.Text()[:5]))
	n := namespace{t: t, name: name}
	n.run("create", "namespace", name)
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpDiagnostics()
		}
		if _, err := n.try("delete", "namespace", name, "--wait=false"); err != nil {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	return n
}

// dumpDiagnostics logs the objects of the namespace, its events, the tail of every pod's log and
// of the operator's.
func (n namespace) dumpDiagnostics() {
	t := n.t
	t.Logf("==== diagnostics of namespace %s (run directory %s)", n.name, h.workDir)
	if out, err := n.try("get", "bloomclusters,bloomfilters,statefulsets,pods,persistentvolumeclaims,services,configmaps,poddisruptionbudgets", "-o", "yaml"); err != nil {
		t.Logf("kubectl get -o yaml: %v", err)
	} else {
		t.Logf("---- objects:\n%s", out)
	}
	if out, err := n.try("get", "events", "--sort-by=.lastTimestamp"); err == nil {
		t.Logf("---- events:\n%s", out)
	}
	n.dumpPodViews()
	files, err := h.agent.LogFiles(n.name)
	if err != nil {
		t.Log(err)
	}
	for _, f := range files {
		t.Logf("---- pod log %s (last %d lines):\n%s", filepath.Base(f), logTailLines, tail(f, logTailLines))
	}
	// The operator serves every test: its lines about this namespace, then its last lines whatever
	// they are about (a crash, a lost connection).
	operatorLog := filepath.Join(h.workDir, h.operatorRun.name+".log")
	t.Logf("---- operator log %s, lines of this namespace (last %d):\n%s", operatorLog, logTailLines, grepTail(operatorLog, n.name, logTailLines))
	t.Logf("---- operator log, last %d lines:\n%s", logTailLines/3, tail(operatorLog, logTailLines/3))
	t.Logf("---- node agent log, lines of this namespace (last %d):\n%s", logTailLines, grepTail(filepath.Join(h.workDir, "node-agent.log"), n.name, logTailLines))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// grepTail returns the last n lines of a file that contain s.
func grepTail(path, s string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, s) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// dumpPodViews logs what each running pod says of itself: its /readyz answer and the membership
// the operator gave it (docs/replication.md, "At 3 a.m.").
func (n namespace) dumpPodViews() {
	out, err := n.try("get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} `+
		`{.spec.containers[0].ports[?(@.name=="http")].containerPort} {.spec.containers[0].ports[?(@.name=="internal")].containerPort} `+
		`{.metadata.labels.app\.kubernetes\.io/instance}{"\n"}{end}`)
	if err != nil {
		n.t.Logf("kubectl get pods: %v", err)
		return
	}
	var views []string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		token, err := n.internalToken(f[4])
		if err != nil {
			views = append(views, fmt.Sprintf("%s: no internal token: %v", f[0], err))
		}
		public := podAPI{t: n.t, pod: f[0], base: "http://" + net.JoinHostPort(f[1], f[2])}
		internal := podAPI{t: n.t, pod: f[0], base: "http://" + net.JoinHostPort(f[1], f[3]), token: token}
		for _, call := range []struct {
			p    podAPI
			path string
		}{{public, "/readyz"}, {internal, "/internal/v1/membership"}} {
			p, path := call.p, call.path
			status, body, err := p.call(http.MethodGet, path, nil)
			if err != nil {
				views = append(views, fmt.Sprintf("%s %s: %v", p.pod, path, err))
			} else {
				views = append(views, fmt.Sprintf("%s %s: %d %s", p.pod, path, status, strings.TrimSpace(string(body))))
			}
		}
	}
	n.t.Logf("---- the pods' own view:\n%s", strings.Join(views, "\n"))
}
