package replication

import "sync/atomic"

// Stats count what the node did, for metrics.
type Stats struct {
	ReplicatedOps       atomic.Int64 // writes forwarded to peers
	ReplicationFailures atomic.Int64 // writes answered 503: too few pods acknowledged in time
	DroppedOps          atomic.Int64 // writes not queued for a peer whose queue was full
	SentBatches         atomic.Int64 // batches that carried writes to a peer
	StreamedBatches     atomic.Int64 // of SentBatches, those that went on a stream
	ForwardedRequests   atomic.Int64 // requests sent on clients' behalf: to homes, quorum reads, routed values
	HomeUnavailable     atomic.Int64 // check-and-sets and creates answered 503 code 13: their home did not serve them
	Merges              atomic.Int64 // dumps merged that changed something
	MergedBytes         atomic.Int64 // bytes of the layers those merges changed
	AntiEntropyPasses   atomic.Int64
	Differences         atomic.Int64 // filters found different (or missing, or deleted) by a repair
}

// QueuedWrites answers, per peer name, the writes waiting to be sent: the replication lag.
func (n *Node) QueuedWrites() map[string]int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int64, len(n.senders))
	for m, s := range n.senders {
		out[m.Name] = s.Queued()
	}
	return out
}
