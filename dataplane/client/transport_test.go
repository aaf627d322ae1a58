package client_test

import (
	"net/http"
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
