package process

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// rss is the process's resident memory, from /proc.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// With no maxTotalBytes configured, the filters get a share of the memory the process may use
// (here GOMEMLIMIT, as the operator sets it from the container's limit): a create far beyond it is
// refused with 507, naming the limit, and costs no memory.
func TestDefaultMemoryLimitRefusesAHugeCreate(t *testing.T) {
	dp := launchDataPlaneWithEnv(t, []string{"GOMEMLIMIT=256MiB"}, t.TempDir(), "--log-sync", "always")
	dp.waitReady(t)
	if !dp.logged(`"msg":"Memory limit for the filters","maxTotalBytes":"102.4 MiB","from":"40% of 256.0 MiB (GOMEMLIMIT), as maxTotalBytes is not set"`) {
		t.Errorf("the start log does not say the limit and where it comes from:\n%s", dp.logs())
	}
	before := rss(t, dp.cmd.Process.Pid)
	// About 1.7 GiB of bits: far more than the pod's memory.
	_, _, err := dp.client.Create(t.Context(), "huge", client.CreateOptions{ExpectedInsertions: new(uint64(1_000_000_000)), FPP: new(0.001)})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInsufficientStorage || apiErr.Code != wire.CodeInsufficientSpace ||
		!strings.Contains(apiErr.Message, "total limit of 102.4 MiB") {
		t.Fatalf("a create of 1.7 GiB with a limit of 102.4 MiB: %v, want 507 code 4 naming the limit", err)
	}
	if grown := rss(t, dp.cmd.Process.Pid) - before; grown > 16<<20 {
		t.Errorf("the refused create grew the process by %d MiB", grown>>20)
	}
	if _, err := dp.client.Get(t.Context(), "huge"); !client.IsNotFound(err) {
		t.Errorf("the refused filter: %v, want not found", err)
	}
}
