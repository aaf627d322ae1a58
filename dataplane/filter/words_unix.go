//go:build unix

package filter

import (
	"syscall"
	"unsafe"
)

// allocWords maps n zeroed words of anonymous memory; release unmaps them. Pages cost RSS only
// once written, as heap pages do.
func allocWords(n int) (words []uint64, release func()) {
	mem, err := syscall.Mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		// The memory budget was reserved before the allocation, so the system refusing it is
		// as fatal as the heap failing to grow would be.
		panic("filter: mapping a bit array of " + FormatBytes(uint64(n)*8) + ": " + err.Error())
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), n), func() { _ = syscall.Munmap(mem) }
}
