package replication

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// peerServer is a fake peer over HTTP answering every request with handle.
func peerServer(t testing.TB, handle http.HandlerFunc) wire.Member {
	t.Helper()
	hs := httptest.NewServer(handle)
	t.Cleanup(hs.Close)
	return wire.Member{Name: "peer", URL: hs.URL}
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
	n := NewNode(Options{Store: filter.NewStore(filter.Limits{}, nil), PodName: "self", Timeout: 2 * time.Second})
	defer n.Close()
	if err := n.SetMembership(wire.Membership{Epoch: 1, Self: "self", Members: []wire.Member{{Name: "self", URL: "http://127.0.0.1:1"}, owner}}); err != nil {
		b.Fatal(err)
	}
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
