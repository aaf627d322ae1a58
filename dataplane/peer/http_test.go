package peer_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
)

const testToken = "peer-test-token-0123456789abcdef"

// startPod serves a data plane's internal and client ports on loopback.
func startPod(t *testing.T) (internal string, c *client.Client) {
	t.Helper()
	cfg := config.Default()
	cfg.InternalTokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.InternalTokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("run.New: %v", err)
	}
	in := httptest.NewServer(srv.InternalHandler())
	t.Cleanup(in.Close)
	out := httptest.NewServer(srv.ClientHandler())
	t.Cleanup(out.Close)
	return in.URL, client.New(out.URL)
}

// What a peer applies over HTTP, on its stream, is what the pod holds afterwards: in its checks,
// its inventory and its dump.
func TestHTTPPeerCalls(t *testing.T) {
	internal, c := startPod(t)
	var streamed atomic.Int64
	link := peer.NewHTTP(peer.HTTPOptions{Token: testToken, DialTimeout: time.Second, Streamed: &streamed}).Peer(wire.Member{Name: "b", URL: internal})
	t.Cleanup(func() { _ = link.Close() })
	ctx := t.Context()
	opts := filter.Options{Capacity: 1000, FPP: 0.01}
	gen := time.Now().UnixNano()
	applied, err := link.Apply(ctx, []peer.Op{
		{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"a", "b"}},
		{Kind: peer.OpAdd, Name: "g", Generation: gen, Keys: []string{"x"}}, // no such filter
	})
	if err != nil || !slices.Equal(applied, []peer.Outcome{peer.Holds, peer.Holds, peer.Lacks}) {
		t.Fatalf("Apply = %v, %v; want [true true false]", applied, err)
	}
	if streamed.Load() != 1 {
		t.Errorf("%d batches went on a stream, want the one", streamed.Load())
	}
	if present, err := c.MultiCheck(ctx, "f", []string{"a", "b", "c"}); err != nil || !slices.Equal(present, []bool{true, true, false}) {
		t.Fatalf("after Apply, MultiCheck = %v, %v", present, err)
	}

	inv, err := link.Inventory(ctx)
	if err != nil || len(inv.Filters) != 1 || inv.Filters[0].Name != "f" || inv.Filters[0].Generation != gen || len(inv.Filters[0].Layers) != 1 {
		t.Fatalf("Inventory = %+v, %v; want filter f of generation %d", inv, err, gen)
	}

	body, size, err := link.Dump(ctx, "f", nil)
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	raw, err := io.ReadAll(body)
	if err != nil || body.Close() != nil {
		t.Fatalf("reading the dump: %v", err)
	}
	if size >= 0 && size != int64(len(raw)) {
		t.Errorf("Dump said %d bytes and sent %d", size, len(raw))
	}
	st, _, err := persist.ReadDump(bytes.NewReader(raw), int64(len(raw)))
	if err != nil || st.Name != "f" || st.Created.UnixNano() != gen {
		t.Fatalf("the dump reads as %q created %v, %v; want f of generation %d", st.Name, st.Created, err, gen)
	}
	if _, _, err := link.Dump(ctx, "missing", nil); !client.IsNotFound(err) {
		t.Errorf("Dump of a missing filter = %v, want not found", err)
	}
	if err := link.CheckRoom(ctx, []peer.Op{{Kind: peer.OpAdd, Name: "f", Generation: gen}}); !client.IsBadParameter(err) {
		t.Errorf("CheckRoom of an add = %v, want a bad parameter", err)
	}
	huge := filter.Options{Capacity: 1 << 62, FPP: 0.0001}
	if err := link.CheckRoom(ctx, []peer.Op{{Kind: peer.OpCreate, Name: "h", Generation: gen, Options: &huge}}); !client.IsInsufficientSpace(err) {
		t.Errorf("CheckRoom of a filter larger than the pod = %v, want insufficient space", err)
	}
}
