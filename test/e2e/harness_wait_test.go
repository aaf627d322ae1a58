//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// waitTimeout bounds every wait for the cluster to reach a state. Generous: a pod that stops
// gracefully takes its drain delay, and the machine may be busy with other tests.
const waitTimeout = 3 * time.Minute

// watcher records what `kubectl get --watch` prints for one object, one line per change, as a
// user watching it would see it; it catches states that last less than a poll's interval.
type watcher struct {
	mu    sync.Mutex
	lines []string
	stop  func()
}

// watch starts `kubectl get object --watch -o jsonpath=template` (with flags, such as a label
// selector) in the namespace until the test ends, and returns once it printed the object's current
// state. template should end with {"\n"}.
func (n namespace) watch(object, template string, flags ...string) *watcher {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"--namespace", n.name, "get", object, "--watch", "-o", "jsonpath=" + template}, flags...)
	cmd := h.kubectl.command(ctx, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		n.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		n.t.Fatal(err)
	}
	w := &watcher{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.read(out)
	}()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = cmd.Wait() // killed on purpose
		})
	}
	n.t.Cleanup(w.stop)
	h.onStop(w.stop) // an interrupted run stops it before the API server, which would wait for it
	// The first line is the state before the action under test: wait for it, so that no change
	// happens before the watch began.
	deadline := time.Now().Add(kubectlTimeout)
	for len(w.seen()) == 0 {
		select {
		case <-done:
			n.t.Fatalf("kubectl get %s --watch ended without output", object)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("kubectl get %s --watch printed nothing within %v", object, kubectlTimeout)
		}
	}
	return w
}

func (w *watcher) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		w.mu.Lock()
		w.lines = append(w.lines, s.Text())
		w.mu.Unlock()
	}
}

// seen returns the lines printed so far.
func (w *watcher) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// sawInOrder reports whether lines matching each of want, in that order, were printed (other
// lines may come between them).
func (w *watcher) sawInOrder(want ...func(string) bool) bool {
	i := 0
	for _, line := range w.seen() {
		if i < len(want) && want[i](line) {
			i++
		}
	}
	return i == len(want)
}

// startsWith matches a watcher's line by its first field.
func startsWith(prefix string) func(string) bool {
	return func(line string) bool { return strings.HasPrefix(line, prefix) }
}

// readyStatus prints a resource's Ready condition, one line per change, for a watcher.
const readyStatus = `{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}{"\n"}`

// conditionStatuses prints a resource's Ready, Progressing and Degraded statuses and Ready's
// reason, one line per change, for a watcher.
const conditionStatuses = `{.status.conditions[?(@.type=="Ready")].status} ` +
	`{.status.conditions[?(@.type=="Progressing")].status} {.status.conditions[?(@.type=="Degraded")].status} ` +
	`{.status.conditions[?(@.type=="Ready")].reason}{"\n"}`

// notReadyButSaysWhy matches a conditionStatuses line that is not Ready, and Progressing or
// Degraded: the status explains itself.
func notReadyButSaysWhy(line string) bool {
	f := strings.Fields(line)
	return len(f) >= 3 && f[0] == "False" && (f[1] == "True" || f[2] == "True")
}

// compact joins a watcher's lines for a log, a run of identical lines as one with its count: a
// status that changes in fields the template does not print repeats the same line.
func compact(lines []string) string {
	var out []string
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && lines[j] == lines[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s (×%d)", lines[i], j-i))
		} else {
			out = append(out, lines[i])
		}
		i = j
	}
	return strings.Join(out, " | ")
}
