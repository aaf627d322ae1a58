//go:build unix

package filter

import (
	"fmt"
	"syscall"
	"unsafe"
)

// mmap is syscall.Mmap; tests make it refuse. munmap is syscall.Munmap; tests count it.
var mmap, munmap = syscall.Mmap, syscall.Munmap

// allocWords maps n zeroed words of anonymous memory; release unmaps them. Pages cost RSS only
// once written, as heap pages do. The system may refuse the mapping (an address-space limit, an
// overcommit policy) even within the memory budget: that is an error for the one write that
// needed the memory, not the end of the process.
func allocWords(n int) (words []uint64, release func(), err error) {
	mem, err := mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping a bit array of %s: %w", FormatBytes(uint64(n)*8), err)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), n), func() { _ = munmap(mem) }, nil
}
