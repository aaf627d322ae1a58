package process

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the real binary, as a user or the kubelet would: exit statuses, what goes to
// stdout and stderr, and signals are the contract here.

const testVersion = "1.2.3-test"

var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("test/process: every test needs the bloomery binary built, which -short leaves out")
		return 0
	}
	dir, err := os.MkdirTemp("", "bloomery-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binary = filepath.Join(dir, "bloomery")
	args := append([]string{"build", "-ldflags", "-X main.version=" + testVersion, "-o", binary}, buildFlags()...)
	build := exec.CommandContext(context.Background(), "go", append(args, "github.com/bloomery/bloomery")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binary:", err)
		return 1
	}
	return m.Run()
}

type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary to completion in an empty directory, so that nothing it might create
// lands in the source tree.
func runBinary(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("bloomery %s did not finish in time; stderr:\n%s", strings.Join(args, " "), stderr.String())
	case errors.As(err, &exit):
	case err != nil:
		t.Fatal(err)
	}
	noDataRace(t, "bloomery "+strings.Join(args, " "), stderr.String())
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHelpAndVersion(t *testing.T) {
	tests := []struct {
		args []string
		want []string // in stdout
	}{
		{[]string{"-h"}, []string{"Usage:", "bloomery [command]", "dataplane", "version"}},
		{[]string{"--help"}, []string{"Usage:", "dataplane"}},
		{[]string{"dataplane", "-h"}, []string{"bloomery dataplane [flags]", "-p, --port", "(default 8080)", "-c, --config FILE",
			"-d, --docs", "--data-dir DIR", "--version", "-h, --help"}},
		{[]string{"help", "dataplane"}, []string{"bloomery dataplane [flags]"}},
		{[]string{"--version"}, []string{"bloomery " + testVersion + "\n"}},
		{[]string{"dataplane", "--version"}, []string{"bloomery " + testVersion + "\n"}},
		{[]string{"dataplane", "-V"}, []string{"bloomery " + testVersion + "\n"}}, // filter-service's spelling
		{[]string{"version"}, []string{"bloomery " + testVersion + "\n"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runBinary(t, tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(tt.want[0], "bloomery "+testVersion) && r.stdout != tt.want[0] {
				t.Errorf("stdout %q, want exactly %q", r.stdout, tt.want[0])
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	configFile := func(content string) string { return writeFile(t, "config.yaml", content) }
	unknownKey := configFile("maxHttpConnections: 5\nfoo: 1\n")
	wrongType := configFile(`maxHttpConnections: "1000"` + "\n")
	outOfRange := configFile("defaultFalsePositiveProbability: 1.5\n")
	notMapping := configFile("- a\n- b\n")

	const dataplaneHint = "Run 'bloomery dataplane -h' for usage.\n"
	const rootHint = "Run 'bloomery -h' for usage.\n"
	tests := []struct {
		name   string
		args   []string
		stderr string // exactly
	}{
		{"unknown flag", []string{"--nope"}, "Error: unknown flag: --nope\n" + rootHint},
		{"unknown dataplane flag", []string{"dataplane", "--nope"}, "Error: unknown flag: --nope\n" + dataplaneHint},
		{"unknown shorthand", []string{"dataplane", "-x"}, "Error: unknown shorthand flag: 'x' in -x\n" + dataplaneHint},
		{"port not a number", []string{"dataplane", "-p", "abc"},
			`Error: invalid argument "abc" for "-p, --port" flag: strconv.ParseInt: parsing "abc": invalid syntax` + "\n" + dataplaneHint},
		{"port out of range", []string{"dataplane", "-p", "70000"},
			"Error: invalid configuration: --port: must be between 0 and 65535, got 70000\n"},
		{"empty data dir", []string{"dataplane", "--data-dir", ""},
			"Error: invalid configuration: persistentStorageDirectory (or --data-dir): must not be empty\n"},
		{"positional argument", []string{"dataplane", "extra"}, `Error: unexpected argument "extra"` + "\n" + dataplaneHint},
		{"unknown command", []string{"nope"}, `Error: unknown command "nope" for "bloomery"` + "\n" + rootHint},
		{"misspelt command", []string{"datapane"},
			`Error: unknown command "datapane" for "bloomery"; did you mean "dataplane"?` + "\n" + rootHint},
		{"no command", nil, "Error: missing command\n" + rootHint},
		{"argument to version", []string{"version", "x"}, `Error: unexpected argument "x"` + "\nRun 'bloomery version -h' for usage.\n"},
		{"config: unknown key", []string{"dataplane", "-c", unknownKey},
			"Error: config " + unknownKey + ": unknown key \"foo\" (line 2)\n"},
		{"config: wrong type", []string{"dataplane", "--config", wrongType},
			"Error: config " + wrongType + `: key "maxHttpConnections": expected an integer, got string "1000" (line 1)` + "\n"},
		{"config: out of range", []string{"dataplane", "-c", outOfRange},
			"Error: config " + outOfRange + `: key "defaultFalsePositiveProbability": must be greater than 0 and less than 1, got 1.5 (line 1)` + "\n"},
		{"config: missing file", []string{"dataplane", "-c", missing},
			"Error: config " + missing + ": cannot read the file: no such file or directory\n"},
		{"config: not a mapping", []string{"dataplane", "-c", notMapping},
			"Error: config " + notMapping + ": expected a mapping of configuration keys at the top level, got a list (line 1)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBinary(t, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			if r.stderr != tt.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, tt.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestPortInUseIsNotAUsageError(t *testing.T) {
	taken, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	port := fmt.Sprint(taken.Addr().(*net.TCPAddr).Port)
	r := runBinary(t, "dataplane", "--bind-address", "127.0.0.1", "-p", port, "--data-dir", t.TempDir())
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if want := "Error: listen tcp 127.0.0.1:" + port + ": bind: address already in use\n"; !strings.HasSuffix(r.stderr, want) {
		t.Errorf("stderr does not end with %q:\n%s", want, r.stderr)
	}
}

var textAddress = regexp.MustCompile(`msg=Listening listener=client address=(\S+)`)

// logLine is what the tests read from one line of the data plane's log, in either format.
type logLine struct {
	msg, address string
	config       map[string]any // the "Starting data plane" line's configuration, JSON only
}

func parseLogLine(t *testing.T, format, line string) logLine {
	t.Helper()
	if format == "text" {
		if m := textAddress.FindStringSubmatch(line); m != nil {
			return logLine{msg: "Listening", address: m[1]}
		}
		return logLine{}
	}
	var l struct {
		Msg      string         `json:"msg"`
		Listener string         `json:"listener"`
		Address  string         `json:"address"`
		Config   map[string]any `json:"config"`
	}
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		t.Errorf("log line is not JSON (%v): %s", err, line)
	}
	if l.Msg == "Listening" && l.Listener != "client" {
		return logLine{} // the ops port's
	}
	return logLine{msg: l.Msg, address: l.Address, config: l.Config}
}

// TestServeUntilSignal starts the data plane on a free port, waits for it to say where it
// listens, and stops it with a signal: a graceful stop exits 0.
func TestServeUntilSignal(t *testing.T) {
	tests := []struct {
		signal syscall.Signal
		format string
	}{
		{syscall.SIGTERM, "json"},
		{syscall.SIGINT, "text"},
	}
	for _, tt := range tests {
		t.Run(tt.signal.String(), func(t *testing.T) {
			dir := t.TempDir()
			config := writeFile(t, "config.yaml", fmt.Sprintf(
				"maxHttpConnections: 7\ngracefulShutdownTimeoutMillis: 5000\npersistentStorageDirectory: %s\nlogFormat: %s\n",
				filepath.Join(dir, "from-file"), tt.format))
			dataDir := filepath.Join(dir, "from-flag")

			// The context kills the process if the test ends before it exits.
			cmd := exec.CommandContext(t.Context(), binary, "dataplane", "-p", "0", "--ops-port", "0", "--bind-address", "127.0.0.1", "-c", config, "--data-dir", dataDir)
			cmd.Dir = dir
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}

			lines := make(chan string, 100)
			go func() {
				defer close(lines)
				scanner := bufio.NewScanner(stderr)
				for scanner.Scan() {
					lines <- scanner.Text()
				}
			}()
			deadline := time.NewTimer(30 * time.Second)
			defer deadline.Stop()

			var started, listening logLine
			for listening.address == "" {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("the data plane exited before it listened: %v", cmd.Wait())
					}
					switch l := parseLogLine(t, tt.format, line); l.msg {
					case "Starting data plane":
						started = l
					case "Listening":
						listening = l
					}
				case <-deadline.C:
					t.Fatal(`no "Listening" log line in time`)
				}
			}
			if tt.format == "json" {
				if started.config == nil {
					t.Error(`no "Starting data plane" line with the configuration before "Listening"`)
				}
				for key, want := range map[string]any{
					"maxHttpConnections":         float64(7), // from the file
					"persistentStorageDirectory": dataDir,    // the flag wins over the file
					"port":                       float64(0),
					"logFormat":                  "json",
				} {
					if got := started.config[key]; got != want {
						t.Errorf("logged config %s = %v, want %v", key, got, want)
					}
				}
			}
			host, port, err := net.SplitHostPort(listening.address)
			if err != nil || host != "127.0.0.1" || port == "0" {
				t.Fatalf("Listening address %q, want 127.0.0.1 and the port the kernel picked", listening.address)
			}
			conn, err := new(net.Dialer).DialContext(t.Context(), "tcp", listening.address)
			if err != nil {
				t.Fatalf("the logged address does not accept connections: %v", err)
			}
			_ = conn.Close()

			if err := cmd.Process.Signal(tt.signal); err != nil {
				t.Fatal(err)
			}
			for open := true; open; { // the pipe must be drained before Wait
				select {
				case _, open = <-lines:
				case <-deadline.C:
					t.Fatalf("the data plane did not stop within the deadline after %v", tt.signal)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("exit after %v: %v, want status 0", tt.signal, err)
			}
		})
	}
}

// A filter-service file starts the data plane, and each key Bloomery has no use for is named in
// one warning.
func TestFilterServiceConfigurationStarts(t *testing.T) {
	config := writeFile(t, "configuration.yaml", "metricsPrefix: filter_service\nmaxWorkerThreadPoolSize: 8\n"+
		"channelBufferSizeForFilterPersistence: 1024\npersistentStorageDirectory: ~\nlogSync: EverySecond\n")
	dp := startDataPlane(t, t.TempDir(), "--configuration-file", config)
	logs := dp.logs()
	for _, key := range []string{"metricsPrefix", "maxWorkerThreadPoolSize"} {
		if n := strings.Count(logs, `"msg":"Ignored configuration key: filter-service's, which Bloomery has no use for","key":"`+key+`"`); n != 1 {
			t.Errorf("%d warnings naming %s, want 1:\n%s", n, key, logs)
		}
	}
	if !strings.Contains(logs, `"logSync":"everysec"`) {
		t.Errorf("logSync: EverySecond is not everysec in the effective configuration:\n%s", logs)
	}
}
