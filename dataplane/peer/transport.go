package peer

import (
	"context"
	"io"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Transport reaches the other pods of a cluster.
type Transport interface {
	// Peer is the link to member m. Links are cheap to make; one that sends batches of writes
	// (Apply) keeps their stream open until it is closed.
	Peer(m wire.Member) Peer
}

// Peer is what a pod asks of another. Failures the peer answered are *client.Error, with the
// HTTP status and the API's code, whatever the transport; other errors mean no answer came.
type Peer interface {
	// Apply sends a batch of writes, applied in order, and answers per write whether the peer
	// holds it (Holds), lacks the filter's incarnation (Lacks) or refused it (Fenced). Calls must
	// not overlap: a peer's sender makes them one at a time.
	Apply(ctx context.Context, ops []Op) ([]Outcome, error)
	// CheckRoom asks whether the peer can hold the filters of a batch of creates; the error is
	// its refusal when it cannot (507).
	CheckRoom(ctx context.Context, creates []Op) error
	// Membership answers the membership the peer was last told.
	Membership(ctx context.Context) (wire.Membership, error)
	// Inventory answers what the peer holds: a digest of every live filter, and the tombstones.
	Inventory(ctx context.Context) (wire.Inventory, error)
	// Dump answers the filter's state in the snapshot's record format, as a stream to read and
	// close, and its length in bytes, or -1 when unknown; only the partitions listed (nil: every
	// one the peer holds; empty: none, the filter's definition alone). ctx bounds the whole read.
	Dump(ctx context.Context, name string, partitions []int) (io.ReadCloser, int64, error)
	// Forward sends a client's request (requestURI is its path and query) for the peer to serve
	// itself, and answers the peer's answer whatever its status.
	Forward(ctx context.Context, method, requestURI, contentType string, body []byte) (client.Answer, error)
	// Serve asks the peer to serve values of the filter name itself: a multi-check from its own
	// copy, or a multi-check-and-set or multi-set at level. Answers are nil for a multi-set.
	Serve(ctx context.Context, level wire.Consistency, op wire.FilterOp, name string, values []string) ([]bool, error)
	// Close lets go of what the link holds open.
	Close() error
}
