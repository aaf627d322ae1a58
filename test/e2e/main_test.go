//go:build e2e

// Package e2e drives Bloomery end to end, as a user would with kubectl, on a real control plane
// without Docker (docs/architecture.md, "Tests"): etcd, kube-apiserver and kube-controller-manager from the cached
// binaries of hack/envtest-assets.sh, `bloomery operator` as a process, and a node agent
// (./agent) that runs each data-plane pod as a local `bloomery dataplane` process on its own
// address, and, run as root, a service proxy (./serviceproxy) in place of kube-proxy
// (harness_network_test.go). The operator runs as installed: as a ServiceAccount with the RBAC of
// config/rbac, leader election on, its metrics over HTTPS for authorized callers only. Every test
// has a namespace of its own and runs in parallel with the others, but TestNamespacedOperator,
// which runs first and alone. TestPrometheus also runs the prometheus that `make prometheus-tools`
// caches (PROMETHEUS_TOOLS_DIR).
//
//	make test-e2e
//
// E2E_KEEP=1 keeps the run directory (logs, pod directories, kubeconfig) after a passing run; a
// failing run always keeps it. Run with -race (make test-e2e does), the suite builds the operator
// and data plane with the race detector too, and fails if any of them reports a race.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	flag.Parse() // testing's flags, for -test.timeout
	started := time.Now()
	var err error
	h, err = startHarness()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: setting up:", err)
		if h != nil {
			fmt.Fprintln(os.Stderr, "e2e: run directory kept:", h.workDir)
		}
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: control plane, node agent and operator up in %v; run directory %s\n",
		time.Since(started).Round(time.Millisecond), h.workDir)
	stopWatchdog := h.watchdog()
	code := m.Run()
	stopWatchdog()
	stopping := time.Now()
	if err := h.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: tearing down:", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: torn down in %v\n", time.Since(stopping).Round(time.Millisecond))
	if races, err := raceReports(h.workDir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: reading the logs for races:", err)
		code = 1
	} else if len(races) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d processes reported data races:\n%s\n", len(races), strings.Join(races, "\n\n"))
		code = 1
	}
	// The operators run with the RBAC they are installed with: a request it refused fails the run,
	// whichever test it served.
	if denials, err := rbacDenials(h.workDir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: reading the operators' logs for refused requests:", err)
		code = 1
	} else if len(denials) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d operators were refused a request by RBAC:\n%s\n", len(denials), strings.Join(denials, "\n\n"))
		code = 1
	}
	if code == 0 && os.Getenv("E2E_KEEP") == "" {
		_ = os.RemoveAll(h.workDir) // a leftover temporary directory is harmless
	} else {
		fmt.Fprintln(os.Stderr, "e2e: run directory kept:", h.workDir)
	}
	return code
}
