//go:build !linux

package persist

import (
	"errors"
	"os"
)

// syncData makes f's written data durable.
func syncData(f *os.File) error { return f.Sync() }

// freeSpace is not read here: a volume is never refused for its free space.
func freeSpace(string) (uint64, error) { return 0, errors.ErrUnsupported }
