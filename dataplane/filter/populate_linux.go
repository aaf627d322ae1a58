package filter

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

// populate maps the whole pages of b, about to be written, at once (MADV_POPULATE_WRITE, Linux
// 5.14 and later): one call costs less than a fault per page. Refused, it does nothing: the
// pages fault in as they are written.
func populate(b []byte) {
	if len(b) < pageSize {
		return
	}
	lead := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & (pageSize - 1)
	b = b[lead:]
	if whole := len(b) &^ (pageSize - 1); whole > 0 {
		_ = unix.Madvise(b[:whole], unix.MADV_POPULATE_WRITE)
	}
}
