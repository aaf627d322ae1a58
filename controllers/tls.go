package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// With spec.tls, the pods serve their client and internal ports over TLS with the certificate of a
// kubernetes.io/tls Secret that someone else makes (cert-manager), and the operator calls them
// over https, verifying them against the Secret's CA and presenting the Secret's certificate. The
// Secret is mounted, not hashed into the pod template: the data plane reloads its files when the
// kubelet renews them, so a renewal rolls nothing.
const (
	// tlsMountPath is the directory the Secret is mounted at; its keys are files there.
	tlsMountPath = "/var/run/secrets/bloomery-tls"
	tlsVolume    = "tls"
	// tlsCAKey is the key of the CA in a kubernetes.io/tls Secret, as cert-manager writes it.
	tlsCAKey = "ca.crt"
)

// tlsRetry is how soon a pass looks again at a TLS Secret it could not use: the operator does not
// watch the Secret, and cert-manager issues one within seconds of its Certificate.
const tlsRetry = 5 * time.Second

// errNoTLS is the answer for a cluster whose spec.tls Secret does not exist (yet) or does not hold
// what the operator needs to call the pods. The pods are then not called at all: never in plain
// HTTP, which would send the token in clear.
var errNoTLS = errors.New("no usable TLS Secret")

// ClusterTLS is what the operator needs to call a cluster's pods over https, read from its
// spec.tls Secret: the CA that the pods' certificates must chain to and the certificate it
// presents to their internal ports.
type ClusterTLS struct {
	// Secret is the Secret's namespace/name, and Version its resourceVersion: a renewal is a new
	// version of the same Secret.
	Secret, Version string
	Roots           *x509.CertPool
	Certificate     tls.Certificate
}

// String leaves the certificate's private key out wherever a ClusterTLS is formatted (%v).
func (c *ClusterTLS) String() string { return "TLS Secret " + c.Secret + " at version " + c.Version }

// reconcileTLS reads the spec.tls Secret. One the operator cannot use makes the cluster Degraded
// without stopping the pass: the StatefulSet's pods wait for the Secret (the kubelet mounts it only
// once it exists), and the membership step calls no pod until it is usable.
func (r *BloomClusterReconciler) reconcileTLS(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	parsed, err := clusterTLS(ctx, r.apiReader(), st.cluster)
	if errors.Is(err, errNoTLS) {
		st.noTLS = true
		st.notApplied = append(st.notApplied, degradation{ReasonTLSSecretNotUsable,
			err.Error() + "; the operator calls no pod of the cluster until it can use it"})
		return ctrl.Result{RequeueAfter: tlsRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	st.tls = parsed
	return ctrl.Result{}, nil
}

// clusterTLS reads the cluster's spec.tls Secret from the API server: the operator's cache holds
// only its own token Secrets, and keeps no copy of the users' credentials. It returns nil without
// spec.tls, and an error wrapping errNoTLS, which names the Secret and what is wrong with it, when
// the Secret cannot be used.
func clusterTLS(ctx context.Context, reader client.Reader, c *bloomeryv1alpha1.BloomCluster) (*ClusterTLS, error) {
	if c.Spec.TLS == nil {
		return nil, nil
	}
	name := c.Spec.TLS.SecretName
	var secret corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Secret %s (spec.tls.secretName) does not exist", errNoTLS, name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s (spec.tls.secretName): %w", name, err)
	}
	parsed, err := parseTLSSecret(&secret)
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s (spec.tls.secretName) %w", errNoTLS, name, err)
	}
	return parsed, nil
}

// parseTLSSecret checks what the pods and the operator will do with the Secret, so that a wrong one
// is reported where the BloomCluster shows it rather than as handshakes failing: its certificate
// and key go together, and the certificate chains to ca.crt for both server and client auth (each
// pod serves it, and the operator presents it). The error completes "Secret <name> ...".
func parseTLSSecret(s *corev1.Secret) (*ClusterTLS, error) {
	if s.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("is of type %q, not %q", s.Type, corev1.SecretTypeTLS)
	}
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, tlsCAKey} {
		if len(s.Data[key]) == 0 {
			return nil, fmt.Errorf("has no key %s", key)
		}
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("holds no usable certificate and key in %s and %s: %w", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[tlsCAKey]) {
		return nil, fmt.Errorf("holds no PEM certificate in %s", tlsCAKey)
	}
	intermediates := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("holds an unparsable certificate in the chain of %s: %w", corev1.TLSCertKey, err)
		}
		intermediates.AddCert(c)
	}
	for _, usage := range []struct {
		usage x509.ExtKeyUsage
		name  string
	}{{x509.ExtKeyUsageServerAuth, "server auth"}, {x509.ExtKeyUsageClientAuth, "client auth"}} {
		opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{usage.usage}}
		if _, err := cert.Leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("holds a certificate that %s does not accept for %s (the pods serve it, and the operator presents it to them; "+
				"a cert-manager Certificate needs usages: [server auth, client auth]): %w", tlsCAKey, usage.name, err)
		}
	}
	return &ClusterTLS{
		Secret:      s.Namespace + "/" + s.Name,
		Version:     s.ResourceVersion,
		Roots:       roots,
		Certificate: cert,
	}, nil
}

// tlsSecrets keeps what clusterTLS made of each spec.tls Secret for tlsRetry, so that the passes
// of a cluster's filters, one per filter at every resync, read its Secret from the API server once
// per tlsRetry rather than once each: the operator's cache holds no such Secret, and the
// BloomFilters do not watch it. A renewal, or a Secret that becomes usable, reaches the filters'
// calls within tlsRetry. The zero value is ready to use.
type tlsSecrets struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]tlsEntry
	// now is the clock; nil means time.Now.
	now func() time.Time
}

type tlsEntry struct {
	tls  *ClusterTLS
	err  error // nil, or an error wrapping errNoTLS
	read time.Time
}

// get is clusterTLS, answered from what was read less than tlsRetry ago.
func (s *tlsSecrets) get(ctx context.Context, reader client.Reader, c *bloomeryv1alpha1.BloomCluster) (*ClusterTLS, error) {
	if c.Spec.TLS == nil {
		return nil, nil
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.TLS.SecretName}
	s.mu.Lock()
	e, ok := s.entries[key]
	s.mu.Unlock()
	if ok && now().Sub(e.read) < tlsRetry {
		return e.tls, e.err
	}
	parsed, err := clusterTLS(ctx, reader, c)
	if err != nil && !errors.Is(err, errNoTLS) {
		return nil, err // the API server failed: nothing learnt of the Secret
	}
	s.mu.Lock()
	if s.entries == nil {
		s.entries = map[types.NamespacedName]tlsEntry{}
	}
	s.entries[key] = tlsEntry{tls: parsed, err: err, read: now()}
	s.mu.Unlock()
	return parsed, err
}

// tlsArgs point the data plane at the mounted Secret's files.
func tlsArgs() []string {
	return []string{
		"--tls-cert-file", tlsMountPath + "/" + corev1.TLSCertKey,
		"--tls-key-file", tlsMountPath + "/" + corev1.TLSPrivateKeyKey,
		"--tls-ca-file", tlsMountPath + "/" + tlsCAKey,
	}
}

// buildTLSVolume mounts the spec.tls Secret. The kubelet updates its files in place when the
// Secret changes, and the data plane reloads them.
func buildTLSVolume(spec *bloomeryv1alpha1.TLSSpec) corev1.Volume {
	return corev1.Volume{
		Name: tlsVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: spec.SecretName,
			// Readable by the data plane's user and group alone: it holds the key.
			DefaultMode: new(int32(0o440)),
		}},
	}
}
