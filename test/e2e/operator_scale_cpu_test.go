//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machineCPU is the CPU time, user and system, each kind of process on the machine used so far,
// by role ("kube-apiserver", "etcd", "bloomery operator", "bloomery serve" for the pods summed,
// "e2e.test" for the benchmark itself). On a machine of two cores, the scale benchmark's phases
// share them among all of these: the differences of two readings say where a phase's time went.
type machineCPU map[string]time.Duration

// readMachineCPU reads every process's CPU time from /proc. A process that ended between two
// readings takes its time with it: the benchmark's own short-lived kubectl calls, little.
func readMachineCPU() machineCPU {
	out := machineCPU{}
	if stolen, ok := stolenCPU(); ok {
		out[stolenRole] = stolen
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue // ended since the glob
		}
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		// After the command in parentheses: utime and stime are the 12th and 13th fields, in
		// clock ticks (USER_HZ, 100 on Linux).
		fields := strings.Fields(string(stat[end+1:]))
		if len(fields) < 13 {
			continue
		}
		var ticks int64
		for _, f := range fields[11:13] {
			v, _ := strconv.ParseInt(f, 10, 64)
			ticks += v
		}
		if ticks > 0 {
			out[processRole(dir, string(stat[open+1:end]))] += time.Duration(ticks) * (time.Second / 100)
		}
	}
	return out
}

// stolenRole names the time the hypervisor gave the machine's CPUs to others while this machine's
// processes were ready to run: a phase that shows much of it was measured on a slower machine.
const stolenRole = "(stolen by the hypervisor)"

// stolenCPU reads the steal time of every CPU from /proc/stat (its line "cpu", 8th number).
func stolenCPU() (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, false
	}
	ticks, err := strconv.ParseInt(fields[8], 10, 64)
	return time.Duration(ticks) * (time.Second / 100), err == nil
}

// processRole names a process by its command, and the bloomery binary also by its subcommand: the
// operator and the pods run the same binary.
func processRole(dir, command string) string {
	if command != "bloomery" {
		return command
	}
	cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	if args := bytes.Split(cmdline, []byte{0}); len(args) > 1 {
		return command + " " + string(args[1])
	}
	return command
}

// since lists the roles that used at least a tenth of a second from before to c, the most first,
// and their sum.
func (c machineCPU) since(before machineCPU) string {
	used := map[string]time.Duration{}
	var total time.Duration
	for role, d := range c {
		if d -= before[role]; d > 0 {
			total += d
			if d >= 100*time.Millisecond {
				used[role] = d
			}
		}
	}
	roles := slices.Collect(maps.Keys(used))
	slices.SortFunc(roles, func(a, b string) int { return cmp.Compare(used[b], used[a]) })
	parts := make([]string, 0, len(roles))
	for _, role := range roles {
		parts = append(parts, fmt.Sprintf("%s %.1f s", role, used[role].Seconds()))
	}
	return fmt.Sprintf("%.1f s in all: %s", total.Seconds(), strings.Join(parts, ", "))
}
