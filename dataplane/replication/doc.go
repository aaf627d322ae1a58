// Package cluster replicates a data plane's filters across the pods of one cluster: the
// membership the operator pushes, the forwarding of writes to peers with a consistency level, the
// home pod of each filter's check-and-set, and the catch-up and anti-entropy that repair a replica
// by OR-merging a peer's dump (docs/replication.md). It knows the engine and the wire contract,
// not the HTTP server that mounts its handlers.
package replication
