//go:build !linux

package filter

// populate does nothing where MADV_POPULATE_WRITE does not exist: pages fault in as they are
// written.
func populate([]byte) {}
