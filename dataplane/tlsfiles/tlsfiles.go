// Package tlsfiles serves a pod's TLS certificate, and trusts its cluster's CA, from files that are
// renewed in place, as a mounted kubernetes.io/tls Secret is: every handshake uses what the files
// hold now, so a renewal takes effect without a restart and without dropping a connection.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// recheckEvery bounds how often a handshake looks at the files: a stat of three files per
// handshake would be cheap too, but a burst of new connections need not repeat it.
const recheckEvery = time.Second

// Source is a certificate, its key and a CA, kept as their files hold them.
type Source struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	mu      sync.Mutex
	checked time.Time // when the files were last looked at
	stamp   string    // their sizes and modification times then
	cert    *tls.Certificate
	roots   *x509.CertPool
}

// Load reads the certificate and key (PEM), and the CA's certificates (PEM) that peers' and the
// operator's certificates must chain to; caFile may be "" for a pod that serves alone. A file that cannot be read or parsed is an error here;
// later, a renewal that fails to load keeps the previous certificate, and says so in the log.
func Load(certFile, keyFile, caFile string, log *slog.Logger) (*Source, error) {
	s := &Source{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	stamp, err := s.stampNow()
	if err != nil {
		return nil, err
	}
	if err := s.load(stamp); err != nil {
		return nil, err
	}
	s.checked = time.Now()
	return s, nil
}

// stampNow describes the files as they are: a change of any shows in it.
func (s *Source) stampNow() (string, error) {
	var stamp strings.Builder
	for _, path := range []string{s.certFile, s.keyFile, s.caFile} {
		if path == "" {
			continue
		}
		fi, err := os.Stat(path) // through the symbolic links a mounted Secret swaps
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&stamp, "%d@%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp.String(), nil
}

func (s *Source) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", s.certFile, s.keyFile, err)
	}
	var roots *x509.CertPool
	if s.caFile != "" {
		caPEM, err := os.ReadFile(s.caFile)
		if err != nil {
			return fmt.Errorf("TLS CA: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(caPEM) {
			return fmt.Errorf("TLS CA %s: no PEM certificate in it", s.caFile)
		}
	}
	s.cert, s.roots, s.stamp = &cert, roots, stamp
	return nil
}

// current answers the certificate and the CA, reloaded first if the files changed.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < recheckEvery {
		return s.cert, s.roots
	}
	s.checked = time.Now()
	stamp, err := s.stampNow()
	switch {
	case err != nil:
		s.log.Warn("TLS files unreadable; serving the certificate loaded before", "error", err.Error())
	case stamp != s.stamp:
		if err := s.load(stamp); err != nil {
			// A Secret's files are swapped at once, but a hand-made renewal may be caught between
			// the certificate and its key: the next look, a second later, sees both.
			s.log.Warn("TLS files changed but do not load; serving the certificate loaded before", "error", err.Error())
		} else {
			s.log.Info("TLS certificate renewed", "notAfter", s.cert.Leaf.NotAfter)
		}
	}
	return s.cert, s.roots
}

// Certificate answers the current certificate.
func (s *Source) Certificate() (*tls.Certificate, error) {
	cert, _ := s.current()
	return cert, nil
}

// Roots answers the current CA; nil without a CA file.
func (s *Source) Roots() *x509.CertPool {
	_, roots := s.current()
	return roots
}

// ServerConfig serves the current certificate. With clientCerts, a client must present a
// certificate that chains to the CA, as the internal port requires of peers and the operator;
// it needs a CA file.
func (s *Source) ServerConfig(clientCerts bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, roots := s.current()
			if cert == nil {
				return nil, errors.New("no TLS certificate loaded")
			}
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				NextProtos:   []string{"http/1.1"},
			}
			if clientCerts {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, roots
			}
			return c, nil
		},
	}
}
