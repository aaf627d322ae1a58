//go:build linux

package run

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// The places the limit is read from; tests point them elsewhere.
var (
	procSelfCgroup = "/proc/self/cgroup"
	cgroupMount    = "/sys/fs/cgroup"
)

// processMemoryLimit answers the smallest of the cgroup's memory.max (the container's limit),
// GOMEMLIMIT and the machine's memory.
func processMemoryLimit() (memoryLimit, error) {
	var sys syscall.Sysinfo_t
	if err := syscall.Sysinfo(&sys); err != nil {
		return memoryLimit{}, err
	}
	limit := memoryLimit{bytes: sys.Totalram * uint64(sys.Unit), source: "the machine's memory"}
	if v, ok, err := cgroupMemoryMax(); err != nil {
		return memoryLimit{}, err
	} else if ok && v < limit.bytes {
		limit = memoryLimit{bytes: v, source: "the cgroup's memory.max"}
	}
	if v := debug.SetMemoryLimit(-1); v != math.MaxInt64 && uint64(v) < limit.bytes {
		limit = memoryLimit{bytes: uint64(v), source: "GOMEMLIMIT"}
	}
	return limit, nil
}

// cgroupMemoryMax answers the smallest memory.max of the process's cgroup (v2) and its ancestors,
// and false where none sets one: no cgroup v2, or "max" all the way up.
func cgroupMemoryMax() (uint64, bool, error) {
	raw, err := os.ReadFile(procSelfCgroup)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var path string
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok { // the v2 hierarchy's line
			path = rest
		}
	}
	if path == "" {
		return 0, false, nil
	}
	var smallest uint64
	found := false
	for dir := filepath.Join(cgroupMount, path); ; dir = filepath.Dir(dir) {
		raw, err := os.ReadFile(filepath.Join(dir, "memory.max"))
		if err == nil {
			if v, perr := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64); perr == nil && (!found || v < smallest) {
				smallest, found = v, true
			} // "max" sets no limit
		} else if !errors.Is(err, os.ErrNotExist) {
			return 0, false, err
		}
		if dir == cgroupMount || dir == filepath.Dir(dir) {
			return smallest, found, nil
		}
	}
}
