package persist

import (
	"os"
	"syscall"
)

// syncData makes f's written data durable. The log only appends, so fdatasync is enough: it
// flushes the data and the size that reading it back needs, and skips the timestamps that fsync
// would also write through the file system's journal.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
