package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The filters' passes of a cluster with spec.tls read its Secret from the API server once per
// tlsRetry, not once each; what they learnt, a usable Secret or an unusable one, is kept as long.
func TestTLSSecretsAreReadOncePerRetry(t *testing.T) {
	reads := 0
	k := fake.NewClientBuilder().WithScheme(testScheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	cluster := &bloomeryv1alpha1.BloomCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec:       bloomeryv1alpha1.BloomClusterSpec{TLS: &bloomeryv1alpha1.TLSSpec{SecretName: "tls"}},
	}
	now := time.Unix(1000, 0)
	s := &tlsSecrets{now: func() time.Time { return now }}
	for range 100 {
		if _, err := s.get(t.Context(), k, cluster); !errors.Is(err, errNoTLS) {
			t.Fatalf("a Secret that does not exist: %v, want errNoTLS", err)
		}
	}
	if reads != 1 {
		t.Errorf("100 passes read the Secret %d times, want 1", reads)
	}
	if err := k.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tlsRetry)
	if _, err := s.get(t.Context(), k, cluster); !errors.Is(err, errNoTLS) || reads != 2 {
		t.Errorf("after tlsRetry: %v after %d reads; want the Secret read again and found unusable", err, reads)
	}
	if tls, err := s.get(t.Context(), k, &bloomeryv1alpha1.BloomCluster{}); tls != nil || err != nil || reads != 2 {
		t.Errorf("without spec.tls: %v, %v after %d reads; want nothing read", tls, err, reads)
	}
}
