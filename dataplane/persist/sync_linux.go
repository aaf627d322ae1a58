package persist

import (
	"errors"
	"os"
	"syscall"
)

// syncData makes f's written data durable. The log only appends, so fdatasync is enough: it
// flushes the data and the size that reading it back needs, and skips the timestamps that fsync
// would also write through the file system's journal.
func syncData(f *os.File) error {
	for {
		err := fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// fdatasync is the system call; tests count the calls, to tell a durable write from one that is
// only in the page cache, which no crash of the process alone can.
var fdatasync = syscall.Fdatasync

// freeSpace answers the bytes of dir's file system that the process may still write.
func freeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
