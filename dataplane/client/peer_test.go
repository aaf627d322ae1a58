package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// What a peer applies is what the pod holds afterwards: in its checks, its inventory and its dump.
func TestPeerCalls(t *testing.T) {
	d, c := startDataPlane(t, nil)
	peer := client.New(d.internal.URL, client.Internal(testToken), client.Forwarded())
	ctx := t.Context()
	opts := filter.Options{Capacity: 1000, FPP: 0.01}
	gen := time.Now().UnixNano()
	applied, err := peer.Apply(ctx, replication.AppendOps(nil, []replication.Op{
		{Kind: replication.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: replication.OpAdd, Name: "f", Generation: gen, Keys: []string{"a", "b"}},
		{Kind: replication.OpAdd, Name: "g", Generation: gen, Keys: []string{"x"}}, // no such filter
	}))
	if err != nil || !slices.Equal(applied, []bool{true, true, false}) {
		t.Fatalf("Apply = %v, %v; want [true true false]", applied, err)
	}
	if present, err := c.MultiCheck(ctx, "f", []string{"a", "b", "c"}); err != nil || !slices.Equal(present, []bool{true, true, false}) {
		t.Fatalf("after Apply, MultiCheck = %v, %v", present, err)
	}
	if _, err := peer.Apply(ctx, []byte("BOP1 and then nonsense")); !client.IsBadParameter(err) {
		t.Errorf("Apply of a malformed batch = %v, want a bad parameter", err)
	}

	inv, err := peer.Inventory(ctx)
	if err != nil || len(inv.Filters) != 1 || inv.Filters[0].Name != "f" || inv.Filters[0].Generation != gen || len(inv.Filters[0].Layers) != 1 {
		t.Fatalf("Inventory = %+v, %v; want filter f of generation %d", inv, err, gen)
	}

	body, size, err := peer.Dump(ctx, "f")
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
	if _, _, err := peer.Dump(ctx, "missing"); !client.IsNotFound(err) {
		t.Errorf("Dump of a missing filter = %v, want not found", err)
	}
}

// Forward hands back the pod's answer as it is, errors included; Err reads them as the other
// methods would return them.
func TestForward(t *testing.T) {
	d, c := startDataPlane(t, nil)
	if _, _, err := c.Create(t.Context(), "f", client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(t.Context(), "f", "v"); err != nil {
		t.Fatal(err)
	}
	peer := client.New(d.internal.URL, client.Internal(testToken), client.Forwarded())
	forward := func(op wire.FilterOp) client.Answer {
		t.Helper()
		a, err := peer.Forward(t.Context(), http.MethodPost, wire.FilterOpPath("f", op), "application/json", []byte(`{"value":"v"}`))
		if err != nil {
			t.Fatalf("Forward %s: %v", op, err)
		}
		return a
	}
	if a := forward(wire.OpCheck); a.Status != http.StatusOK || strings.TrimSpace(string(a.Body)) != "true" || a.ContentType != "application/json" || a.Err() != nil {
		t.Errorf("Forward check = %d %s %s, %v; want 200 true", a.Status, a.ContentType, a.Body, a.Err())
	}
	// A pod that knows no peers refuses to serve as a filter's home.
	if a := forward(wire.OpCheckAndSet); a.Status != http.StatusServiceUnavailable || !hasCode(a.Err(), wire.CodeUnavailable) {
		t.Errorf("Forward check-and-set = %d %s, %v; want its 503 with code 7 as an answer", a.Status, a.Body, a.Err())
	}
}

func hasCode(err error, code int) bool {
	e, ok := errors.AsType[*client.Error](err)
	return ok && e.Code == code
}

// Only a client made with Forwarded marks its requests as a pod's.
func TestForwardedHeader(t *testing.T) {
	headers := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header.Get(wire.ForwardedHeader)
		_, _ = io.WriteString(w, `{"filters":[],"tombstones":[]}`)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		c    *client.Client
		want string
	}{{client.New(srv.URL), ""}, {client.New(srv.URL, client.Forwarded()), "1"}} {
		if _, err := tc.c.Inventory(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := <-headers; got != tc.want {
			t.Errorf("%s = %q, want %q", wire.ForwardedHeader, got, tc.want)
		}
	}
}

// A client made with Internal calls the public API under wire.InternalPath with the token, as the
// operator does; with a wrong token every call is refused with code 10.
func TestInternalClient(t *testing.T) {
	d, _ := startDataPlane(t, nil)
	operator := client.New(d.internal.URL, client.Internal(testToken))
	if _, created, err := operator.Create(t.Context(), "f", client.CreateOptions{}); err != nil || !created {
		t.Fatalf("Create through the internal port = %v, %v", created, err)
	}
	if req := d.internal.lastRequest(t); req.method != http.MethodPut || req.path != "/internal/v1/bloomfilter/f" {
		t.Errorf("request %s %s, want PUT /internal/v1/bloomfilter/f", req.method, req.path)
	}
	stranger := client.New(d.internal.URL, client.Internal("not-the-cluster-token"))
	for name, call := range map[string]func() error{
		"Get":        func() error { _, err := stranger.Get(t.Context(), "f"); return err },
		"Membership": func() error { _, err := stranger.Membership(t.Context()); return err },
		"Inventory":  func() error { _, err := stranger.Inventory(t.Context()); return err },
	} {
		var e *client.Error
		if err := call(); !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != wire.CodeUnauthorized {
			t.Errorf("%s with a wrong token = %v, want 401 code %d", name, err, wire.CodeUnauthorized)
		}
	}
}
