package httpapi

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/internal/await"
)

// TestStalledDumpReaderIsDroppedAndItsCopyReleased starts a dump of a 16 MiB filter for a client
// that reads nothing. The dump holds the whole copy budget while it waits, so that no other dump
// copies anything meanwhile; once a write has waited past the request timeout the reader is
// dropped, its share comes back, and the next dump is served whole.
func TestStalledDumpReaderIsDroppedAndItsCopyReleased(t *testing.T) {
	cfg := config.Default()
	cfg.RequestTimeout = 300 * time.Millisecond
	s := newTestAPI(t, cfg)
	const budget = 1 << 20
	s.peers = peer.NewServer(peer.ServerOptions{Host: s.Node, Store: s.Store, MaxRequestBytes: cfg.MaxHTTPRequestLength, DumpCopyBytes: budget})
	f, _, err := s.Store.Create("big", filter.Options{Capacity: 16_000_000, FPP: 0.01}, false)
	if err != nil {
		t.Fatal(err)
	}
	if f.SizeBytes() < 16<<20 {
		t.Fatalf("the filter takes %d bytes, want more than the socket buffers hold", f.SizeBytes())
	}
	if err := f.AddMany([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.ClientHandler())
	t.Cleanup(hs.Close)

	var dialer net.Dialer
	stalled, err := dialer.DialContext(t.Context(), "tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stalled.Close() }()
	_ = stalled.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(stalled, "GET /v1/bloomfilter/big/dump HTTP/1.1\r\nHost: bloomery\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the stalled dump to hold the whole budget", func() bool { return s.peers.DumpBytesHeld() == budget })
	await.True(t, 10*time.Second, "the stalled reader to be dropped and the budget to come back", func() bool { return s.peers.DumpBytesHeld() == 0 })

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/v1/bloomfilter/big/dump", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	got, _, err := persist.ReadDump(res.Body, 64<<20)
	if err != nil {
		t.Fatalf("dump after the stalled one: %v", err)
	}
	want := f.State()
	if len(got.Parts) != 1 || len(got.Parts[0].Layers) != 1 || !slices.Equal(got.Parts[0].Layers[0].Words, want.Parts[0].Layers[0].Words) {
		t.Error("the dump after the stalled one differs from the filter")
	}
}

// A dump that would copy more than maxDumpBytes is answered 507 without copying a bit, and the
// limit counts the partitions asked for: a dump of one partition of the same filter is served.
func TestDumpLargerThanMaxDumpBytesIsRefused(t *testing.T) {
	cfg := config.Default()
	s := newTestAPI(t, cfg)
	f, _, err := s.Store.Create("big", filter.Options{Capacity: 4_000_000, FPP: 0.01, Partitions: 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(f.SizeBytes()) / 2 // two partitions' worth
	s.peers = peer.NewServer(peer.ServerOptions{Host: s.Node, Store: s.Store, MaxRequestBytes: cfg.MaxHTTPRequestLength, MaxDumpBytes: limit})
	hs := httptest.NewServer(s.ClientHandler())
	t.Cleanup(hs.Close)

	get := func(query string) (status int, body []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/v1/bloomfilter/big/dump"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		body, err = io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, body
	}
	status, body := get("")
	want := fmt.Sprintf(`the dump of \"big\" would copy %d bytes of bits, and maxDumpBytes is %d`, f.SizeBytes(), limit)
	if status != http.StatusInsufficientStorage || !strings.Contains(string(body), want) {
		t.Errorf("a dump of %d bytes with maxDumpBytes %d: %d %s; want 507 saying %s", f.SizeBytes(), limit, status, body, want)
	}
	status, body = get("?partitions=1")
	if status != http.StatusOK {
		t.Fatalf("a dump of one partition of four, within maxDumpBytes: %d %q", status, body)
	}
	if _, _, err := persist.ReadDump(bytes.NewReader(body), int64(len(body))); err != nil {
		t.Errorf("the dump of one partition does not decode: %v", err)
	}
}
