package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
)

// Each caller keeps its own pool sizes and timeouts, and only a caller that asks goes through the
// environment's proxy: pods are addressed directly.
func TestNewHTTPClient(t *testing.T) {
	o := client.TransportOptions{DialTimeout: time.Second, MaxIdleConns: 7, MaxIdleConnsPerHost: 3, TLSHandshakeTimeout: 4 * time.Second, ExpectContinueTimeout: 5 * time.Second}
	tr := client.NewHTTPClient(o).Transport.(*http.Transport)
	if tr.MaxIdleConns != 7 || tr.MaxIdleConnsPerHost != 3 || tr.TLSHandshakeTimeout != 4*time.Second || tr.ExpectContinueTimeout != 5*time.Second {
		t.Errorf("transport %+v does not have the options %+v", tr, o)
	}
	if tr.Proxy != nil || tr.IdleConnTimeout <= 0 {
		t.Errorf("without ProxyFromEnvironment: proxy set %t, idle connections kept for %s", tr.Proxy != nil, tr.IdleConnTimeout)
	}
	o.ProxyFromEnvironment = true
	if tr := client.NewHTTPClient(o).Transport.(*http.Transport); tr.Proxy == nil {
		t.Error("with ProxyFromEnvironment: no proxy function")
	}
}

// A pod's answer that redirects is an error, and the request never goes where it points: a peer
// or the operator would otherwise send its request, and what it carries, to an address it did
// not choose.
func TestRedirectsAreNotFollowed(t *testing.T) {
	var reached atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer elsewhere.Close()
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer pod.Close()
	c := client.New(pod.URL)
	if _, err := c.Membership(t.Context()); err == nil {
		t.Error("a redirected call succeeded")
	}
	if _, err := c.Forward(t.Context(), http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{"value":"x"}`)); err != nil {
		t.Errorf("Forward hands any answer back: %v", err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect target was called %d times", n)
	}
}
