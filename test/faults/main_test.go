// Package faults injects faults into a cluster of real data-plane processes, in the spirit of
// Jepsen: each pod runs in a network namespace of its own, joined to the others by a bridge in a
// namespace of the test's; clients record a history of check-and-sets, sets and checks through
// every pod at every level while the test partitions pods with iptables, pauses them with SIGSTOP
// and kills them with SIGKILL; a checker (test/history) then reads the history for broken
// promises (exactly one false per new value, no false negatives where the levels promise none).
// It needs root, for the namespaces and iptables.
package faults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the bloomery binary the pods run, built once for the package.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("test/faults: every test runs the bloomery binary, which -short leaves out")
		return 0
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/faults: needs root, for network namespaces and iptables; run as root (make test-faults)")
		return 1
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "test/faults: needs %s (Debian: iproute2, iptables): %v\n", tool, err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "bloomery-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binary = filepath.Join(dir, "bloomery")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", binary, "github.com/bloomery/bloomery")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binary:", err)
		return 1
	}
	return m.Run()
}
