package run

import (
	"fmt"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
)

// memoryLimit is the memory the process may use, and where that figure comes from.
type memoryLimit struct {
	bytes  uint64
	source string
}

// totalBytesDefault is the filters' share of the process's memory limit (config.MemoryShare, as
// the operator derives it), and a sentence saying where it comes from for the start log.
func totalBytesDefault() (uint64, string, error) {
	limit, err := processMemoryLimit()
	if err != nil {
		return 0, "", err
	}
	share := config.FiltersShare(limit.bytes)
	return share, fmt.Sprintf("%.0f%% of %s (%s), as maxTotalBytes is not set", config.MemoryShare*100, filter.FormatBytes(limit.bytes), limit.source), nil
}
