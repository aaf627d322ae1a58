package config

// MemoryShare is the part of the process's memory limit the filters get when the configuration
// sets no maxTotalBytes: the data plane derives it from the limit it finds, the operator from the
// container's memory limit, so that both say the same. The rest is headroom: recovery holds a
// filter's bits twice while it restores them, a snapshot, a dump or a catch-up copies a filter
// (without maxFilterBytes one filter may hold the whole share), and the Go runtime keeps its heap,
// buffers and stacks in the fifth that is left.
const MemoryShare = 0.4

// FiltersShare is MemoryShare of a memory limit of limit bytes.
func FiltersShare(limit uint64) uint64 { return uint64(float64(limit) * MemoryShare) }
