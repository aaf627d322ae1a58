package process

import (
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/await"
)

// smallDisk mounts a tmpfs of size bytes at a new directory, as a volume that fills up. It needs
// root, which CI has; elsewhere the test says how to run it.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if os.Getenv("CI") == "" && errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a tmpfs needs root (%v): run this test as root to see a full disk", err)
		}
		t.Fatalf("mounting a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes a ballast file into dir until the disk is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// opsGet answers the status and body of GET path on the ops port.
func (dp *dataPlane) opsGet(t *testing.T, path string) (int, string) {
	t.Helper()
	status, body := httpGet(t, "http://"+dp.opsAddr+path)
	return status, string(body)
}

// httpGet answers the status and body of GET url.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// A full disk fails writes instead of acknowledging them, applying nothing of them, takes the
// pod out of service with the reason, and once space returns the pod heals without a restart,
// leaving no empty segment and direct I/O on; after a SIGKILL every acknowledged value is there
// and no refused one.
func TestFullDiskHealsWithoutARestart(t *testing.T) {
	dir := smallDisk(t, 8<<20)
	dp := startDataPlane(t, dir, "--log-sync", "always")
	if !dp.logged("Log writes are durable through direct I/O") {
		t.Fatalf("the log is not written with direct I/O on this tmpfs, which the test needs to see it stay on:\n%s", dp.logs())
	}
	// Sparse enough that the values of the refused write test absent unless applied: at most
	// 100,000 values in a filter for 1,000,000 at 1e-6, a false positive has odds below 1e-20.
	if _, _, err := dp.client.Create(t.Context(), "full", client.CreateOptions{
		ExpectedInsertions: new(uint64(1_000_000)), FPP: new(1e-6), ValidPeriodAfterCreate: new(int64(0)),
	}); err != nil {
		t.Fatal(err)
	}
	createFilter(t, dp, "untouched") // empty: a value it holds was applied, not a false positive
	var acked []string
	write := func(prefix string, n int) error {
		values := valuesOf(prefix, n)
		if err := dp.client.MultiSet(t.Context(), "full", values); err != nil {
			return err
		}
		acked = append(acked, values...)
		return nil
	}
	if err := write("before", 1000); err != nil {
		t.Fatal(err)
	}

	ballast := fill(t, dir)
	// The log's segment has room left in the chunk it allocated ahead: write until it runs out.
	var refused error
	var failedFlush []string // the values of the write whose own flush failed
	for i := 0; refused == nil && i < 100; i++ {
		failedFlush = valuesOf(fmt.Sprint("filling-", i, "-"), 1000)
		if refused = dp.client.MultiSet(t.Context(), "full", failedFlush); refused == nil {
			acked = append(acked, failedFlush...)
		}
	}
	if refused == nil {
		t.Fatal("a full disk took 100,000 values")
	}
	if !strings.Contains(refused.Error(), "HTTP 507, code 12") || !strings.Contains(refused.Error(), "no space left on device") {
		t.Errorf("a write to a full disk: %v, want 507 code 12 naming the lack of space", refused)
	}
	// Its record came before its bits: nothing of it applied, now or after the restart below.
	noneApplied(t, dp, "full", failedFlush)
	// While the log is known to be broken, a write is refused before it is applied.
	refusedValues := valuesOf("while-broken", 100)
	if err := dp.client.MultiSet(t.Context(), "untouched", refusedValues); err == nil || !strings.Contains(err.Error(), "HTTP 507, code 12") {
		t.Errorf("a write while the log is broken: %v, want 507 code 12", err)
	}
	noneApplied(t, dp, "untouched", refusedValues)
	status, body := dp.opsGet(t, "/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "the update log cannot be written") {
		t.Errorf("/readyz with a full disk: %d %s", status, body)
	}
	if v, ok := metricValue(t, "http://"+dp.opsAddr, "bloomery_log_healthy"); !ok || v != 0 {
		t.Errorf("bloomery_log_healthy = %v (%v), want 0", v, ok)
	}
	if v, ok := metricValue(t, "http://"+dp.opsAddr, "bloomery_log_write_errors_total"); !ok || v < 1 {
		t.Errorf("bloomery_log_write_errors_total = %v (%v), want at least 1", v, ok)
	}
	// Tries to heal on the full disk, each of which used to leave an empty segment behind.
	await.True(t, 30*time.Second, "two tries to heal on the full disk", func() bool {
		v, _ := metricValue(t, "http://"+dp.opsAddr, "bloomery_log_write_errors_total")
		return v >= 3
	})

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(45 * time.Second) // the back-off between tries grows to 30 s
	for !dp.ready(t) {
		if time.Now().After(deadline) {
			t.Fatalf("the pod did not heal after the disk had room again:\n%s", dp.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := write("after", 1000); err != nil {
		t.Fatalf("a write after the disk had room again: %v", err)
	}
	// The full disk was never taken for a file system without direct I/O.
	if strings.Contains(dp.logs(), "direct I/O is not available") {
		t.Errorf("the full disk turned direct I/O off:\n%s", dp.logs())
	}
	if v, _ := metricValue(t, "http://"+dp.opsAddr, "bloomery_log_healthy"); v != 1 {
		t.Errorf("bloomery_log_healthy = %v after healing, want 1", v)
	}
	noEmptySegments(t, dir)

	_ = dp.cmd.Process.Kill()
	<-dp.exited
	restarted := startDataPlane(t, dir, "--log-sync", "always")
	present, err := restarted.client.MultiCheck(t.Context(), "full", acked)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for i, ok := range present {
		if !ok {
			lost = append(lost, acked[i])
		}
	}
	if len(lost) > 0 {
		t.Fatalf("after SIGKILL and a restart, %d of %d acknowledged values are missing, such as %q", len(lost), len(acked), lost[0])
	}
	noneApplied(t, restarted, "untouched", refusedValues)
	noneApplied(t, restarted, "full", failedFlush)
	if !restarted.logged(`"corruptFiles":0,`) {
		t.Errorf("the restart found damage:\n%s", restarted.logs())
	}
}

// A snapshot that finds the disk full says so, leaves no snapshot.tmp taking the room, and loses
// nothing: the log still holds every acknowledged write.
func TestSnapshotOnAFullDiskLeavesNothingBehind(t *testing.T) {
	dir := smallDisk(t, 16<<20)
	dp := startDataPlane(t, dir, "--log-sync", "always")
	// About 3.6 MB of bits: more than the room the log gives back when the snapshot rotates it.
	if _, _, err := dp.client.Create(t.Context(), "kept", client.CreateOptions{
		ExpectedInsertions: new(uint64(2_000_000)), FPP: new(0.001), ValidPeriodAfterCreate: new(int64(0)),
	}); err != nil {
		t.Fatal(err)
	}
	values := valuesOf("kept", 20_000)
	if err := dp.client.MultiSet(t.Context(), "kept", values); err != nil {
		t.Fatal(err)
	}
	ballast := fill(t, dir)
	dp.stop(t, syscall.SIGTERM) // the final snapshot finds no room
	if code := dp.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d after a failed final snapshot, want 1", code)
	}
	if !strings.Contains(dp.logs(), "final snapshot") || !strings.Contains(dp.logs(), "no space left on device") {
		t.Errorf("the log does not say the final snapshot found no room:\n%s", dp.logs())
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot.tmp after a failed snapshot: %v, want none", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	restarted := startDataPlane(t, dir, "--log-sync", "always")
	present, err := restarted.client.MultiCheck(t.Context(), "kept", values)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range present {
		if !ok {
			t.Fatalf("after the failed snapshot %q is missing", values[i])
		}
	}
}

// A volume without room for one more snapshot of the filters is refused at start, naming what is
// free and what is needed, unless allowStartWithLowDiskSpace says to go on.
func TestStartRefusesAVolumeWithoutRoomForASnapshot(t *testing.T) {
	dir := smallDisk(t, 16<<20)
	dp := startDataPlane(t, dir)
	if _, _, err := dp.client.Create(t.Context(), "big", client.CreateOptions{
		ExpectedInsertions: new(uint64(2_000_000)), FPP: new(0.001), ValidPeriodAfterCreate: new(int64(0)),
	}); err != nil {
		t.Fatal(err)
	}
	dp.stop(t, syscall.SIGTERM) // a final snapshot of about 3.6 MB
	ballast := fill(t, dir)
	// Leave 2 MiB: room for the log, not for another snapshot.
	if err := os.Truncate(ballast, mustSize(t, ballast)-2<<20); err != nil {
		t.Fatal(err)
	}

	r := runBinary(t, "dataplane", "-p", "0", "--ops-port", "0", "--bind-address", "127.0.0.1", "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "MiB free, and the next snapshot of the filters needs about 3.8 MiB: free space or grow the volume") ||
		!strings.Contains(r.stderr, "allowStartWithLowDiskSpace: true starts anyway") {
		t.Fatalf("start on a volume without room for a snapshot: exit %d\n%s", r.code, r.stderr)
	}

	allow := writeFile(t, "allow.yaml", "allowStartWithLowDiskSpace: true\n")
	started := startDataPlane(t, dir, "-c", allow)
	if !started.logged("Low disk space: starting anyway", "free space or grow the volume") {
		t.Errorf("no warning about the low disk space:\n%s", started.logs())
	}
	if _, err := started.client.Get(t.Context(), "big"); err != nil {
		t.Errorf("the filter after a start on low disk space: %v", err)
	}
}

func mustSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// noEmptySegments fails when a log segment before the newest holds no write: a try to heal that
// left its new segment behind, one per try while the disk was full. Each segment's first record
// is its start (docs/persistence.md), which a segment of writes outgrows.
func noEmptySegments(t *testing.T, dir string) {
	t.Helper()
	segments, err := filepath.Glob(filepath.Join(dir, "log-*.bin"))
	if err != nil || len(segments) == 0 {
		t.Fatalf("segments %v: %v", segments, err)
	}
	for _, path := range segments[:len(segments)-1] {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 8 || int64(len(data)) <= 8+1+4+int64(byteorder.LittleEndian.Uint64(data[0:8])) {
			t.Errorf("%s holds no write (%d bytes); segments: %v", filepath.Base(path), len(data), segments)
		}
	}
}

// noneApplied fails when the filter holds any of values.
func noneApplied(t *testing.T, dp *dataPlane, filter string, values []string) {
	t.Helper()
	present, err := dp.client.MultiCheck(t.Context(), filter, values)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range present {
		if ok {
			t.Errorf("%s holds %q, of a write that was refused", filter, values[i])
		}
	}
}

// A RESP client writing to a pod whose disk is full is told so, as Redis tells a write it cannot
// persist (MISCONF), with the system's reason, not a generic error; nothing of the refused
// command is applied.
func TestFullDiskAnswersRESPWithMISCONF(t *testing.T) {
	dir := smallDisk(t, 8<<20)
	password := writeFile(t, "resp-password", respLimitsPassword+"\n")
	addr := freeAddress(t)
	dp, err := tryLaunchBinary(t, plainBinary(t), nil, dir, "--log-sync", "always",
		"--resp-port", portOf(t, addr), "--resp-password-file", password)
	if err != nil {
		t.Fatal(err)
	}
	dp.waitReady(t)
	// Sparse: a value of the refused command tests present only if applied (see above).
	if out, err := cliServes(t, addr, "BF.RESERVE", "full", "0.000001", "1000000"); err != nil || out != "OK" {
		t.Fatalf("BF.RESERVE: %q, %v", out, err)
	}
	fill(t, dir)
	var refused []string
	var reply string
	for i := 0; refused == nil && i < 100; i++ {
		items := valuesOf(fmt.Sprint("resp-", i), 1000)
		out, err := cliServes(t, addr, append([]string{"BF.MADD", "full"}, items...)...)
		if err != nil {
			t.Fatalf("redis-cli: %v: %s", err, out)
		}
		if strings.Count(out, "\n") != len(items)-1 { // one reply per item, or one error
			refused, reply = items, out
		}
	}
	if refused == nil {
		t.Fatal("a full disk took 100,000 items")
	}
	if !strings.HasPrefix(reply, "MISCONF the update log cannot be written") || !strings.Contains(reply, "no space left on device") {
		t.Errorf("BF.MADD on a full disk answered %q, want MISCONF naming the lack of space", reply)
	}
	out, err := cliServes(t, addr, append([]string{"BF.MEXISTS", "full"}, refused...)...)
	if err != nil || strings.Contains(out, "1") {
		t.Errorf("BF.MEXISTS of the refused items: %v\n%s\nwant every one 0", err, out)
	}
}
