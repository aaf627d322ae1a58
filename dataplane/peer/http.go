package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// HTTPOptions configure the transport of a running pod.
type HTTPOptions struct {
	// Token is the cluster's bearer token, which the peers' internal ports require.
	Token string
	// TLS verifies https peers and presents this pod's certificate to them; nil for http.
	TLS *tls.Config
	// DialTimeout bounds connecting to a peer, and its TLS handshake.
	DialTimeout time.Duration
	Log         *slog.Logger
	// Streamed counts the batches that went on a stream; nil counts nothing.
	Streamed *atomic.Int64
}

// HTTP is the transport between running pods: every call a request to the member's internal
// port (Member.URL) with the cluster's token, marked as a pod's (wire.ForwardedHeader), and the
// batches of writes on one stream per peer, upgraded from that port (frame.go).
type HTTP struct {
	opts HTTPOptions
	http *http.Client
}

// NewHTTP is the transport of a running pod; its connections are pooled across every peer.
func NewHTTP(o HTTPOptions) *HTTP {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Streamed == nil {
		o.Streamed = new(atomic.Int64)
	}
	return &HTTP{opts: o, http: client.NewHTTPClient(client.TransportOptions{
		DialTimeout:         o.DialTimeout,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		TLSHandshakeTimeout: o.DialTimeout,
		TLS:                 o.TLS,
	})}
}

// Peer is the link to m over HTTP.
func (t *HTTP) Peer(m wire.Member) Peer {
	return &httpPeer{t: t, name: m.Name, client: client.New(m.URL, client.WithHTTPClient(t.http), client.Internal(t.opts.Token), client.Forwarded())}
}

type httpPeer struct {
	t      *HTTP
	name   string
	client *client.Client

	// Apply's: the stream to the peer (nil until the next batch opens one), the time until which
	// the peer is sent requests instead, and the buffer batches are framed in.
	mu         sync.Mutex
	stream     *Stream
	streamless time.Time
	frame      []byte
}

// Apply sends ops on the stream to the peer, or as a request when the peer takes none.
func (p *httpPeer) Apply(ctx context.Context, ops []Op) ([]Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	applied, again, err := p.applyOnce(ctx, ops)
	if again {
		// The stream waited since its last batch, and the peer may have closed it meanwhile
		// (restarted, or closed it idle): the batch goes once more. Writes are idempotent, so
		// one that did arrive the first time is only applied twice.
		applied, _, err = p.applyOnce(ctx, ops)
	}
	return applied, err
}

// applyOnce is Apply without trying again; again reports a failure on a stream that waited since
// its last batch.
func (p *httpPeer) applyOnce(ctx context.Context, ops []Op) (applied []Outcome, again bool, err error) {
	stream, err := p.openStream(ctx)
	if err != nil {
		return nil, false, err
	}
	if stream == nil {
		// A buffer of its own per batch: the transport may still read a body after the answer
		// came (when the peer answers before reading it all).
		var out wire.ApplyResponse
		err := p.client.Call(ctx, http.MethodPost, wire.ApplyPath, wire.OpsContentType, AppendOps(make([]byte, 0, encodedSizeHint(ops)), ops), &out)
		return OutcomesOf(out), false, err
	}
	p.frame = AppendOps(append(p.frame[:0], make([]byte, FrameHeaderSize)...), ops)
	defer p.trimFrame()
	waited := stream.Used()
	applied, err = stream.Apply(ctx, p.frame)
	if err == nil {
		p.t.opts.Streamed.Add(1)
	}
	if err == nil || IsRefused(err) {
		return applied, false, err
	}
	p.stream = nil
	return nil, waited && ctx.Err() == nil, err
}

// streamRetry is how long a peer that takes no stream is sent requests before it is asked again:
// a pod of an earlier version, which the rollout replaces in minutes.
const streamRetry = time.Minute

// openStream answers the stream to the peer, opened now if need be, or nil when the peer takes
// batches as requests only.
func (p *httpPeer) openStream(ctx context.Context) (*Stream, error) {
	if p.stream != nil || time.Now().Before(p.streamless) {
		return p.stream, nil
	}
	conn, err := p.client.Upgrade(ctx, wire.ApplyStreamPath, wire.ApplyStreamProtocol)
	if err == nil {
		p.stream = NewStream(conn)
		return p.stream, nil
	}
	apiErr, answered := errors.AsType[*client.Error](err)
	if !answered {
		return nil, err // unreachable: a request would not reach it either
	}
	// The batch goes as a request, which a recovering peer (503) refuses as it refused the
	// stream; a peer that does not know streams is sent requests for a while.
	if apiErr.Status != http.StatusServiceUnavailable {
		p.streamless = time.Now().Add(streamRetry)
		p.t.opts.Log.Info("Peer takes no stream of writes: sending them as requests", "peer", p.name,
			"retry", streamRetry.String(), "answer", err.Error())
	}
	return nil, nil
}

// trimFrame lets go of a batch's buffer that a burst made large: each peer's link keeps its own.
func (p *httpPeer) trimFrame() {
	if cap(p.frame) > maxKeptFrame {
		p.frame = nil
	}
}

// maxKeptFrame is the largest buffer a link keeps from one batch to the next.
const maxKeptFrame = 1 << 20

// Close closes the stream to the peer, if one is open.
func (p *httpPeer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stream == nil {
		return nil
	}
	err := p.stream.Close()
	p.stream = nil
	return err
}

func (p *httpPeer) CheckRoom(ctx context.Context, creates []Op) error {
	return p.client.Call(ctx, http.MethodPost, wire.RoomPath, wire.OpsContentType, AppendOps(nil, creates), nil)
}

func (p *httpPeer) Membership(ctx context.Context) (wire.Membership, error) {
	return p.client.Membership(ctx)
}

func (p *httpPeer) Inventory(ctx context.Context) (wire.Inventory, error) {
	var inv wire.Inventory
	err := p.client.Call(ctx, http.MethodGet, wire.InventoryPath, "", nil, &inv)
	return inv, err
}

func (p *httpPeer) Dump(ctx context.Context, name string, partitions []int) (io.ReadCloser, int64, error) {
	return p.client.Open(ctx, DumpPath(name, partitions))
}

// DumpPath is the path of a dump of the partitions listed (nil: every one).
func DumpPath(name string, partitions []int) string {
	path := wire.FilterOpPath(name, wire.OpDump)
	if partitions != nil {
		list := make([]string, len(partitions))
		for i, p := range partitions {
			list[i] = strconv.Itoa(p)
		}
		path += "?" + wire.PartitionsParam + "=" + strings.Join(list, ",")
	}
	return path
}

func (p *httpPeer) Forward(ctx context.Context, method, requestURI, contentType string, body []byte) (client.Answer, error) {
	return p.client.Forward(ctx, method, requestURI, contentType, body)
}

func (p *httpPeer) Serve(ctx context.Context, level wire.Consistency, op wire.FilterOp, name string, values []string) ([]bool, error) {
	return serveThrough(ctx, p.client, level, op, name, values)
}

// serveThrough asks the pod that c calls, as a peer, to serve values of the filter name itself
// (Peer.Serve).
func serveThrough(ctx context.Context, c *client.Client, level wire.Consistency, op wire.FilterOp, name string, values []string) ([]bool, error) {
	switch op {
	case wire.OpMultiCheck:
		return c.MultiCheck(ctx, name, values)
	case wire.OpMultiCheckAndSet:
		return c.At(level).MultiCheckAndSet(ctx, name, values)
	case wire.OpMultiSet:
		return nil, c.At(level).MultiSet(ctx, name, values)
	}
	return nil, fmt.Errorf("%s is not served on a peer", op)
}
