package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// File names inside the data directory.
const (
	lockFile     = "lock"
	snapshotFile = "snapshot.db"
	snapshotTmp  = "snapshot.tmp"
)

// ErrLocked means another process holds the data directory.
var ErrLocked = errors.New("data directory is in use by another process")

// dirLock is an exclusive flock on dir/lock, held for the life of the process. The kernel drops
// it when the process dies, so a crash never leaves a stale lock behind.
type dirLock struct{ f *os.File }

// lockDir creates dir if needed and locks it.
func lockDir(dir string) (*dirLock, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("data directory %s is not a directory", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner, _ := os.ReadFile(path)
			return nil, fmt.Errorf("%w: %s (lock held on %s by pid %s)", ErrLocked, dir, path, string(owner))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	// The pid is for the operator reading the error above; the lock itself is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() error { return l.f.Close() }
