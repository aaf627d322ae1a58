// Package peer is the protocol between the pods of a cluster, both ends of it: the writes a pod
// sends its peers (Op, their binary batches, the senders that queue and batch them, the streams
// that carry the batches), the other calls a pod makes of a peer (room for creates, membership,
// inventory, dumps, requests forwarded on a client's behalf), and the receiving end that answers
// them (Server, which the internal port mounts).
//
// The calls go through a Transport: HTTP between running pods (NewHTTP), or a Network in memory,
// which tests partition, delay and make lose answers without a socket. The replication logic
// (package replication) decides what to send to whom; this package only carries it.
package peer
