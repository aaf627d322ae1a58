// Package replication keeps a data plane's filters replicated across the pods of one cluster:
// the membership the operator pushes, the senders that replicate each write to the peers with a
// consistency level, the forwarding of a filter's check-and-sets to its home pod, the reads
// widened to a quorum, and the catch-up and anti-entropy that repair a replica by OR-merging a
// peer's dump (docs/replication.md). It decides what to send to whom; package peer carries it,
// over HTTP between running pods and in memory in tests (peer.Network). The HTTP server calls it,
// not the other way round.
package replication
