package process

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// The RESP port's limits, against the real binary: each attack is refused with a clear error or
// its connection closed, the process's peak resident memory grows by far less than what the
// attacker sent or declared, and a real client (redis-cli) is served beside it. The binary is
// plainBinary, so that the memory measured is the product's, not the race detector's.

const respLimitsPassword = "the-resp-password"

// startPlainWithRESP starts plainBinary with its RESP port open, a password, and the
// configuration file holding config; it answers the data plane and the RESP port's address.
func startPlainWithRESP(t *testing.T, config string) (*dataPlane, string) {
	t.Helper()
	password := writeFile(t, "resp-password", respLimitsPassword+"\n")
	file := writeFile(t, "config.yaml", config+"\n")
	for attempt := 1; ; attempt++ {
		addr := freeAddress(t)
		dp, err := tryLaunchBinary(t, plainBinary(t), nil, t.TempDir(), "-c", file, "--in-memory",
			"--resp-port", portOf(t, addr), "--resp-password-file", password)
		if errors.Is(err, errExitedEarly) && strings.Contains(err.Error(), "address already in use") && attempt < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dp.waitReady(t)
		return dp, addr
	}
}

// cliServes runs a command through redis-cli, authenticated, and answers its output or an error.
func cliServes(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(t.Context(), redisCLI(t), append([]string{"-h", host, "-p", port}, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+respLimitsPassword)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// wantServed fails the test unless redis-cli is answered at once.
func wantServed(t *testing.T, addr, when string) {
	t.Helper()
	if out, err := cliServes(t, addr, "BF.ADD", "served", "x"); err != nil || (out != "1" && out != "0") {
		t.Errorf("%s, redis-cli BF.ADD: %q, %v; want it served", when, out, err)
	}
}

// dialRESP opens a raw connection to the RESP port.
func dialRESP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// attack sends head, then up to body bytes of filler (fill repeated; zero bytes without), on conn
// in the background (the server may close the connection part-way), and answers the first line
// of the reply.
func attack(t *testing.T, conn net.Conn, head, fill string, body int) string {
	t.Helper()
	go func() {
		if _, err := io.WriteString(conn, head); err != nil {
			return
		}
		chunk := make([]byte, 1<<20)
		if fill != "" {
			chunk = []byte(strings.Repeat(fill, len(chunk)/len(fill)))
		}
		for sent := 0; sent < body; sent += len(chunk) {
			if _, err := conn.Write(chunk); err != nil {
				return // refused and closed, as expected
			}
		}
	}()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no reply to %.60q: %v", head, err)
	}
	return strings.TrimSpace(line)
}

// authenticate sends AUTH on conn and checks its OK.
func authenticate(t *testing.T, conn net.Conn) {
	t.Helper()
	if _, err := fmt.Fprintf(conn, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(respLimitsPassword), respLimitsPassword); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+OK\r\n" {
		t.Fatalf("AUTH: %q, %v", buf, err)
	}
}

// A huge bulk string before AUTH and after it, and a 3-million-item BF.MADD, are refused by their
// headers with a clear error: the process's memory does not grow with what they declare or send,
// and redis-cli is served next to them.
func TestRESPRefusesHugeCommands(t *testing.T) {
	dp, addr := startPlainWithRESP(t, "")
	const huge = 256 << 20
	const item = "$7\r\nitem-01\r\n"
	for _, tt := range []struct {
		name  string
		auth  bool
		head  string
		fill  string
		sends int
		want  string
		bound int
	}{
		{"4 unauthenticated AUTHs of 256 MiB", false, fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n", huge), "", huge, "-ERR Protocol error: unauthenticated bulk length", 8 << 20},
		{"a BF.ADD of 256 MiB", true, fmt.Sprintf("*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$%d\r\n", huge), "", huge, "-ERR Protocol error: an argument of 268435456 bytes is larger than respMaxBulkLength (10485760 bytes)", 8 << 20},
		{"a BF.MADD of 3 million items", true, "*3000002\r\n$7\r\nBF.MADD\r\n$1\r\nk\r\n", item, 3_000_000 * len(item), "-ERR Protocol error: a command of 3000002 arguments is larger than respMaxCommandLength (10485760 bytes) allows: send fewer items per command", 8 << 20},
		// Fewer items, each within the limit, whose bytes together are not.
		{"a BF.MADD of 1 million items", true, "*1000002\r\n$7\r\nBF.MADD\r\n$1\r\nk\r\n", item, 1_000_000 * len(item), "-ERR Protocol error: the command is larger than respMaxCommandLength (10485760 bytes): send fewer or smaller items per command", 4 * 10 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := 1
			if !tt.auth {
				n = 4
			}
			grown := measure(t, dp.cmd.Process.Pid, func() {
				for range n {
					conn := dialRESP(t, addr)
					if tt.auth {
						authenticate(t, conn)
					}
					if got := attack(t, conn, tt.head, tt.fill, tt.sends); !strings.HasPrefix(got, tt.want) {
						t.Errorf("reply %q, want %q", got, tt.want)
					}
				}
				wantServed(t, addr, "after "+tt.name)
			})
			// A command refused by its headers costs nothing; one read up to the limit before it is
			// refused, at most a few times the limit, as an HTTP body does.
			t.Logf("%s: the peak RSS grew by %.1f MiB", tt.name, float64(grown)/(1<<20))
			if bound := int64(tt.bound); grown > bound {
				t.Errorf("%s grew the peak RSS by %d MiB, more than %d MiB", tt.name, grown>>20, bound>>20)
			}
		})
	}
	// Each was counted as a connection closed for its reason, once the server has closed it.
	awaitMetrics(t, dp, `bloomery_resp_connections_closed_total{reason="protocol"} 4`, `bloomery_resp_connections_closed_total{reason="too_large"} 3`)
}

// awaitMetrics waits until the data plane's /metrics holds every line of want.
func awaitMetrics(t *testing.T, dp *dataPlane, want ...string) {
	t.Helper()
	await.True(t, 10*time.Second, fmt.Sprintf("/metrics to hold %q", want), func() bool {
		metrics := scrapeText(t, dp)
		for _, w := range want {
			if !strings.Contains(metrics, w) {
				return false
			}
		}
		return true
	})
}

// A thousand silent connections, half of them part-way through a command, lock no client out:
// redis-cli is served at once with the default respMaxClients, for a few MiB of memory. With the
// limit at 50, the next connection is refused with Redis's text, and once respTimeoutSeconds and
// requestTimeoutSeconds have closed the silent ones, redis-cli is served again.
func TestRESPSilentConnectionsLockNoClientOut(t *testing.T) {
	raiseOpenFiles(t, 2100)
	redisCLI(t)
	dp, addr := startPlainWithRESP(t, "")
	grown := measure(t, dp.cmd.Process.Pid, func() {
		silent(t, addr, 1000)
		wantServed(t, addr, "with 1,000 silent connections")
	})
	t.Logf("1,000 silent connections grew the peak RSS by %.1f MiB", float64(grown)/(1<<20))
	if grown > 64<<20 {
		t.Errorf("1,000 silent connections grew the peak RSS by %d MiB, more than 64 MiB", grown>>20)
	}

	dp, addr = startPlainWithRESP(t, "respMaxClients: 50\nrespTimeoutSeconds: 1\nrequestTimeoutSeconds: 1")
	silent(t, addr, 50)
	if got := attack(t, dialRESP(t, addr), "", "", 0); got != "-ERR max number of clients reached" {
		t.Errorf("the 51st connection: %q, want Redis's max clients error", got)
	}
	await.True(t, 30*time.Second, "redis-cli served once the silent connections are closed", func() bool {
		out, err := cliServes(t, addr, "PING")
		return err == nil && out == "PONG"
	})
	awaitMetrics(t, dp, `bloomery_resp_connections_refused_total{reason="max_clients"} 1`,
		`bloomery_resp_connections_closed_total{reason="idle"} 25`, `bloomery_resp_connections_closed_total{reason="slow_command"} 25`)
}

// silent opens n connections that say nothing, every other one after the start of a command.
func silent(t *testing.T, addr string, n int) {
	t.Helper()
	for i := range n {
		c := dialRESP(t, addr)
		if i%2 == 1 {
			if _, err := io.WriteString(c, "*2\r\n$4\r\nPI"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A client that sends commands and never reads their replies is closed once its replies have
// waited requestTimeoutSeconds, without the process holding what it sent; others are served
// meanwhile.
func TestRESPClientThatNeverReadsIsClosed(t *testing.T) {
	dp, addr := startPlainWithRESP(t, "requestTimeoutSeconds: 1")
	conn := dialRESP(t, addr)
	authenticate(t, conn)
	var cmd strings.Builder
	fmt.Fprintf(&cmd, "*1002\r\n$10\r\nBF.MEXISTS\r\n$6\r\nunread\r\n")
	for range 1000 {
		cmd.WriteString("$1\r\nx\r\n")
	}
	chunk := []byte(strings.Repeat(cmd.String(), 16))
	var closed error
	grown := measure(t, dp.cmd.Process.Pid, func() {
		for sent := 0; sent < 4<<30; sent += len(chunk) {
			if err := conn.SetWriteDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, closed = conn.Write(chunk); closed != nil {
				break
			}
		}
		wantServed(t, addr, "beside a client that never reads")
	})
	t.Logf("the client that never reads: %v; the peak RSS grew by %.1f MiB", closed, float64(grown)/(1<<20))
	if closed == nil || errors.Is(closed, os.ErrDeadlineExceeded) {
		t.Errorf("a client that never reads its replies was not closed: its writes ended with %v", closed)
	}
	if grown > 32<<20 {
		t.Errorf("a client that never reads grew the peak RSS by %d MiB, more than 32 MiB", grown>>20)
	}
	awaitMetrics(t, dp, `bloomery_resp_connections_closed_total{reason="slow_reader"} 1`)
}

// scrapeText reads the data plane's /metrics in the text format.
func scrapeText(t *testing.T, dp *dataPlane) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+dp.opsAddr+"/metrics", nil)
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
	return string(body)
}
