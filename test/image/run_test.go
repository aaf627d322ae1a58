package image

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/await"
)

// podmanOnce loads the archive, once, into a podman storage of the package's own.
var (
	podmanOnce sync.Once
	podmanDir  string
	podmanErr  error
)

// podman runs podman on the package's storage and answers its output; it fails the test when
// podman fails.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := tryPodman(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryPodman is podman, answering podman's failure instead.
func tryPodman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	podmanOnce.Do(setupPodman)
	if podmanErr != nil {
		t.Fatal(podmanErr)
	}
	return runPodman(t.Context(), args...)
}

func runPodman(ctx context.Context, args ...string) (string, error) {
	// The storage and state of these tests alone, with the vfs driver, which works on any file
	// system; runc and cgroupfs, which work with this kind of host's cgroup layout (crun and the
	// systemd driver may not).
	args = append([]string{"--root", filepath.Join(podmanDir, "root"), "--runroot", filepath.Join(podmanDir, "run"),
		"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file"}, args...)
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(podmanDir, "containers.conf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// setupPodman writes the configuration and loads the image.
func setupPodman() {
	dir, err := os.MkdirTemp("", "bloomery-image-podman-")
	if err != nil {
		podmanErr = err
		return
	}
	podmanDir = dir
	// podman's default ulimits raise the open files' limit to 1048576, which fails on a machine
	// whose hard limit is lower: the containers keep the limits podman runs with instead.
	conf := "[containers]\ndefault_ulimits = []\n"
	if err := os.WriteFile(filepath.Join(dir, "containers.conf"), []byte(conf), 0o644); err != nil {
		podmanErr = err
		return
	}
	if _, err := runPodman(context.Background(), "load", "--quiet", "--input", archive); err != nil {
		podmanErr = fmt.Errorf("loading %s: %w", archive, err)
	}
}

// TestMain removes the package's podman storage after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if podmanDir != "" {
		_, _ = runPodman(context.Background(), "rm", "--all", "--force")
		_, _ = runPodman(context.Background(), "rmi", "--all", "--force")
		_ = os.RemoveAll(podmanDir)
	}
	os.Exit(code)
}

// TestVersion runs `bloomery version` in a container.
func TestVersion(t *testing.T) {
	needImage(t, "podman")
	out := podman(t, "run", "--rm", "--read-only", "--network", "none", name, "version")
	if !strings.Contains(out, version) {
		t.Errorf("`bloomery version` printed %q, want it to name %s", out, version)
	}
}

// container is a data plane running in a container of the image, on the host's network.
type container struct {
	id     string
	pid    int // the container's process, as the host sees it
	client *client.Client
}

// startDataPlane starts a data plane in a container as a Kubernetes pod of the operator's would
// run: the image's user, a read-only root file system, no capabilities, no new privileges, and a
// data directory mounted from dataDir. It listens on free loopback ports of the host.
func startDataPlane(t *testing.T, dataDir string) *container {
	t.Helper()
	port, ops := freePort(t), freePort(t)
	id := podman(t, "run", "--detach", "--read-only", "--read-only-tmpfs=false", "--cap-drop", "all",
		"--security-opt", "no-new-privileges", "--network", "host",
		"--volume", dataDir+":/data", name,
		"dataplane", "--bind-address", "127.0.0.1", "-p", strconv.Itoa(port), "--ops-port", strconv.Itoa(ops),
		"--data-dir", "/data", "--log-sync", "no", "--log-format", "json")
	t.Cleanup(func() { _, _ = runPodman(context.Background(), "rm", "--force", id) })
	c := &container{id: id, client: client.New(fmt.Sprintf("http://127.0.0.1:%d", port))}
	var err error
	if c.pid, err = strconv.Atoi(podman(t, "inspect", "--format", "{{.State.Pid}}", id)); err != nil || c.pid <= 0 {
		t.Fatalf("the container's pid: %v (%d)\n%s", err, c.pid, c.logs(t))
	}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", ops)
	await.Until(t, 30*time.Second, "the data plane in the container ready", func() (bool, string) {
		resp, err := http.Get(ready) //nolint:noctx // a probe of loopback, bounded by Until
		if err != nil {
			return false, err.Error() + "\n" + c.logs(t)
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status + "\n" + c.logs(t)
	})
	return c
}

func (c *container) logs(t *testing.T) string {
	t.Helper()
	out, _ := tryPodman(t, "logs", c.id)
	return out
}

// freePort returns a loopback port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// procStatus returns the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	fields := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		fields[k] = strings.Join(strings.Fields(v), " ")
	}
	return fields
}

// dataDir returns a directory for a container's /data, owned by the image's user.
func dataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRunsAsNonRootReadOnly starts a data plane as a pod would run it and checks, from the
// host, that its process is uid 65532, PID 1 of its container, with a read-only root file
// system, and that it serves.
func TestRunsAsNonRootReadOnly(t *testing.T) {
	needImage(t, "podman")
	c := startDataPlane(t, dataDir(t))
	status := procStatus(t, c.pid)
	if status["Uid"] != "65532 65532 65532 65532" || status["Gid"] != "65532 65532 65532 65532" {
		t.Errorf("the process runs as uid %q, gid %q; want 65532 throughout", status["Uid"], status["Gid"])
	}
	if ns := strings.Fields(status["NSpid"]); len(ns) < 2 || ns[len(ns)-1] != "1" {
		t.Errorf("the process's pids %q: want PID 1 in its container", status["NSpid"])
	}
	if status["CapEff"] != "0000000000000000" {
		t.Errorf("effective capabilities %s, want none", status["CapEff"])
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", c.pid))
	if err != nil {
		t.Fatal(err)
	}
	// mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...; the root file system's options
	// start with ro.
	if m := regexp.MustCompile(`(?m)^\S+ \S+ \S+ \S+ / (\S+)`).FindStringSubmatch(string(mounts)); m == nil || !strings.HasPrefix(m[1], "ro") {
		t.Errorf("the root file system is not read-only:\n%s", mounts)
	}
	ctx := t.Context()
	if _, _, err := c.client.Create(ctx, "f", client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.client.Set(ctx, "f", "k"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.client.Check(ctx, "f", "k"); err != nil || !ok {
		t.Errorf("check of a value set: %v, %v; want true", ok, err)
	}
}

// TestSIGTERMWritesFinalSnapshot stops a container as the kubelet does (SIGTERM to its PID 1,
// the binary itself, with no shell or init in between), checks that the data plane exits 0
// after its final snapshot, and that a new container on the same data finds the filter.
func TestSIGTERMWritesFinalSnapshot(t *testing.T) {
	needImage(t, "podman")
	dir := dataDir(t)
	c := startDataPlane(t, dir)
	ctx := t.Context()
	if _, _, err := c.client.Create(ctx, "kept", client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.client.MultiSet(ctx, "kept", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	// podman stop sends the image's stop signal, SIGTERM, and SIGKILL after the timeout.
	start := time.Now()
	podman(t, "stop", "--time", "60", c.id)
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	if code := podman(t, "inspect", "--format", "{{.State.ExitCode}}", c.id); code != "0" {
		t.Fatalf("exit code %s after SIGTERM, want 0:\n%s", code, c.logs(t))
	}
	logs := c.logs(t)
	if !strings.Contains(logs, "Snapshot written") {
		t.Fatalf("no final snapshot logged:\n%s", logs)
	}
	podman(t, "rm", c.id)

	stopped := time.Now()
	c = startDataPlane(t, dir)
	f, err := c.client.Get(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if at, err := time.Parse(time.RFC3339, f.LastSnapshot); err != nil || at.After(stopped) || stopped.Sub(at) > time.Minute {
		t.Errorf("lastSnapshot %q (%v), want the final snapshot's time, shortly before %v", f.LastSnapshot, err, stopped)
	}
	for _, v := range []string{"a", "b"} {
		if ok, err := c.client.Check(ctx, "kept", v); err != nil || !ok {
			t.Errorf("check %q after the restart: %v, %v; want true", v, ok, err)
		}
	}
}
