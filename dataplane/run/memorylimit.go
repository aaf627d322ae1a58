package run

import (
	"fmt"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// memoryShare is the part of the memory the process may use that the filters get when the
// configuration sets no maxTotalBytes. The rest is headroom: recovery holds a filter's bits twice
// while it restores them, and a snapshot, a dump or a catch-up copies a filter.
const memoryShare = 0.4

// memoryLimit is the memory the process may use, and where that figure comes from.
type memoryLimit struct {
	bytes  uint64
	source string
}

// totalBytesDefault is the filters' share of the process's memory limit, and a sentence saying
// where it comes from for the start log.
func totalBytesDefault() (uint64, string, error) {
	limit, err := processMemoryLimit()
	if err != nil {
		return 0, "", err
	}
	share := uint64(float64(limit.bytes) * memoryShare)
	return share, fmt.Sprintf("%.0f%% of %s (%s), as maxTotalBytes is not set", memoryShare*100, filter.FormatBytes(limit.bytes), limit.source), nil
}
