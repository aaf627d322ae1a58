//go:build !linux

package run

import "errors"

// processMemoryLimit is not known here: maxTotalBytes then stays unlimited unless configured.
func processMemoryLimit() (memoryLimit, error) {
	return memoryLimit{}, errors.New("reading the memory limit is implemented on Linux only")
}
