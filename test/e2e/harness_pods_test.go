//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/e2e/agent"
)

// killContainer sends SIGKILL to the process of a pod's container, as a user would kill a
// container on its node.
func killContainer(t *testing.T, n namespace, pod string) {
	t.Helper()
	signalContainer(t, n, pod, syscall.SIGKILL)
}

// signalContainer sends sig to the process of a pod's container, found from the container ID the
// node agent reports (process://<pid>), and returns the process's ID.
func signalContainer(t *testing.T, n namespace, pod string, sig syscall.Signal) int {
	t.Helper()
	id := n.jsonpath("pod/"+pod, "{.status.containerStatuses[0].containerID}")
	pid, err := strconv.Atoi(strings.TrimPrefix(id, agent.ContainerIDScheme))
	if err != nil || !strings.HasPrefix(id, agent.ContainerIDScheme) {
		t.Fatalf("container ID %q of pod %s names no process", id, pod)
	}
	// The pid must still be the data plane's, not a reused one.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "dataplane") {
		t.Fatalf("process %d of pod %s is not a data plane (%q, %v)", pid, pod, cmdline, err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("sending %v to process %d: %v", sig, pid, err)
	}
	t.Logf("sent %s to process %d of pod %s", sig, pid, pod)
	return pid
}

// freezeContainer stops the process of a pod's container with SIGSTOP, waits until every one of
// its threads has stopped, and returns the process's ID. kill returns once the signal is sent; the
// stop reaches the threads later, one after another, and on a loaded machine one of them may
// meanwhile accept and read a request sent after kill returned: that request then meets the
// freeze in the middle of its handler, not in the socket.
func freezeContainer(t *testing.T, n namespace, pod string) int {
	t.Helper()
	pid := signalContainer(t, n, pod, syscall.SIGSTOP)
	await.Until(t, 10*time.Second, fmt.Sprintf("every thread of process %d stops", pid), func() (bool, string) {
		running, err := runningThreads(pid)
		return err == nil && len(running) == 0, fmt.Sprint(running, err)
	})
	return pid
}

// runningThreads lists the threads of process pid that are not stopped (state T in
// /proc/pid/task/tid/stat, the field after the command's closing parenthesis), with their state.
func runningThreads(pid int) ([]string, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var running []string
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return nil, err
		}
		_, after, _ := strings.Cut(string(stat[bytes.LastIndexByte(stat, ')')+1:]), " ")
		if state, _, _ := strings.Cut(after, " "); state != "T" {
			running = append(running, task.Name()+":"+state)
		}
	}
	return running, nil
}

// requireRecovered checks that the pod's data plane holds the filter it had, not one the operator
// created anew: a recreated filter would have forgotten every value, and the status would say so.
func requireRecovered(t *testing.T, n namespace, pod, filter string) {
	t.Helper()
	if at := n.jsonpath("bloomfilter/"+filter, "{.status.lastRecreationTime}"); at != "" {
		t.Errorf("BloomFilter %s was recreated at %s: pod %s lost it instead of recovering it", filter, at, pod)
	}
}

// podLog returns what one incarnation of a pod's data-plane container wrote, all runs included.
func podLog(t *testing.T, n namespace, pod, uid string) string {
	t.Helper()
	data, err := os.ReadFile(h.agent.LogFile(n.name, pod, types.UID(uid), "dataplane"))
	if err != nil {
		t.Fatalf("reading the log of pod %s: %v", pod, err)
	}
	return string(data)
}
