package process

import (
	"bytes"
	"context"
	bin "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Requests that could make the process take far more memory than they carry: each must be
// answered with a clear error, and the process's resident memory must not grow by more than a
// small multiple of what it read.

// The memory these tests measure is the product's: under the race detector, whose shadow memory
// takes several times what the program touches, they run a binary built without it.
var plain struct {
	once sync.Once
	path string
	err  error
}

// plainBinary is the binary under test, built without the race detector.
func plainBinary(t *testing.T) string {
	t.Helper()
	if !raceDetector {
		return binary
	}
	plain.once.Do(func() {
		plain.path = binary + "-norace"
		build := exec.CommandContext(context.Background(), "go", "build", "-ldflags", "-X main.version="+testVersion, "-o", plain.path, "github.com/bloomery/bloomery")
		if out, err := build.CombinedOutput(); err != nil {
			plain.err = fmt.Errorf("building the binary without the race detector: %w\n%s", err, out)
		}
	})
	if plain.err != nil {
		t.Fatal(plain.err)
	}
	return plain.path
}

// startPlainDataPlane is startDataPlane of plainBinary.
func startPlainDataPlane(t *testing.T, env []string, dataDir string, args ...string) *dataPlane {
	t.Helper()
	dp, err := tryLaunchBinary(t, plainBinary(t), env, dataDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	dp.waitReady(t)
	return dp
}

// measure answers by how much fn raised the process's resident memory at its peak: VmHWM after
// fn less VmRSS before it, the peak having been reset to the resident memory first.
func measure(t *testing.T, pid int, fn func()) int64 {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak resident memory: %v", err)
	}
	before := procStatus(t, pid, "VmRSS")
	fn()
	return procStatus(t, pid, "VmHWM") - before
}

// procStatus reads a field of /proc/PID/status given in kB, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// post sends body to url and answers the status and the answer's body.
func post(t *testing.T, url, contentType string, body []byte, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(answer)
}

// A multi check-and-set of 10 MiB of numbers, where strings are expected, is a 400, also for a
// filter that does not exist, that costs at most a few times the body: not a slice of millions
// of strings decoded before the type is checked.
func TestMultiValuesOfTheWrongTypeCostLittle(t *testing.T) {
	dp := startPlainDataPlane(t, nil, t.TempDir())
	createFilter(t, dp, "f")
	const size = 10<<20 - 64 // within maxHttpRequestLength
	body := []byte(`{"values":[1`)
	body = append(body, bytes.Repeat([]byte(",1"), (size-len(body)-2)/2)...)
	body = append(body, "]}"...)
	for _, tt := range []struct {
		filter string
		status int
		says   string
	}{
		{"f", http.StatusBadRequest, "element 0 is not a string"},
		// The body is refused before the filter is looked up; a 404 would do as well.
		{"missing", http.StatusBadRequest, "element 0 is not a string"},
	} {
		var status int
		var answer string
		grown := measure(t, dp.cmd.Process.Pid, func() {
			status, answer = post(t, "http://"+dp.addr+wire.FilterOpPath(tt.filter, wire.OpMultiCheckAndSet), "application/json", body, nil)
		})
		t.Logf("%s: %d %.200s; peak RSS grew by %.1f MiB for a body of %.1f MiB", tt.filter, status, answer, float64(grown)/(1<<20), float64(len(body))/(1<<20))
		if (status != tt.status || !strings.Contains(answer, tt.says)) && (tt.filter != "missing" || status != http.StatusNotFound) {
			t.Errorf("10 MiB of numbers to %s: %d %.300s; want %d saying %q", tt.filter, status, answer, tt.status, tt.says)
		}
		if limit := 4 * int64(len(body)); grown > limit {
			t.Errorf("10 MiB of numbers to %s grew the peak RSS by %d MiB, more than 4 times the body (%d MiB)", tt.filter, grown>>20, limit>>20)
		}
	}
}

// A batch of a peer's writes at the internal port's limit, made of empty keys or declaring more
// keys than it holds, is refused or applied for at most a few times its size: decoding takes what
// the batch holds, never a string header for each of the millions of keys it declares or holds.
func TestApplyBatchOfTinyKeysCostsLittle(t *testing.T) {
	dp := startPlainDataPlane(t, nil, t.TempDir())
	const limit = 8 * 10 << 20 // peer.ApplyBodyLimit of the default maxHttpRequestLength
	// batch is one add to a filter named "missing" declaring a count of keys, then holding empty
	// keys (a zero length each) up to size bytes, the last byte being tail.
	batch := func(declared uint64, tail byte) []byte {
		b := append([]byte("BOP1"), 1, 3, 7)
		b = append(b, "missing"...)
		b = bin.LittleEndian.AppendUint64(b, uint64(time.Now().UnixNano()))
		b = bin.AppendUvarint(b, declared)
		b = append(b, make([]byte, declared)...)
		b[len(b)-1] = tail
		return b
	}
	header := http.Header{"Authorization": {"Bearer " + testToken}}
	for _, tt := range []struct {
		name   string
		body   []byte
		status int
		says   string
	}{
		// Declares a key per byte left, the last of which says 127 bytes that are not there: a
		// header for each declared key would be 1.3 GiB before the decoder found out.
		{"declared count", batch(limit-64, 0x7f), http.StatusBadRequest, "malformed batch"},
		// Holds 80 Mi empty keys, which a string header each would make 1.3 GiB.
		{"empty keys", batch(limit-64, 0), http.StatusOK, `"applied":[false]`},
		// The same in JSON, which took 1.7 GiB to decode: JSON gets a client's limit.
		{"JSON", jsonBatch(limit - 64), http.StatusRequestEntityTooLarge, "maxHttpRequestLength (10485760 bytes)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.body) > limit {
				t.Fatalf("the batch takes %d bytes, over the limit of %d", len(tt.body), limit)
			}
			var status int
			var answer string
			grown := measure(t, dp.cmd.Process.Pid, func() {
				contentType := wire.OpsContentType
				if tt.name == "JSON" {
					contentType = "application/json"
				}
				status, answer = post(t, "http://"+dp.internalAddr+wire.ApplyPath, contentType, tt.body, header)
			})
			t.Logf("%d %.200s; peak RSS grew by %.1f MiB for a batch of %.1f MiB", status, answer, float64(grown)/(1<<20), float64(len(tt.body))/(1<<20))
			if status != tt.status || !strings.Contains(answer, tt.says) {
				t.Errorf("a batch of %d bytes: %d %.300s; want %d saying %q", len(tt.body), status, answer, tt.status, tt.says)
			}
			if bound := 4 * int64(len(tt.body)); grown > bound {
				t.Errorf("a batch of %d MiB grew the peak RSS by %d MiB, more than 4 times the batch (%d MiB)", len(tt.body)>>20, grown>>20, bound>>20)
			}
		})
	}
}

// jsonBatch is the JSON form of one add of empty keys to a filter named "missing", of size bytes.
func jsonBatch(size int) []byte {
	b := []byte(`{"ops":[{"op":"add","name":"missing","generation":1,"keys":[""`)
	b = append(b, bytes.Repeat([]byte(`,""`), (size-len(b)-4)/3)...)
	return append(b, "]}]}"...)
}

// raiseOpenFiles raises the soft limit of open files to n, which the data plane started next
// inherits, or skips the test.
func raiseOpenFiles(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	old := lim
	lim.Cur = n
	if lim.Max < n {
		lim.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("the test needs %d open files, and the limit is %d (hard %d), which cannot be raised: %v", n, old.Cur, old.Max, err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// A thousand idle connections to the client port, some with half a request line, starve neither
// the probes, which have a port of their own, nor the process: /readyz answers at once, a client
// request is answered, and once they close the API serves.
func TestIdleConnectionsDoNotStarveTheProbes(t *testing.T) {
	raiseOpenFiles(t, 2100)
	dp := startDataPlane(t, t.TempDir())
	createFilter(t, dp, "f")
	conns := make([]net.Conn, 0, 1000)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	for i := range 1000 {
		c, err := dialer.DialContext(t.Context(), "tcp", dp.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%2 == 1 {
			_, _ = c.Write([]byte("POST /v1/bloomfilter/f/check HT"))
		}
		conns = append(conns, c)
	}

	// Probes and scrapes, each on a connection of its own as the kubelet's are, answer at once:
	// within 2 s, well before the requestTimeout of 5 s after which the server closes the idle
	// connections and would let them through anyway.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	for i := range 6 {
		path := wire.ReadyzPath
		if i%3 == 2 {
			path = wire.MetricsPath
		}
		start := time.Now()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+dp.opsAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := probe.Do(req)
		if err != nil {
			t.Fatalf("GET %s with 1,000 idle client connections: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if i < 2 {
			t.Logf("GET %s answered %d in %v with 1,000 idle client connections", path, resp.StatusCode, time.Since(start))
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with 1,000 idle client connections: %d, want 200", path, resp.StatusCode)
		}
	}

	// The client port holds maxHttpConnections (1,000) already: a new client closes the oldest
	// connection that has sent no request, and is served (docs/security.md#connection-budgets).
	busy := client.New("http://"+dp.addr, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if present, err := busy.Check(t.Context(), "f", "x"); err != nil || present {
		t.Errorf("a check of an absent value with the port full: present %v, %v; want absent", present, err)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	conns = conns[:0]
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := dp.client.Check(ctx, "f", "x")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client port did not serve again once the idle connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
