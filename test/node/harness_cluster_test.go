package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// theCluster is the node every test shares, started once.
var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

// cluster is a running hack/node.sh cluster.
type cluster struct {
	dir   string // its state and logs
	netns string // its network namespace, under /run/netns
}

// nodeCluster returns the shared cluster, starting it and importing the image on first use.
func nodeCluster(t *testing.T) *cluster {
	t.Helper()
	needNode(t)
	clusterOnce.Do(func() { theCluster, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return theCluster
}

func startCluster() (*cluster, error) {
	dir, err := os.MkdirTemp("", "bloomery-node-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	start := time.Now()
	if out, err := c.script("up"); err != nil {
		return c, fmt.Errorf("hack/node.sh up: %w\n%s%s", err, out, c.logTails())
	}
	fmt.Printf("node: the cluster was up in %v\n", time.Since(start).Round(time.Second))
	ns, err := os.ReadFile(filepath.Join(dir, "netns"))
	if err != nil {
		return c, err
	}
	c.netns = strings.TrimSpace(string(ns))
	if out, err := c.script("import", archive); err != nil {
		return c, fmt.Errorf("importing %s: %w\n%s", archive, err, out)
	}
	return c, nil
}

// stopCluster stops the shared cluster, if it runs, and deletes its directory; after a failure
// it keeps the directory and says where, for the logs.
func stopCluster(failed bool) error {
	c := theCluster
	if c == nil {
		return nil
	}
	if failed {
		fmt.Fprint(os.Stderr, c.logTails())
	}
	out, err := c.script("down")
	if err != nil {
		return fmt.Errorf("hack/node.sh down: %w\n%s", err, out)
	}
	if failed {
		fmt.Fprintf(os.Stderr, "node: logs kept in %s/logs\n", c.dir)
		return nil
	}
	return os.RemoveAll(c.dir)
}

// script runs hack/node.sh CMD DIR ARGS....
func (c *cluster) script(cmd string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	full := append([]string{cmd, c.dir}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "node.sh"), full...).CombinedOutput()
	return string(out), err
}

// logTails returns the last lines of each component's log.
func (c *cluster) logTails() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-15):]
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(l), strings.Join(lines, "\n"))
	}
	return b.String()
}

// run runs a program in the cluster's network namespace (kubectl, helm: hack/node.sh exec puts
// the Kubernetes binaries on the PATH and sets KUBECONFIG) and answers its standard output.
func (c *cluster) run(t *testing.T, program string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	full := append([]string{"exec", c.dir, program}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "node.sh"), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", program, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// kubectl runs kubectl and fails the test when it fails.
func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.run(t, "kubectl", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helm runs helm and fails the test when it fails.
func (c *cluster) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.run(t, helmPath(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ctr runs ctr against the node's containerd, in the CRI's namespace.
func (c *cluster) ctr(t *testing.T, args ...string) string {
	t.Helper()
	full := append([]string{"--address", filepath.Join(c.dir, "containerd", "containerd.sock"), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(t.Context(), "ctr", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var errNoNetns = errors.New("the cluster's network namespace is not known")
