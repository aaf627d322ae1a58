package process

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/testca"
)

// clusterTLS is a test cluster's CA, as cert-manager would run it, and an HTTP client with a
// certificate of that CA, as the operator holds one.
type clusterTLS struct {
	ca         *testca.CA
	roots      *x509.CertPool
	httpClient *http.Client
}

func newClusterTLS(t *testing.T) *clusterTLS {
	t.Helper()
	ca, err := testca.New("bloomery-test-cluster")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	operator := issueCertificate(t, ca, "operator")
	return &clusterTLS{ca: ca, roots: roots, httpClient: podsClient(roots, operator)}
}

// podsClient is an HTTP client of pods that trusts roots and presents cert.
func podsClient(roots *x509.CertPool, cert tls.Certificate) *http.Client {
	return client.NewHTTPClient(client.TransportOptions{
		DialTimeout: 2 * time.Second,
		TLS: client.PodTLS(func() *x509.CertPool { return roots },
			func() (*tls.Certificate, error) { return &cert, nil }),
	})
}

func issueCertificate(t *testing.T, ca *testca.CA, name string) tls.Certificate {
	t.Helper()
	issued, err := ca.Issue(name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// issueFiles writes a certificate for the pod name into a directory of its own, as a mounted
// kubernetes.io/tls Secret.
func (c *clusterTLS) issueFiles(t *testing.T, name string) testca.Files {
	t.Helper()
	issued, err := c.ca.Issue(name)
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ca.WriteFiles(t.TempDir(), issued)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// bothTransports runs test on a cluster over plain HTTP, then on one over TLS.
func bothTransports(t *testing.T, test func(t *testing.T, tls *clusterTLS)) {
	t.Helper()
	t.Run("http", func(t *testing.T) { test(t, nil) })
	t.Run("tls", func(t *testing.T) { test(t, newClusterTLS(t)) })
}

// Over TLS the pods' internal ports take only callers with a certificate of the cluster's CA,
// whatever token they carry, and the client port speaks TLS alone.
func TestTLSRefusesStrangers(t *testing.T) {
	ctls := newClusterTLS(t)
	c := startTestCluster(t, 2, 0, ctls)
	p := c.pods[0]
	if _, err := p.dp.internal.Membership(t.Context()); err != nil {
		t.Fatalf("a caller with the cluster's certificate and token: %v", err)
	}

	other, err := testca.New("another-cluster")
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.PEM)
	strangers := map[string]*http.Client{
		// It trusts the pod but presents a certificate of another CA.
		"a certificate of another CA": podsClient(ctls.roots, issueCertificate(t, other, "intruder")),
		// It trusts the pod and presents nothing.
		"no certificate": client.NewHTTPClient(client.TransportOptions{TLS: client.PodTLS(func() *x509.CertPool { return ctls.roots }, nil)}),
	}
	for who, hc := range strangers {
		cl := client.New(p.internalURL(), client.WithHTTPClient(hc), client.Internal(testToken))
		if _, err := cl.Membership(t.Context()); err == nil {
			t.Errorf("a caller with %s and the token was served", who)
		} else if errors.As(err, new(*client.Error)) {
			t.Errorf("a caller with %s got an HTTP answer, want the handshake refused: %v", who, err)
		}
	}
	// A pod of another cluster is not believed either: a client that trusts only the other CA
	// refuses the pod's certificate.
	doubter := client.New(p.url(), client.WithHTTPClient(podsClient(otherRoots, issueCertificate(t, other, "doubter"))))
	if _, err := doubter.List(t.Context()); err == nil || !strings.Contains(err.Error(), "not the cluster's") {
		t.Errorf("a client of another CA accepted the pod: %v", err)
	}
	// Plain HTTP to a TLS port is not served.
	if _, err := client.New("http://127.0.0.1:" + p.port).List(t.Context()); err == nil {
		t.Error("plain HTTP was served on the client port of a pod over TLS")
	}
}

// A renewed certificate is served from the next connection on, without a restart, and the pods
// go on replicating.
func TestTLSRenewalWithoutRestart(t *testing.T) {
	ctls := newClusterTLS(t)
	c := startTestCluster(t, 2, 0, ctls)
	p := c.pods[0]
	createFilter(t, p.dp, "renewed")
	before := servedSerial(t, ctls.roots, p.port)

	renewed, err := ctls.ca.Issue(p.name)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := p.tlsArgs[1], p.tlsArgs[3]
	// A Secret's volume swaps both files at once; written one after the other, they are briefly
	// mismatched, which the pod rides out on the certificate it has.
	if err := os.WriteFile(keyFile, renewed.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, renewed.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := servedSerial(t, ctls.roots, p.port)
		if got.Cmp(renewed.Serial) == 0 {
			break
		}
		if got.Cmp(before) != 0 {
			t.Fatalf("served serial %v: neither the first %v nor the renewed %v", got, before, renewed.Serial)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate is not served after 10 s:\n%s", p.dp.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.dp.client.MultiSet(t.Context(), "renewed", valuesOf("after-renewal", 50)); err != nil {
		t.Fatal(err)
	}
	c.pods[1].eventuallyHolds(t, "renewed", valuesOf("after-renewal", 50))
	if !p.dp.logged("TLS certificate renewed") {
		t.Errorf("the pod did not log the renewal:\n%s", p.dp.logs())
	}
}

// servedSerial opens a new TLS connection to port and answers the serial of the certificate
// presented.
func servedSerial(t *testing.T, roots *x509.CertPool, port string) *big.Int {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(t.Context(), "tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber
}
