package client

import (
	"net"
	"net/http"
	"time"
)

// TransportOptions are what the callers of pods set apart on their HTTP clients: the pool's
// sizes follow how many requests they run at once, against how many pods.
type TransportOptions struct {
	// DialTimeout bounds opening a connection: a pod that does not accept in time is down or
	// unreachable, and failing fast lets the caller try another or report it.
	DialTimeout time.Duration
	// MaxIdleConns and MaxIdleConnsPerHost size the pool of kept-alive connections: too few for
	// the requests running at once against one pod, and each burst opens and closes connections
	// until the machine runs out of ephemeral ports.
	MaxIdleConns        int
	MaxIdleConnsPerHost int
	// TLSHandshakeTimeout and ExpectContinueTimeout are http.Transport's; 0 means no limit.
	TLSHandshakeTimeout   time.Duration
	ExpectContinueTimeout time.Duration
	// ProxyFromEnvironment sends requests through the proxy that HTTP_PROXY and the like name.
	// Pods address each other, and the operator addresses pods, directly.
	ProxyFromEnvironment bool
}

// NewHTTPClient returns an HTTP client for calling pods, with kept-alive connections and no
// overall timeout: every call is bounded by its context.
func NewHTTPClient(o TransportOptions) *http.Client {
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          o.MaxIdleConns,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   o.TLSHandshakeTimeout,
		ExpectContinueTimeout: o.ExpectContinueTimeout,
	}
	if o.ProxyFromEnvironment {
		t.Proxy = http.ProxyFromEnvironment
	}
	// A pod never redirects; a redirect would send the request, and whatever it carries, to an
	// address the caller did not choose.
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
