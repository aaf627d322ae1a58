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

// TestRedisCLIRESP3AndTransactions drives the RESP port with redis-cli in its HELLO 3 mode (-3)
// and with transactions typed on its standard input, which it sends down one connection. Every
// output is redis-cli's own rendering with --no-raw, so the types are checked as well as the
// values: RESP3 booleans print as (true)/(false), maps as numbered "#" entries, errors inside
// EXEC's array as (error).
func TestRedisCLIRESP3AndTransactions(t *testing.T) {
	cli := redisCLI(t)
	_, port := startWithRESP(t, t.TempDir())
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), cli, append([]string{"-p", port, "--no-raw"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	lines := func(l ...string) string { return strings.Join(l, "\n") }

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"BF.RESERVE", "r3", "0.001", "1000"}, "OK"},
		{[]string{"BF.ADD", "r3", "alice"}, "(true)"},
		{[]string{"BF.ADD", "r3", "alice"}, "(false)"},
		{[]string{"BF.MADD", "r3", "alice", "bob"}, lines("1) (false)", "2) (true)")},
		{[]string{"BF.EXISTS", "r3", "bob"}, "(true)"},
		{[]string{"BF.EXISTS", "r3", "carol"}, "(false)"},
		{[]string{"BF.MEXISTS", "r3", "carol", "alice"}, lines("1) (false)", "2) (true)")},
		{[]string{"BF.INFO", "r3"}, lines(
			"1# Capacity => (integer) 1000",
			"2# Size => (integer) 2080",
			"3# Number of filters => (integer) 1",
			"4# Number of items inserted => (integer) 2",
			"5# Expansion rate => (integer) 2")},
		{[]string{"BF.INFO", "r3", "ITEMS"}, "1# Number of items inserted => (integer) 2"},
		{[]string{"BF.INFO", "absent"}, "(error) ERR not found"},
	} {
		if got := run("", append([]string{"-3"}, c.args...)...); got != c.want {
			t.Errorf("redis-cli -3 %s:\n%s\nwant\n%s", strings.Join(c.args, " "), got, c.want)
		}
	}

	// A transaction whose fourth command fails only as EXEC runs it: the others still apply, and
	// its error takes its place in EXEC's array.
	tx := func(key string, extra ...string) string {
		return lines(append(append([]string{"MULTI",
			"BF.RESERVE " + key + " 0.001 1000",
			"BF.ADD " + key + " alice",
			"BF.MADD " + key + " alice bob",
			"BF.RESERVE " + key + " 0.01 100",
			"BF.EXISTS " + key + " carol"}, extra...), "EXEC")...) + "\n"
	}
	queued := []string{"OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED", "QUEUED"}
	if got, want := run(tx("t2")), lines(append(queued,
		"1) OK",
		"2) (integer) 1",
		"3) 1) (integer) 0",
		"   2) (integer) 1",
		"4) (error) ERR item exists",
		"5) (integer) 0")...); got != want {
		t.Errorf("a RESP2 transaction:\n%s\nwant\n%s", got, want)
	}
	if got, want := run(tx("t3", "BF.INFO t3"), "-3"), lines(append(queued,
		"QUEUED",
		"1) OK",
		"2) (true)",
		"3) 1) (false)",
		"   2) (true)",
		"4) (error) ERR item exists",
		"5) (false)",
		"6) 1# Capacity => (integer) 1000",
		"   2# Size => (integer) 2080",
		"   3# Number of filters => (integer) 1",
		"   4# Number of items inserted => (integer) 2",
		"   5# Expansion rate => (integer) 2")...); got != want {
		t.Errorf("a RESP3 transaction:\n%s\nwant\n%s", got, want)
	}

	// Errors while queueing (a wrong arity, an unknown command) are answered at once, and EXEC
	// then discards the whole transaction: the filter it would have made does not exist after.
	aborted := "MULTI\nBF.RESERVE t4 0.001 1000\nBF.ADD t4\nBF.ADD t4 alice\nINCR t4\nEXEC\nEXISTS t4\n"
	if got, want := run(aborted), lines(
		"OK",
		"QUEUED",
		"(error) ERR wrong number of arguments for 'bf.add' command",
		"QUEUED",
		"(error) ERR unknown command 'INCR', with args beginning with: 't4' ",
		"(error) EXECABORT Transaction discarded because of previous errors.",
		"(integer) 0"); got != want {
		t.Errorf("a transaction with queue-time errors:\n%s\nwant\n%s", got, want)
	}
}
