package replication

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/batchstream"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// BenchmarkReplicate is a client's write replicated to one peer at consistency all: the queue,
// the batch's encoding, sending it and decoding the answer, on a stream or as requests (a peer
// that takes no stream). The fake peer decodes each batch, so its cost is in the numbers too;
// many writers at once make batches of several writes.
func BenchmarkReplicate(b *testing.B) {
	for _, streams := range []bool{true, false} {
		name := "requests"
		if streams {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			peer := newOpsPeer(b, streams, batchstream.Options{MaxBatchBytes: 32 << 20}, allApplied)
			n := nodeWithPeer(b, peer.Member, 2*time.Second)
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(i)
			}
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := n.Replicate(b.Context(), Op{Kind: OpAdd, Name: "f", Generation: 1, Keys: keys}, wire.ConsistencyAll); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkForward is a client's check-and-set forwarded to its filter's home pod, answered by a
// fake home.
func BenchmarkForward(b *testing.B) {
	home := peerServer(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("false"))
	})
	n := NewNode(Options{Store: filter.NewStore(filter.Limits{}, nil), PodName: "self"})
	defer n.Close()
	if err := n.SetMembership(wire.Membership{Epoch: 1, Self: "self", Members: []wire.Member{{Name: "self", URL: "http://127.0.0.1:1"}, home}}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"value":"key"}`)
	b.ReportAllocs()
	for b.Loop() {
		a, err := n.Forward(b.Context(), home, http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", body)
		if err != nil || a.Status != http.StatusOK {
			b.Fatalf("%+v, %v", a, err)
		}
	}
}

// BenchmarkRoutedCheck is a check of one value that a pod routes to the owner of its partition,
// answered by a fake owner that decodes the values: one caller at a time, and many at once.
func BenchmarkRoutedCheck(b *testing.B) {
	owner := peerServer(b, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Values []string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(make([]bool, len(body.Values)))
	})
	n := nodeWithPeer(b, owner, 2*time.Second)
	for _, callers := range []int{1, 16} {
		b.Run(strconv.Itoa(callers)+"-callers", func(b *testing.B) {
			b.SetParallelism(callers)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				values := []string{"value"}
				for pb.Next() {
					if _, err := n.ServeOn(b.Context(), owner, wire.OpMultiCheck, "f", values, wire.ConsistencyOne); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
