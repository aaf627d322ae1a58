//go:build !linux

package persist

import "os"

// syncData makes f's written data durable.
func syncData(f *os.File) error { return f.Sync() }
