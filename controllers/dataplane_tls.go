package controllers

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
)

// tlsClientIdle is how long a TLS Secret's client is kept unused: every pass of a cluster uses
// its client, so only a cluster that is gone, or no longer has spec.tls, leaves one this idle.
const tlsClientIdle = time.Hour

// tlsClients holds one HTTP client per TLS Secret, for the version of the Secret it was built
// from: the pods of a cluster reuse its connections from pass to pass, and a renewed Secret (a
// new resourceVersion) gets a new client, so that new connections present the new certificate.
type tlsClients struct {
	mu      sync.Mutex
	clients map[string]*tlsClient // by the Secret's namespace/name
}

type tlsClient struct {
	version  string
	http     *http.Client
	lastUsed time.Time
}

// get returns the client of c's Secret at c's version, and builds it with transport when the
// Secret is new or changed.
func (t *tlsClients) get(c *ClusterTLS, transport client.TransportOptions) *http.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if cached := t.clients[c.Secret]; cached != nil && cached.version == c.Version {
		cached.lastUsed = now
		return cached.http
	}
	// A new entry is rare (a new cluster, a renewal): the time to let go of the idle ones.
	for secret, cached := range t.clients {
		if secret == c.Secret || now.Sub(cached.lastUsed) > tlsClientIdle {
			cached.http.CloseIdleConnections()
			delete(t.clients, secret)
		}
	}
	roots, cert := c.Roots, c.Certificate
	transport.TLS = client.PodTLS(func() *x509.CertPool { return roots }, func() (*tls.Certificate, error) { return &cert, nil })
	built := &tlsClient{version: c.Version, http: client.NewHTTPClient(transport), lastUsed: now}
	if t.clients == nil {
		t.clients = map[string]*tlsClient{}
	}
	t.clients[c.Secret] = built
	return built.http
}
