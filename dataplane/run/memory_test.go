//go:build linux

package run

import (
	"os"
	"path/filepath"
	"testing"
)

// The cgroup's limit is the smallest memory.max on the way from the process's cgroup to the
// root; "max" sets none.
func TestCgroupMemoryMax(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self-cgroup")
	mount := filepath.Join(root, "fs")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	savedSelf, savedMount := procSelfCgroup, cgroupMount
	t.Cleanup(func() { procSelfCgroup, cgroupMount = savedSelf, savedMount })
	procSelfCgroup, cgroupMount = self, mount

	if _, ok, err := cgroupMemoryMax(); err != nil || ok {
		t.Fatalf("without /proc/self/cgroup: %v, %v; want no limit", ok, err)
	}
	write(self, "0::/kubepods/pod1/container\n")
	write(filepath.Join(mount, "kubepods", "pod1", "container", "memory.max"), "max\n")
	if _, ok, err := cgroupMemoryMax(); err != nil || ok {
		t.Fatalf(`with "max" only: %v, %v; want no limit`, ok, err)
	}
	write(filepath.Join(mount, "kubepods", "pod1", "memory.max"), "1073741824\n")
	write(filepath.Join(mount, "kubepods", "memory.max"), "4294967296\n")
	if v, ok, err := cgroupMemoryMax(); err != nil || !ok || v != 1<<30 {
		t.Fatalf("with a pod limit of 1 GiB under 4 GiB: %d, %v, %v", v, ok, err)
	}
	write(self, "12:memory:/old\n") // cgroup v1 only
	if _, ok, err := cgroupMemoryMax(); err != nil || ok {
		t.Fatalf("cgroup v1: %v, %v; want no limit read", ok, err)
	}
}
