//go:build linux

package process

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// limitAddressSpace caps the address space of the running process pid at what it maps now plus
// room, as `prlimit --as` would: a bit array larger than room cannot be mapped. The heap grows
// its address space 64 MiB at a time (a heap arena, on 64-bit Linux), and may need one more
// arena before the process stops, so room must leave space for one.
func limitAddressSpace(t *testing.T, pid int, room int64) int64 {
	t.Helper()
	limit := uint64(procStatus(t, pid, "VmSize") + room)
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("cannot limit the data plane's address space (prlimit): %v", err)
	}
	return int64(limit)
}

// A bit array the system refuses to map (here an address-space limit; elsewhere an overcommit
// policy) is a 507 for the one request that needed it, not the end of the process: the other
// filters answer, /metrics is scraped, and SIGTERM stops the process cleanly. It runs a binary
// built without the race detector, whose shadow memory reserves terabytes of address space.
func TestRefusedMappingIsAnErrorNotACrash(t *testing.T) {
	config := writeFile(t, "config.yaml", "maxTotalBytes: 0\n") // the budget must not refuse first
	dp := startPlainDataPlane(t, nil, t.TempDir(), "-c", config)
	pid := dp.cmd.Process.Pid
	small := client.CreateOptions{ExpectedInsertions: new(uint64(100_000)), FPP: new(0.01), ValidPeriodAfterCreate: new(int64(0))}
	if _, _, err := dp.client.Create(t.Context(), "small", small); err != nil {
		t.Fatal(err)
	}
	// A first layer of 6 MB, off the heap, that grows sixteenfold: the next layer, about 119 MiB,
	// is larger than the room left, even with nothing else mapped in it.
	const growing = 5_000_000
	if _, _, err := dp.client.Create(t.Context(), "growing", client.CreateOptions{
		ExpectedInsertions: new(uint64(growing)), FPP: new(0.01), Growth: new(uint(16)), ValidPeriodAfterCreate: new(int64(0)),
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < growing; i += 100_000 {
		if err := dp.client.MultiSet(t.Context(), "growing", valuesOf(fmt.Sprint("v", i), 100_000)); err != nil {
			t.Fatal(err)
		}
	}
	const room = 96 << 20 // a heap arena of 64 MiB and 32 MiB for the rest
	limit := limitAddressSpace(t, pid, room)
	t.Logf("address space limited to %d MiB (VmSize + %d MiB)", limit>>20, room>>20)

	refused := func(what string, err error) {
		t.Helper()
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInsufficientStorage || apiErr.Code != wire.CodeInsufficientSpace ||
			!strings.Contains(apiErr.Message, "mapping a bit array") {
			t.Fatalf("%s beyond the address space: %v, want 507 code 4 saying the bits could not be mapped", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	// A first layer of 1.7 GiB.
	_, _, err := dp.client.Create(t.Context(), "huge", client.CreateOptions{ExpectedInsertions: new(uint64(1_000_000_000)), FPP: new(0.001)})
	refused("a create", err)
	// A growth layer of about 119 MiB.
	err = nil
	for i := 0; err == nil && i < 100; i++ {
		err = dp.client.MultiSet(t.Context(), "growing", valuesOf(fmt.Sprint("more", i), 10_000))
	}
	refused("a growth", err)

	if present, err := dp.client.MultiCheck(t.Context(), "growing", []string{"v0-0", "v4900000-99999"}); err != nil || !allTrue(present) {
		t.Errorf("the filter whose growth was refused: %v, %v; want its values present", present, err)
	}
	if _, err := dp.client.CheckAndSet(t.Context(), "small", "after"); err != nil {
		t.Errorf("a write to another filter after the refusals: %v", err)
	}
	if _, err := dp.client.Get(t.Context(), "huge"); !client.IsNotFound(err) {
		t.Errorf("the refused filter: %v, want not found", err)
	}
	if status, body := dp.opsGet(t, wire.MetricsPath); status != http.StatusOK || !strings.Contains(body, "bloomery_filters") {
		t.Errorf("/metrics after the refusals: %d, %d bytes", status, len(body))
	}
	start := time.Now()
	dp.stop(t, syscall.SIGTERM)
	if code := dp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0:\n%s", code, dp.logs())
	}
	t.Logf("stopped in %v", time.Since(start))
}
