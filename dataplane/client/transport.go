package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
	// TLS is how https pods are verified and what they are shown (see PodTLS); nil uses the
	// system's roots.
	TLS *tls.Config
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
		TLSClientConfig:       o.TLS,
	}
	if o.ProxyFromEnvironment {
		t.Proxy = http.ProxyFromEnvironment
	}
	// A pod never redirects; a redirect would send the request, and whatever it carries, to an
	// address the caller did not choose.
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// PodTLS is the TLS configuration of a client of a cluster's pods: a pod's certificate must chain
// to roots(), whatever names it carries, since pods are called by IP and the CA is the cluster's
// own, so being signed by it is what makes a pod. cert, when not nil, is presented to the pods'
// internal ports, which require one from the same CA. Both are called at every handshake, so a
// renewal takes effect for the next connection.
func PodTLS(roots func() *x509.CertPool, cert func() (*tls.Certificate, error)) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The standard verification checks the name too; VerifyConnection does the rest of it.
		InsecureSkipVerify: true, //nolint:gosec // the chain is verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the pod presented no certificate")
			}
			opts := x509.VerifyOptions{
				Roots:         roots(),
				Intermediates: x509.NewCertPool(),
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			for _, inter := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(inter)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("the pod's certificate is not the cluster's: %w", err)
			}
			return nil
		},
	}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() }
	}
	return c
}
