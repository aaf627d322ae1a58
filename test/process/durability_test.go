package process

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// The unit tests of the log count the calls of its fdatasync seam, so a production binding that
// did nothing would pass them all. These tests watch the real binary's system calls with strace
// instead: every write answered under logSync: always must have reached the disk before its
// answer left, through a descriptor opened O_DSYNC (direct I/O) or a later fdatasync; under
// everysec within its second.

// durableWriters and durableWrites make the writes: concurrent writers share flushes.
const (
	durableWriters = 4
	durableWrites  = 25
)

// everysecLag is how long after its answer a write under everysec may become durable: the
// second the policy promises, and room for a loaded machine slowed further by strace.
const everysecLag = 1500 * time.Millisecond

func TestAcknowledgedWritesAreDurableUnderStrace(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("strace (Debian's package, make test-deps) is needed: %v", err)
		}
		t.Skipf("strace is not installed (make test-deps installs it): %v", err)
	}
	for _, tt := range []struct {
		name, policy string
		// inject makes strace fail io_setup, so that the log goes through the page cache and
		// fdatasync as on a system without kernel AIO.
		inject bool
		logged string
		lag    time.Duration
	}{
		{"always, direct I/O", "always", false, "Log writes are durable through direct I/O", 0},
		{"always, fdatasync", "always", true, "Log writes are durable through fdatasync", 0},
		{"everysec", "everysec", false, "", everysecLag},
	} {
		t.Run(tt.name, func(t *testing.T) {
			traces := t.TempDir()
			command := []string{strace, "-f", "-ff", "-ttt", "-T", "-s", "65536", "-o", filepath.Join(traces, "trace"),
				"-e", "trace=openat,write,pwrite64,io_setup,io_submit,io_getevents,fdatasync,fsync"}
			if tt.inject {
				command = append(command, "-e", "inject=io_setup:error=ENOSYS")
			}
			dp, err := tryLaunchUnder(t, append(command, plainBinary(t)), nil, t.TempDir(), "--log-sync", tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			dp.waitReady(t)
			if tt.logged != "" && !dp.logged(tt.logged) {
				t.Fatalf("the log does not say %q:\n%s", tt.logged, dp.logs())
			}
			createFilter(t, dp, "durable")
			answered := writeDurably(t, dp)
			time.Sleep(tt.lag + time.Second) // the syncs that everysec owes
			killTraced(t, dp)

			durable, answers := readTraces(t, traces)
			worst := time.Duration(math.MinInt64)
			for _, i := range answered {
				at, ok := answers[i]
				if !ok {
					t.Fatalf("the answer to write %d is not in the trace", i)
				}
				synced, ok := durable[i]
				if !ok {
					t.Errorf("write %d was answered at %.6f and never reached the disk durably", i, at)
					continue
				}
				lag := time.Duration((synced - at) * float64(time.Second))
				worst = max(worst, lag)
				if lag > tt.lag {
					t.Errorf("write %d was answered at %.6f and durable only at %.6f, %v later; want at most %v", i, at, synced, lag, tt.lag)
				}
			}
			if worst != math.MinInt64 {
				t.Logf("%d writes answered; the latest became durable %v after its answer (negative: before)", len(answered), worst)
			}
		})
	}
}

// writeDurably sets values durable-NNNNNN from durableWriters clients, each request's ID naming
// its number, and answers the numbers of the writes answered 200.
func writeDurably(t *testing.T, dp *dataPlane) []int {
	t.Helper()
	var mu sync.Mutex
	var answered []int
	var wg sync.WaitGroup
	for w := range durableWriters {
		wg.Go(func() {
			for j := range durableWrites {
				i := w*durableWrites + j
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+dp.addr+wire.FilterOpPath("durable", wire.OpSet),
					strings.NewReader(fmt.Sprintf(`{"value":"durable-%06d"}`, i)))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("X-Request-Id", fmt.Sprintf("ack-%06d", i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("write %d: %s", i, resp.Status)
					continue
				}
				mu.Lock()
				answered = append(answered, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(answered) == 0 {
		t.Fatal("no write was answered")
	}
	return answered
}

// killTraced kills the data plane that strace runs, as a crash would, and waits for strace to
// finish its traces.
func killTraced(t *testing.T, dp *dataPlane) {
	t.Helper()
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", dp.cmd.Process.Pid, dp.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(children))[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dp.exited
}

// traceLine is one complete system call of a trace: strace -ff writes each thread's to a file of
// its own, so none is split.
var traceLine = regexp.MustCompile(`^(\d+\.\d+) (\w+)\((.*)\) += (-?\d+)(?: .*)? <(\d+\.\d+)>$`)

var (
	valueIn   = regexp.MustCompile(`durable-(\d{6})`)
	answerIn  = regexp.MustCompile(`^(\d+), "HTTP/1\.1 200 OK\\r\\n(?:.*\\r\\n)*?X-Request-Id: ack-(\d{6})\\r\\n`)
	segmentOf = regexp.MustCompile(`^AT_FDCWD, "[^"]*/log-\d+\.bin", ([A-Z_|]+)`)
	fdOf      = regexp.MustCompile(`^(\d+)(?:,|$)`)
	aioFdOf   = regexp.MustCompile(`aio_fildes=(\d+)`)
)

type syscallEvent struct {
	at, end   float64 // seconds: when the call began and returned
	name      string
	args      string
	ret       int
	goroutine string // the trace file, one per thread
}

// readTraces reads every thread's trace and answers, by the number of each write, when its value
// was first durable in the log and when its answer was written to the client's socket.
func readTraces(t *testing.T, dir string) (durable, answers map[int]float64) {
	t.Helper()
	events := readEvents(t, dir)
	durable, answers = map[int]float64{}, map[int]float64{}
	dsync := map[int]bool{}           // the segments' descriptors: opened O_DSYNC
	pending := map[int]map[int]bool{} // values written to each segment descriptor, not yet durable
	var submitted map[int]bool        // the values of the direct write in flight
	var submittedDsync bool           // whether its descriptor was opened O_DSYNC
	madeDurable := func(values map[int]bool, at float64) {
		for v := range values {
			if _, ok := durable[v]; !ok {
				durable[v] = at
			}
		}
	}
	for _, e := range events {
		switch e.name {
		case "openat":
			if m := segmentOf.FindStringSubmatch(e.args); m != nil && e.ret >= 0 {
				dsync[e.ret] = strings.Contains(m[1], "O_DSYNC")
				pending[e.ret] = map[int]bool{}
			}
		case "write", "pwrite64":
			if m := answerIn.FindStringSubmatch(e.args); m != nil {
				i, _ := strconv.Atoi(m[2])
				answers[i] = e.at
				continue
			}
			fd := leadingFd(e.args)
			if values, ok := pending[fd]; ok && e.ret > 0 {
				written := valuesOf6(e.args)
				if dsync[fd] {
					madeDurable(written, e.end)
				}
				for v := range written {
					values[v] = true
				}
			}
		case "io_submit":
			// One direct write at a time: the log's flushes do not overlap, and each waits for its
			// completion (io_getevents) before the next.
			if m := aioFdOf.FindStringSubmatch(e.args); m != nil && e.ret == 1 {
				fd, _ := strconv.Atoi(m[1])
				submitted, submittedDsync = valuesOf6(e.args), dsync[fd]
			}
		case "io_getevents":
			if e.ret == 1 && submittedDsync {
				madeDurable(submitted, e.end)
			}
			submitted = nil
		case "fdatasync", "fsync":
			if values, ok := pending[leadingFd(e.args)]; ok && e.ret == 0 {
				madeDurable(values, e.end)
				clear(values)
			}
		}
	}
	return durable, answers
}

// readEvents parses every trace file in dir into one list in the order the calls began.
func readEvents(t *testing.T, dir string) []syscallEvent {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "trace.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no traces in %s: %v", dir, err)
	}
	var events []syscallEvent
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		scanner := bufio.NewScanner(f)
		scanner.Buffer(nil, 1<<22)
		for scanner.Scan() {
			m := traceLine.FindStringSubmatch(scanner.Text())
			if m == nil {
				continue // signals, exits, calls the process's end cut short
			}
			at, _ := strconv.ParseFloat(m[1], 64)
			took, _ := strconv.ParseFloat(m[5], 64)
			ret, _ := strconv.Atoi(m[4])
			events = append(events, syscallEvent{at: at, end: at + took, name: m[2], args: m[3], ret: ret, goroutine: path})
		}
		if err := scanner.Err(); err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		_ = f.Close()
	}
	slices.SortStableFunc(events, func(a, b syscallEvent) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return events
}

// leadingFd is the descriptor that a call's arguments begin with, -1 if none.
func leadingFd(args string) int {
	if m := fdOf.FindStringSubmatch(args); m != nil {
		fd, _ := strconv.Atoi(m[1])
		return fd
	}
	return -1
}

// valuesOf6 is the set of the numbers of the durable-NNNNNN values in s.
func valuesOf6(s string) map[int]bool {
	out := map[int]bool{}
	for _, m := range valueIn.FindAllStringSubmatch(s, -1) {
		i, _ := strconv.Atoi(m[1])
		out[i] = true
	}
	return out
}
