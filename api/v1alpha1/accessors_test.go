package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bloomery/bloomery/api/v1alpha1"
)

func TestDesiredReplicasDefaultsAsTheSchema(t *testing.T) {
	c := &v1alpha1.BloomCluster{}
	if got := c.DesiredReplicas(); got != 1 {
		t.Errorf("without spec.replicas: %d, want the schema's default 1", got)
	}
	c.Spec.Replicas = new(int32(0))
	if got := c.DesiredReplicas(); got != 0 {
		t.Errorf("spec.replicas 0: %d, want 0", got)
	}
}

func TestNetworkPolicyEnabledDefaultsAsTheSchema(t *testing.T) {
	c := &v1alpha1.BloomCluster{}
	if !c.NetworkPolicyEnabled() {
		t.Error("without spec.networkPolicy.enabled: false, want the schema's default true")
	}
	c.Spec.NetworkPolicy.Enabled = new(false)
	if c.NetworkPolicyEnabled() {
		t.Error("spec.networkPolicy.enabled false: true, want false")
	}
}

// A filter's URL is on its cluster's client Service, the cluster's endpoint, over https when the
// cluster has spec.tls; a cluster not read (nil) gives plain HTTP.
func TestURLsNameTheClientService(t *testing.T) {
	c := &v1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns"}}
	if got, want := c.ClientURL(), "http://prod.ns.svc:8080"; got != want {
		t.Errorf("ClientURL = %q, want %q", got, want)
	}
	f := &v1alpha1.BloomFilter{
		ObjectMeta: metav1.ObjectMeta{Name: "users", Namespace: "ns"},
		Spec:       v1alpha1.BloomFilterSpec{ClusterRef: v1alpha1.ClusterReference{Name: "prod"}},
	}
	if got, want := f.URL(c), c.ClientURL()+"/v1/bloomfilter/users"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if got, want := f.URL(nil), c.ClientURL()+"/v1/bloomfilter/users"; got != want {
		t.Errorf("URL without the cluster = %q, want %q", got, want)
	}

	c.Spec.TLS = &v1alpha1.TLSSpec{SecretName: "prod-tls"}
	if got, want := c.ClientURL(), "https://prod.ns.svc:8080"; got != want {
		t.Errorf("ClientURL with spec.tls = %q, want %q", got, want)
	}
	if got, want := f.URL(c), "https://prod.ns.svc:8080/v1/bloomfilter/users"; got != want {
		t.Errorf("URL on a cluster with spec.tls = %q, want %q", got, want)
	}
}
