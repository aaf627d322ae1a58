//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/await"
)

// TestClusterServesTLS runs the samples with spec.tls on a CA and a kubernetes.io/tls Secret made
// as cert-manager makes them (docs/security.md, "TLS"): the pods turn ready, the operator tells
// them an https membership and creates the filter over https, a value written through one pod's
// client port over https is on every pod, and plain HTTP is refused.
func TestClusterServesTLS(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	ca, issued := n.createTLSSecret()
	n.applySamplesPatched(`- op: add
  path: /spec/tls
  value:
    secretName: example-tls`)
	pods := podNames(sampleReplicas)

	endpoint := "https://example." + n.name + ".svc:8080"
	if got := n.jsonpath("bloomcluster/example", "{.status.endpoint}"); got != endpoint {
		t.Errorf("status.endpoint %q, want %q", got, endpoint)
	}
	if got := n.jsonpath("bloomfilter/users", "{.status.url}"); got != endpoint+"/v1/bloomfilter/users" {
		t.Errorf("status.url %q, want on %s", got, endpoint)
	}

	// The pods are called by IP: they are verified by their CA alone, as the operator and their
	// peers verify them. The internal port wants the cluster's certificate too.
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	podsTLS := client.NewHTTPClient(client.TransportOptions{
		DialTimeout: 5 * time.Second,
		TLS:         client.PodTLS(func() *x509.CertPool { return roots }, func() (*tls.Certificate, error) { return &cert, nil }),
	})
	podsTLS.Timeout = dataPlaneHTTP.Timeout

	await.Until(t, waitTimeout, "every pod holds the membership, its members at https URLs", func() (bool, string) {
		epoch := n.clusterEpoch()
		var wrong []string
		for _, pod := range pods {
			m, err := n.internalAPI(pod).overTLS(podsTLS).membership()
			if err != nil {
				wrong = append(wrong, err.Error())
				continue
			}
			if m.Epoch != epoch || !slices.Equal(m.names(), pods) {
				wrong = append(wrong, fmt.Sprintf("%s holds epoch %d with %v", pod, m.Epoch, m.names()))
			}
			for _, member := range m.Members {
				if !strings.HasPrefix(member.URL, "https://") {
					wrong = append(wrong, fmt.Sprintf("%s has member %s at %s", pod, member.Name, member.URL))
				}
			}
		}
		return epoch > 0 && len(wrong) == 0, fmt.Sprintf("EPOCH %d; %s", epoch, strings.Join(wrong, "; "))
	})

	apis := n.apis(pods...)
	for i := range apis {
		apis[i] = apis[i].overTLS(podsTLS)
	}
	values := apis[0].addValues("users", "over-tls", 100)
	requireEverywhere(t, "users", values, apis)

	// Plain HTTP gets no answer from the client port: the TLS server refuses the request.
	status, body, err := n.api(samplePod).call(http.MethodPost, "/v1/bloomfilter/users/check", map[string]string{"value": values[0]})
	if err == nil && status != http.StatusBadRequest {
		t.Errorf("plain HTTP to the client port: %d %s; want no answer, or 400 from the TLS server", status, body)
	}
}
