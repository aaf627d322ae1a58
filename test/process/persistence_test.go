package process

import (
	"bufio"
	"context"
	byteorder "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
)

// These tests kill and restart the real binary to show that what it acknowledged survives.

// dataPlane is a running `bloomery dataplane` process, with the addresses of its client, internal
// and ops listeners.
type dataPlane struct {
	cmd                         *exec.Cmd
	addr, internalAddr, opsAddr string
	client                      *client.Client
	// internal calls the internal port with the token, as the operator does.
	internal *client.Client
	exited   chan struct{}
	stderr   strings.Builder // what it logged, for failure messages
	mu       sync.Mutex
}

// startDataPlane starts the binary on a free loopback port and waits for its "Listening" line.
func startDataPlane(t *testing.T, dataDir string, args ...string) *dataPlane {
	t.Helper()
	dp := launchDataPlane(t, dataDir, args...)
	dp.waitReady(t)
	return dp
}

// launchDataPlane starts the binary and returns once it listens, ready or not.
func launchDataPlane(t *testing.T, dataDir string, args ...string) *dataPlane {
	t.Helper()
	return launchDataPlaneWithEnv(t, nil, dataDir, args...)
}

// launchDataPlaneWithEnv is launchDataPlane with env added to the process's environment.
func launchDataPlaneWithEnv(t *testing.T, env []string, dataDir string, args ...string) *dataPlane {
	t.Helper()
	dp, err := tryLaunch(t, env, dataDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

// errExitedEarly is tryLaunch's answer for a process that exited before it listened.
var errExitedEarly = errors.New("the data plane exited before it listened")

// tryLaunch is launchDataPlaneWithEnv, answering an error wrapping errExitedEarly when the process
// exits before it listens, so that a caller may try again.
func tryLaunch(t *testing.T, env []string, dataDir string, args ...string) (*dataPlane, error) {
	t.Helper()
	return tryLaunchBinary(t, binary, env, dataDir, args...)
}

// tryLaunchBinary is tryLaunch of the binary at path.
func tryLaunchBinary(t *testing.T, path string, env []string, dataDir string, args ...string) (*dataPlane, error) {
	t.Helper()
	return tryLaunchUnder(t, []string{path}, env, dataDir, args...)
}

// tryLaunchUnder is tryLaunchBinary of the command line command, which ends in the binary's path
// and may start with a program that runs it, such as strace.
func tryLaunchUnder(t *testing.T, command []string, env []string, dataDir string, args ...string) (*dataPlane, error) {
	t.Helper()
	args = append(append(command[1:len(command):len(command)], "dataplane", "-p", "0", "--internal-port", "0", "--ops-port", "0",
		"--internal-token-file", tokenFile(t), "--bind-address", "127.0.0.1", "--data-dir", dataDir), args...)
	cmd := exec.CommandContext(t.Context(), command[0], args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	dp := &dataPlane{cmd: cmd, exited: make(chan struct{})}
	listening := make(chan [2]string, 3)
	go func() {
		scanner := bufio.NewScanner(pipe)
		scanner.Buffer(nil, 1<<20)
		for scanner.Scan() {
			line := scanner.Text()
			dp.mu.Lock()
			dp.stderr.WriteString(line + "\n")
			dp.mu.Unlock()
			var l struct{ Msg, Listener, Address string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "Listening" {
				listening <- [2]string{l.Listener, l.Address}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
		close(dp.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-dp.exited
		noDataRace(t, "the data plane", dp.logs())
	})
	timeout := time.After(30 * time.Second)
	for dp.addr == "" || dp.internalAddr == "" || dp.opsAddr == "" {
		select {
		case l := <-listening:
			switch l[0] {
			case "client":
				dp.addr = l[1]
			case "internal":
				dp.internalAddr = l[1]
			case "ops":
				dp.opsAddr = l[1]
			}
		case <-dp.exited:
			return nil, fmt.Errorf("%w:\n%s", errExitedEarly, dp.logs())
		case <-timeout:
			return nil, fmt.Errorf("the data plane did not listen on its three ports in time:\n%s", dp.logs())
		}
	}
	dp.client = client.New("http://" + dp.addr)
	dp.internal = client.New("http://"+dp.internalAddr, client.Internal(testToken))
	return dp, nil
}

// testToken is the internal port's token of every process these tests start.
const testToken = "the-cluster-token-of-the-tests-0123456789"

// tokenFile writes testToken to a file, as the operator mounts it into a pod.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitReady waits for /readyz to answer 200, as Kubernetes would before sending traffic: the
// data plane listens before it recovers, answering 503 until the filters are back.
func (dp *dataPlane) waitReady(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !dp.ready(t); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the data plane was not ready in time:\n%s", dp.logs())
		}
	}
}

// ready reports whether /readyz answers 200.
func (dp *dataPlane) ready(t *testing.T) bool {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+dp.opsAddr+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (dp *dataPlane) logs() string {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	return dp.stderr.String()
}

// logged reports whether the process has logged each of lines, waiting a while for them: what it
// writes reaches logs through a pipe, a little after it happened.
func (dp *dataPlane) logged(lines ...string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		logs := dp.logs()
		if !slices.ContainsFunc(lines, func(l string) bool { return !strings.Contains(logs, l) }) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// stop sends sig and waits for the process to exit.
func (dp *dataPlane) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := dp.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dp.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the data plane did not exit after %v:\n%s", sig, dp.logs())
	}
}

// answered is a value whose check-and-set the server answered, and when.
type answered struct {
	value string
	at    time.Time
}

// minAnswered is the least a crash round must have acknowledged to prove anything: a round that
// answered nothing would pass with a server that persists nothing.
const minAnswered = 100

// hammer runs check-and-sets of unique values from several clients until the server goes away
// and returns the ones that were answered. With killAt > 0 it kills the process once that many
// were answered. An answer that is an error of the API, rather than a connection the killed
// process no longer takes, fails the test.
func hammer(t *testing.T, dp *dataPlane, filter, prefix string, clients, killAt int) []answered {
	t.Helper()
	var mu sync.Mutex
	var out []answered
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			// A client of its own: its own connections, as separate applications would have.
			cl := client.New("http://" + dp.addr)
			for i := 0; ; i++ {
				value := fmt.Sprintf("%s-c%d-%d", prefix, c, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cl.CheckAndSet(ctx, filter, value)
				cancel()
				if apiErr := (*client.Error)(nil); errors.As(err, &apiErr) {
					t.Errorf("check-and-set of %s answered an error before the kill: %v", value, err)
					return
				}
				if err != nil {
					return // the process was killed
				}
				mu.Lock()
				out = append(out, answered{value, time.Now()})
				if len(out) == killAt {
					_ = dp.cmd.Process.Kill() // the other clients' requests in flight may still be answered
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// missing returns the values the filter does not hold.
func missing(t *testing.T, dp *dataPlane, filter string, values []answered) []answered {
	t.Helper()
	var lost []answered
	for start := 0; start < len(values); start += 1000 {
		batch := values[start:min(start+1000, len(values))]
		strs := make([]string, len(batch))
		for i, v := range batch {
			strs[i] = v.value
		}
		present, err := dp.client.MultiCheck(t.Context(), filter, strs)
		if err != nil {
			t.Fatalf("multi-check after restart: %v\n%s", err, dp.logs())
		}
		for i, ok := range present {
			if !ok {
				lost = append(lost, batch[i])
			}
		}
	}
	return lost
}

func createFilter(t *testing.T, dp *dataPlane, name string) {
	t.Helper()
	_, _, err := dp.client.Create(t.Context(), name, client.CreateOptions{
		ExpectedInsertions: new(uint64(100_000)), FPP: new(0.001), ValidPeriodAfterCreate: new(int64(0)),
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// TestCrashLosesNoAcknowledgedWrite kills the data plane with SIGKILL at random moments while
// clients write, with logSync: always; after each restart every answered value is present.
func TestCrashLosesNoAcknowledgedWrite(t *testing.T) {
	dir := t.TempDir()
	var all []answered
	for round := range 4 {
		dp := startDataPlane(t, dir, "--log-sync", "always")
		if round == 0 {
			createFilter(t, dp, "crash")
		}
		if lost := missing(t, dp, "crash", all); len(lost) > 0 {
			t.Fatalf("round %d: %d of %d acknowledged values lost, e.g. %q", round, len(lost), len(all), lost[0].value)
		}
		killAt := minAnswered + rand.IntN(2000)
		got := hammer(t, dp, "crash", fmt.Sprintf("r%d", round), 8, killAt)
		<-dp.exited
		if len(got) < minAnswered {
			t.Fatalf("round %d: %d values answered before the kill, fewer than the %d that prove anything", round, len(got), minAnswered)
		}
		t.Logf("round %d: killed after %d values answered, %d answered in all", round, killAt, len(got))
		all = append(all, got...)
	}
	dp := startDataPlane(t, dir, "--log-sync", "always")
	if lost := missing(t, dp, "crash", all); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged values lost, e.g. %q", len(lost), len(all), lost[0].value)
	}
}

// TestCrashWithEverySecondSync measures what logSync: everysec loses in a crash: only values
// answered in the last flush interval (a second) before the kill may be gone.
func TestCrashWithEverySecondSync(t *testing.T) {
	dir := t.TempDir()
	dp := startDataPlane(t, dir, "--log-sync", "everysec")
	createFilter(t, dp, "crash")
	var killedAt time.Time
	time.AfterFunc(1500*time.Millisecond, func() { killedAt = time.Now(); _ = dp.cmd.Process.Kill() })
	got := hammer(t, dp, "crash", "v", 8, 0)
	<-dp.exited
	if len(got) < minAnswered {
		t.Fatalf("%d values answered before the kill, fewer than the %d that prove anything", len(got), minAnswered)
	}

	dp = startDataPlane(t, dir, "--log-sync", "everysec")
	lost := missing(t, dp, "crash", got)
	t.Logf("everysec: %d of %d answered values lost in a SIGKILL", len(lost), len(got))
	for _, v := range lost {
		// One interval plus scheduling slack.
		if age := killedAt.Sub(v.at); age > 1500*time.Millisecond {
			t.Errorf("value %q answered %v before the kill was lost: more than a flush interval", v.value, age)
		}
	}
}

// TestGracefulShutdownKeepsEverything stops with SIGTERM after creates, adds, an overwrite and a
// delete, restarts, and finds the same filters and values.
func TestGracefulShutdownKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	dp := startDataPlane(t, dir, "--log-sync", "no")
	ctx := t.Context()
	for _, name := range []string{"kept", "deleted", "replaced"} {
		createFilter(t, dp, name)
		if err := dp.client.MultiSet(ctx, name, []string{name + "-1", name + "-2"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := dp.client.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dp.client.Create(ctx, "replaced", client.CreateOptions{Overwrite: true, ValidPeriodAfterCreate: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := dp.client.Set(ctx, "replaced", "after-overwrite"); err != nil {
		t.Fatal(err)
	}
	dp.stop(t, syscall.SIGTERM)
	if code := dp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, dp.logs())
	}
	if !strings.Contains(dp.logs(), "Snapshot written") {
		t.Errorf("no final snapshot logged:\n%s", dp.logs())
	}

	stopped := time.Now()
	dp = startDataPlane(t, dir)
	kept, err := dp.client.Get(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	// The final snapshot, taken by the process before, is the last one on disk.
	if at, err := time.Parse(time.RFC3339, kept.LastSnapshot); err != nil || at.After(stopped) || stopped.Sub(at) > time.Minute {
		t.Errorf("lastSnapshot %q (%v), want the final snapshot's time, shortly before %v", kept.LastSnapshot, err, stopped)
	}
	names, err := dp.client.List(ctx)
	if err != nil || fmt.Sprint(names) != "[kept replaced]" {
		t.Fatalf("filters after restart: %v, %v; want [kept replaced]", names, err)
	}
	for filter, values := range map[string][]string{"kept": {"kept-1", "kept-2"}, "replaced": {"after-overwrite"}} {
		got, err := dp.client.MultiCheck(ctx, filter, values)
		if err != nil || !allTrue(got) {
			t.Errorf("%s: %v, %v; want all present", filter, got, err)
		}
	}
	if present, _ := dp.client.Check(ctx, "replaced", "replaced-1"); present {
		t.Error("a value added before the overwrite came back")
	}
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return len(bs) > 0
}

// TestSecondProcessOnTheSameDirectory starts two data planes on one directory: the second
// refuses, naming the directory, and the first keeps serving.
func TestSecondProcessOnTheSameDirectory(t *testing.T) {
	dir := t.TempDir()
	first := startDataPlane(t, dir)
	r := runBinary(t, "dataplane", "-p", "0", "--ops-port", "0", "--bind-address", "127.0.0.1", "--data-dir", dir)
	if r.code == 0 || !strings.Contains(r.stderr, dir) || !strings.Contains(r.stderr, "in use by another process") {
		t.Errorf("second process: exit %d, stderr %q; want a failure naming %s", r.code, r.stderr, dir)
	}
	if err := first.client.Ping(t.Context()); err != nil {
		t.Errorf("the first process stopped serving: %v", err)
	}
}

// A damaged record in a log segment that a newer one follows, a missing segment, or a middle
// segment truncated or zeroed (whose reading ends as cleanly as its end, at a record's boundary)
// lost writes that were acknowledged: with allowRecoverFromCorruptedPersistentFile: false the
// start fails with exit status 1 naming the file and the offset; with the default it starts,
// counts the damage in /metrics and logs it.
func TestDamagedLogStopsTheStart(t *testing.T) {
	for _, damage := range []string{"corrupt byte", "missing segment", "truncated segment", "zeroed segment"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			for i, value := range []string{"a", "b", "c"} { // one segment each: every start opens a new one
				dp := startDataPlane(t, dir, "--log-sync", "always")
				if i == 0 {
					createFilter(t, dp, "f")
				}
				if err := dp.client.Set(t.Context(), "f", value); err != nil {
					t.Fatal(err)
				}
				dp.stop(t, syscall.SIGKILL) // no final snapshot: the writes stay in the log
			}
			segments, err := filepath.Glob(filepath.Join(dir, "log-*.bin"))
			if err != nil || len(segments) != 3 {
				t.Fatalf("segments %v (%v), want three", segments, err)
			}
			target, want, logged := damageSegment(t, damage, segments)

			strict := writeFile(t, "strict.yaml", "allowRecoverFromCorruptedPersistentFile: false\n")
			// A start that wrongly succeeds serves until killed: the deadline turns it into a failure.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "dataplane", "-p", "0", "--ops-port", "0", "--bind-address", "127.0.0.1", "--data-dir", dir, "-c", strict)
			out, err := cmd.CombinedOutput()
			noDataRace(t, "the data plane", string(out))
			if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), target+want) {
				t.Fatalf("strict start: exit %d (%v), output:\n%s\nwant exit 1 naming %s", code, err, out, target)
			}
			if damage != "missing segment" && !strings.Contains(string(out), "offset") {
				t.Errorf("the error does not name the offset:\n%s", out)
			}

			dp := startDataPlane(t, dir, "--log-sync", "always")
			if v, ok := metricValue(t, "http://"+dp.addr, "bloomery_recovery_corrupt_files"); v != 1 {
				t.Errorf("tolerant start: bloomery_recovery_corrupt_files is %v (present %t), want 1", v, ok)
			}
			if !dp.logged(logged, filepath.Base(target)) {
				t.Errorf("tolerant start: no %q naming %s:\n%s", logged, target, dp.logs())
			}
		})
	}
}

// damageSegment damages one of the three segments as damage says; it answers the segment, what
// the strict start's error says after its path, and what the tolerant start logs.
func damageSegment(t *testing.T, damage string, segments []string) (target, want, logged string) {
	t.Helper()
	target, want, logged = segments[1], " is damaged: its records end at offset", "Log segment lost records"
	data, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	switch damage {
	case "corrupt byte":
		target, want, logged = segments[0], " is damaged: ", "Log segment is damaged"
		if data, err = os.ReadFile(target); err == nil {
			data[20] ^= 0xff // inside the body of the first record
			err = os.WriteFile(target, data, 0o600)
		}
	case "missing segment":
		want, logged = " is missing", "Log segment is missing"
		err = os.Remove(target)
	case "truncated segment":
		// Cut after the first record (the segment's start), at a boundary: what is left reads
		// as a whole segment of one record.
		err = os.Truncate(target, 8+1+4+int64(byteorder.LittleEndian.Uint64(data[0:8])))
	case "zeroed segment":
		// Zeros end a segment's records as its end does.
		err = os.WriteFile(target, make([]byte, len(data)), 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return target, want, logged
}
