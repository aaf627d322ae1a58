package peer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// opsPeer is a fake peer that takes batches as a pod does: as requests to wire.ApplyPath, and on
// streams when streams is true (else it answers their upgrade 404, as a pod of an earlier version
// would). apply answers each batch. Its counters say how each batch came.
type opsPeer struct {
	wire.Member
	streams  *StreamServer
	requests atomic.Int32 // batches that came as requests
	upgrades atomic.Int32 // streams opened
	streamed atomic.Int32 // batches that came on streams
}

func newOpsPeer(t testing.TB, streams bool, opts StreamOptions, apply func(ops []Op) ([]Outcome, error)) *opsPeer {
	t.Helper()
	p := &opsPeer{}
	decoded := func(raw []byte) ([]Outcome, error) {
		ops, err := DecodeOps(raw)
		if err != nil {
			return nil, err
		}
		return apply(ops)
	}
	p.streams = NewStreamServer(func(raw []byte) ([]Outcome, error) {
		p.streamed.Add(1)
		return decoded(raw)
	}, opts)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == wire.ApplyStreamPath && streams:
			p.upgrades.Add(1)
			if err := p.streams.Upgrade(w, r); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		case r.URL.Path == wire.ApplyPath && r.Method == http.MethodPost:
			p.requests.Add(1)
			raw, _ := io.ReadAll(r.Body)
			applied, err := decoded(raw)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(wire.ErrorBody{Error: err.Error(), Code: wire.CodeBadParameter})
				return
			}
			_ = json.NewEncoder(w).Encode(ApplyResponse(applied))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() {
		p.streams.Close()
		hs.Close()
	})
	p.Member = wire.Member{Name: "peer", URL: hs.URL}
	return p
}

// allApplied applies every op.
func allApplied(ops []Op) ([]Outcome, error) {
	applied := make([]Outcome, len(ops))
	for i := range applied {
		applied[i] = Holds
	}
	return applied, nil
}

// linkTo is a sender of writes to a peer over HTTP, with its counters.
type linkTo struct {
	*Sender
	h                       *HTTP
	sent, dropped, streamed atomic.Int64
}

func newLinkTo(t testing.TB, m wire.Member, timeout time.Duration) *linkTo {
	t.Helper()
	l := &linkTo{}
	l.h = NewHTTP(HTTPOptions{DialTimeout: timeout, Streamed: &l.streamed})
	l.Sender = NewSender(m.Name, l.h.Peer(m), SenderOptions{MaxBatchBytes: 4 << 20, Timeout: timeout, Sent: &l.sent, Dropped: &l.dropped})
	ctx, cancel := context.WithCancel(context.Background())
	go l.Run(ctx)
	t.Cleanup(cancel)
	return l
}

// write sends op and waits for the peer's acknowledgement.
func (l *linkTo) write(op Op) error {
	acks := make(chan Ack, 1)
	l.Enqueue(op, AckTo{Ch: acks})
	return (<-acks).Err
}

func add(key string) Op {
	return Op{Kind: OpAdd, Name: "f", Generation: 1, Keys: []string{key}}
}

// Writes to a peer that takes streams travel on one stream, none as a request.
func TestWritesTravelOnOneStream(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	peer := newOpsPeer(t, true, StreamOptions{MaxBatchBytes: 1 << 20}, func(ops []Op) ([]Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, op := range ops {
			keys = append(keys, op.AllKeys()...)
		}
		return allApplied(ops)
	})
	n := newLinkTo(t, peer.Member, 5*time.Second)
	for _, k := range []string{"a", "b", "c"} {
		if err := n.write(add(k)); err != nil {
			t.Fatalf("write of %s: %v", k, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(keys, ",") != "a,b,c" || peer.upgrades.Load() != 1 || peer.streamed.Load() != 3 || peer.requests.Load() != 0 {
		t.Errorf("the peer got %v in %d batches on %d streams and %d requests; want a, b and c in 3 batches on one stream",
			keys, peer.streamed.Load(), peer.upgrades.Load(), peer.requests.Load())
	}
	if sent, streamed := n.sent.Load(), n.streamed.Load(); sent != 3 || streamed != 3 {
		t.Errorf("%d batches counted sent, %d streamed; want 3 and 3", sent, streamed)
	}
}

// A peer that takes no stream (an earlier version, during a rollout) is sent requests, and is not
// asked for a stream again with every batch.
func TestAPeerWithoutStreamsIsSentRequests(t *testing.T) {
	peer := newOpsPeer(t, false, StreamOptions{}, allApplied)
	n := newLinkTo(t, peer.Member, 5*time.Second)
	var upgrades atomic.Int32
	n.h.http.Transport = countUpgrades(n.h.http.Transport, &upgrades)
	for _, k := range []string{"a", "b", "c"} {
		if err := n.write(add(k)); err != nil {
			t.Fatalf("write of %s: %v", k, err)
		}
	}
	if peer.requests.Load() != 3 || upgrades.Load() != 1 {
		t.Errorf("%d requests after %d upgrades asked, want 3 after one", peer.requests.Load(), upgrades.Load())
	}
	if sent, streamed := n.sent.Load(), n.streamed.Load(); sent != 3 || streamed != 0 {
		t.Errorf("%d batches counted sent, %d streamed; want 3 and none", sent, streamed)
	}
}

// countUpgrades counts the upgrades asked through rt.
func countUpgrades(rt http.RoundTripper, n *atomic.Int32) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Upgrade") != "" {
			n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A stream the peer closed while it waited (the peer restarted, or closed it idle) costs no
// write: the batch goes again on a new one.
func TestAStreamClosedWhileIdleIsOpenedAgain(t *testing.T) {
	peer := newOpsPeer(t, true, StreamOptions{MaxBatchBytes: 1 << 20, IdleTimeout: 20 * time.Millisecond}, allApplied)
	n := newLinkTo(t, peer.Member, 5*time.Second)
	if err := n.write(add("a")); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the peer to close the idle stream", func() bool { return peer.streams.Streams() == 0 })
	if err := n.write(add("b")); err != nil {
		t.Fatalf("a write after the peer closed the idle stream: %v", err)
	}
	if peer.upgrades.Load() != 2 || peer.streamed.Load() != 2 {
		t.Errorf("%d batches on %d streams, want 2 on 2", peer.streamed.Load(), peer.upgrades.Load())
	}
}

// A batch the peer refuses fails its writes with the peer's reason, and the stream carries the
// next.
func TestARefusedBatchFailsItsWritesAndKeepsTheStream(t *testing.T) {
	peer := newOpsPeer(t, true, StreamOptions{MaxBatchBytes: 1 << 20}, func(ops []Op) ([]Outcome, error) {
		if ops[0].AllKeys()[0] == "bad" {
			return nil, errors.New("ops[0]: not this one")
		}
		return allApplied(ops)
	})
	n := newLinkTo(t, peer.Member, 5*time.Second)
	err := n.write(add("bad"))
	if err == nil || !strings.Contains(err.Error(), "not this one") {
		t.Errorf("a refused write: %v, want the peer's reason", err)
	}
	if err := n.write(add("good")); err != nil {
		t.Fatalf("the write after: %v", err)
	}
	if peer.upgrades.Load() != 1 || peer.streamed.Load() != 2 {
		t.Errorf("%d batches on %d streams, want 2 on one", peer.streamed.Load(), peer.upgrades.Load())
	}
}

// A peer that does not answer a batch within the replication timeout fails its writes then, and
// the next batch goes on a new stream.
func TestABatchNotAnsweredInTimeFailsAndTheNextGetsANewStream(t *testing.T) {
	release := make(chan struct{})
	peer := newOpsPeer(t, true, StreamOptions{MaxBatchBytes: 1 << 20}, func(ops []Op) ([]Outcome, error) {
		if ops[0].AllKeys()[0] == "slow" {
			<-release
		}
		return allApplied(ops)
	})
	defer close(release)
	n := newLinkTo(t, peer.Member, 200*time.Millisecond)
	if err := n.write(add("slow")); err == nil {
		t.Fatalf("a write the peer sits on: %v, want an error", err)
	}
	if err := n.write(add("quick")); err != nil {
		t.Fatalf("the write after: %v", err)
	}
	if peer.upgrades.Load() != 2 {
		t.Errorf("%d streams, want 2: the one timed out is not used again", peer.upgrades.Load())
	}
}

// BenchmarkSend is a write sent to one peer over HTTP, waiting for its acknowledgement: the queue,
// the batch's encoding, sending it and decoding the answer, on a stream or as requests (a peer
// that takes no stream). The fake peer decodes each batch, so its cost is in the numbers too;
// many writers at once make batches of several writes.
func BenchmarkSend(b *testing.B) {
	for _, streams := range []bool{true, false} {
		name := "requests"
		if streams {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			p := newOpsPeer(b, streams, StreamOptions{MaxBatchBytes: 32 << 20}, allApplied)
			n := newLinkTo(b, p.Member, 2*time.Second)
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(i)
			}
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := n.write(Op{Kind: OpAdd, Name: "f", Generation: 1, Keys: keys}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
