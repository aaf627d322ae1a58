//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/types"

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
