package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/tlsfiles"
	"github.com/bloomery/bloomery/internal/testca"
)

// servedSerial is the serial number of the certificate a handshake with srv presents.
func servedSerial(t *testing.T, srv *tls.Config, roots *x509.CertPool) *big.Int {
	t.Helper()
	serverSide, clientSide := net.Pipe()
	defer func() { _ = clientSide.Close() }()
	go func() {
		conn := tls.Server(serverSide, srv)
		_ = conn.HandshakeContext(t.Context())
		_ = conn.Close()
	}()
	conn := tls.Client(clientSide, &tls.Config{RootCAs: roots, ServerName: "pod-0", MinVersion: tls.VersionTLS12})
	if err := conn.HandshakeContext(t.Context()); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// A renewed certificate is served from the next handshake on, without a restart; files caught
// half-written keep the previous one.
func TestRenewalIsServed(t *testing.T) {
	ca, err := testca.New("cluster")
	if err != nil {
		t.Fatal(err)
	}
	first, err := ca.Issue("pod-0")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), first)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	src, err := tlsfiles.Load(files.Cert, files.Key, files.CA, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	roots := src.Roots()
	srv := src.ServerConfig(false)
	if got := servedSerial(t, srv, roots); got.Cmp(first.Serial) != 0 {
		t.Fatalf("served serial %v, want %v", got, first.Serial)
	}

	renewed, err := ca.Issue("pod-0")
	if err != nil {
		t.Fatal(err)
	}
	// The certificate of the renewal with the old key: a renewal caught half-written.
	if err := os.WriteFile(files.Cert, renewed.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// The files are looked at again once the recheck interval has passed: until the warning
	// says they were, and after, the previous certificate is served.
	deadline := time.Now().Add(5 * time.Second)
	for looked := false; !looked; {
		looked = strings.Contains(logs.String(), "do not load")
		if got := servedSerial(t, srv, roots); got.Cmp(first.Serial) != 0 {
			t.Fatalf("with mismatched files, served serial %v, want the previous %v", got, first.Serial)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the mismatched files:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(files.Key, renewed.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for servedSerial(t, srv, roots).Cmp(renewed.Serial) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate is not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "TLS certificate renewed") {
		t.Errorf("no log line about the renewal:\n%s", logs.String())
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	ca, err := testca.New("cluster")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ca.Issue("pod-0")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), issued)
	if err != nil {
		t.Fatal(err)
	}
	notPEM := files.CA + ".txt"
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ cert, key, ca, want string }{
		"missing certificate": {files.Cert + ".missing", files.Key, files.CA, "no such file"},
		"key of another":      {files.Cert, files.CA, files.CA, "TLS certificate"},
		"CA not PEM":          {files.Cert, files.Key, notPEM, "no PEM certificate"},
	} {
		if _, err := tlsfiles.Load(tc.cert, tc.key, tc.ca, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}
