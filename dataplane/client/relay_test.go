package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

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
	if a := forward(wire.OpCheckAndSet); a.Status != http.StatusServiceUnavailable || !hasCode(a.Err(), wire.CodeHomeUnavailable) {
		t.Errorf("Forward check-and-set = %d %s, %v; want its 503 with code 13 as an answer", a.Status, a.Body, a.Err())
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
		_, _ = io.WriteString(w, `{"epoch":0,"self":"","members":[]}`)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		c    *client.Client
		want string
	}{{client.New(srv.URL), ""}, {client.New(srv.URL, client.Forwarded()), "1"}} {
		if _, err := tc.c.Membership(t.Context()); err != nil {
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
		"Placement":  func() error { _, err := stranger.PlacementStatus(t.Context()); return err },
	} {
		var e *client.Error
		if err := call(); !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != wire.CodeUnauthorized {
			t.Errorf("%s with a wrong token = %v, want 401 code %d", name, err, wire.CodeUnauthorized)
		}
	}
}
