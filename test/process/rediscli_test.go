package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// redisCLI is the path of redis-cli (Debian's redis-tools, which `make test` installs). Under CI
// its absence fails the test rather than skipping it.
func redisCLI(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-cli not found (apt-get install redis-tools): %v", err)
		}
		t.Skipf("redis-cli not found (apt-get install redis-tools): %v", err)
	}
	return path
}

// startWithRESP starts a data plane on dataDir with its RESP port open, and answers the port.
// respPort 0 opens none, so a port is chosen here; a start that lost it to another process is
// tried again.
func startWithRESP(t *testing.T, dataDir string, args ...string) (*dataPlane, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := portOf(t, freeAddress(t))
		dp, err := tryLaunch(t, nil, dataDir, append([]string{"--resp-port", port}, args...)...)
		if errors.Is(err, errExitedEarly) && strings.Contains(err.Error(), "address already in use") && attempt < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dp.waitReady(t)
		return dp, port
	}
}

// TestRedisCLI drives the RESP port with redis-cli, as a user would: commands one at a time,
// then 100,000 BF.ADDs in --pipe mode under logSync always, every one acknowledged; after a
// SIGKILL and a restart, every value is there, read over REST.
func TestRedisCLI(t *testing.T) {
	cli := redisCLI(t)
	dir := t.TempDir()
	dp, port := startWithRESP(t, dir, "--log-sync", "always")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), cli, append([]string{"-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"BF.RESERVE", "users", "0.001", "200000"}, "OK"},
		{[]string{"BF.ADD", "users", "alice"}, "1"},
		{[]string{"BF.ADD", "users", "alice"}, "0"},
		{[]string{"BF.MADD", "users", "bob", "carol"}, "1\n1"},
		{[]string{"BF.EXISTS", "users", "dave"}, "0"},
		{[]string{"BF.MEXISTS", "users", "alice", "dave"}, "1\n0"},
		{[]string{"TYPE", "users"}, "MBbloom--"},
		{[]string{"EXISTS", "users", "nobody"}, "1"},
		{[]string{"BF.ADD", "users"}, "ERR wrong number of arguments for 'bf.add' command"},
		{[]string{"BF.RESERVE", "users", "0.001", "100"}, "ERR item exists"},
	} {
		if got := run(c.args...); got != c.want {
			t.Errorf("redis-cli %s: %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}

	const values = 100_000
	var input bytes.Buffer
	for i := range values {
		v := "v-" + strconv.Itoa(i)
		fmt.Fprintf(&input, "*3\r\n$6\r\nBF.ADD\r\n$5\r\nusers\r\n$%d\r\n%s\r\n", len(v), v)
	}
	pipe := exec.CommandContext(t.Context(), cli, "-p", port, "--pipe")
	pipe.Stdin = &input
	out, err := pipe.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --pipe: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("errors: 0, replies: %d", values); !strings.Contains(string(out), want) {
		t.Fatalf("redis-cli --pipe says %q, want %q", out, want)
	}

	dp.stop(t, syscall.SIGKILL)
	restarted, _ := startWithRESP(t, dir, "--log-sync", "always")
	all := make([]string, 0, values+3)
	for i := range values {
		all = append(all, "v-"+strconv.Itoa(i))
	}
	all = append(all, "alice", "bob", "carol")
	for start := 0; start < len(all); start += 10_000 {
		batch := all[start:min(start+10_000, len(all))]
		present, err := restarted.client.MultiCheck(t.Context(), "users", batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range present {
			if !ok {
				t.Fatalf("%q, acknowledged over RESP before the SIGKILL, is missing after the restart", batch[i])
			}
		}
	}
}
