//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/internal/await"
)

// TestRESPWithPasswordAndTLS runs the samples with spec.tls and spec.resp.passwordSecret, as
// docs/resp.md shows them: every pod's RESP port speaks TLS with the cluster's certificate, asks
// for the password, and serves the same filters, replicated, as the HTTP API.
func TestRESPWithPasswordAndTLS(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	ca, _ := n.createTLSSecret()
	service := "example." + n.name + ".svc"
	const password = "the-e2e-resp-password"
	n.run("create", "secret", "generic", "example-redis", "--from-literal=password="+password)
	n.applySamplesPatched(`- op: add
  path: /spec/tls
  value:
    secretName: example-tls
- op: add
  path: /spec/resp
  value:
    passwordSecret:
      name: example-redis`)
	pods := podNames(sampleReplicas) // Ready: each holds the membership, as the operator tells it over https
	if got := n.jsonpath("service/example", `{.spec.ports[?(@.name=="resp")].port}`); got != "6379" {
		t.Errorf("client Service resp port %q, want 6379", got)
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	// The pods are dialled by IP, and verified as the Service's name, as a client of the Service
	// verifies them.
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: service, MinVersion: tls.VersionTLS12}
	clients := map[string]*redis.Client{}
	for _, pod := range pods {
		addr := net.JoinHostPort(n.jsonpath("pod/"+pod, "{.status.podIP}"), "6379")
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password, TLSConfig: tlsConfig, MaxRetries: -1, DialTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		clients[pod] = rdb

		anon := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: tlsConfig, MaxRetries: -1, DialTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = anon.Close() })
		if err := anon.Ping(t.Context()).Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
			t.Errorf("pod %s: PING without the password = %v, want NOAUTH", pod, err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first := clients[pods[0]]
	for i := range 20 {
		if err := first.BFAdd(ctx, "users", fmt.Sprintf("resp-%d", i)).Err(); err != nil {
			t.Fatalf("BF.ADD users over RESP on %s: %v", pods[0], err)
		}
	}
	for _, pod := range pods {
		await.Until(t, waitTimeout, "pod "+pod+" answers the values added over RESP", func() (bool, string) {
			for i := range 20 {
				seen, err := clients[pod].BFExists(ctx, "users", fmt.Sprintf("resp-%d", i)).Result()
				if err != nil || !seen {
					return false, fmt.Sprintf("BF.EXISTS users resp-%d = %v, %v", i, seen, err)
				}
			}
			return true, ""
		})
	}
}
