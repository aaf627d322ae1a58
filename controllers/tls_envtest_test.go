package controllers

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	dpclient "github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/testca"
)

// testTLS is a cluster's own CA and its pods' certificate, as cert-manager makes them: the
// kubernetes.io/tls Secret, and its files as the pods mount them.
type testTLS struct {
	ca     *testca.CA
	issued testca.Issued
	files  testca.Files
	roots  *x509.CertPool
	cert   tls.Certificate
}

func newTestTLS(t testing.TB) *testTLS {
	t.Helper()
	ca, err := testca.New("bloomery-test-cluster")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ca.Issue("pods")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), issued)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	return &testTLS{ca: ca, issued: issued, files: files, roots: roots, cert: cert}
}

// scheme is what the pods serve: https with TLS, http without (nil).
func (c *testTLS) scheme() string {
	if c == nil {
		return "http"
	}
	return "https"
}

// httpClient calls the pods as the operator does: it trusts the CA alone and presents the
// cluster's certificate.
func (c *testTLS) httpClient() *http.Client {
	return dpclient.NewHTTPClient(dpclient.TransportOptions{
		DialTimeout: 2 * time.Second,
		TLS:         dpclient.PodTLS(func() *x509.CertPool { return c.roots }, func() (*tls.Certificate, error) { return &c.cert, nil }),
	})
}

// secret is the kubernetes.io/tls Secret cert-manager would write.
func (c *testTLS) secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       c.issued.CertPEM,
			corev1.TLSPrivateKeyKey: c.issued.KeyPEM,
			tlsCAKey:                c.ca.PEM,
		},
	}
}

func withTLS(secretName string) func(*bloomeryv1alpha1.BloomCluster) {
	return func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.TLS = &bloomeryv1alpha1.TLSSpec{SecretName: secretName}
	}
}

// A spec.tls Secret is used only when the pods and the operator can use it; otherwise the error
// names the Secret and what is wrong.
func TestTLSSecretIsChecked(t *testing.T) {
	t.Parallel()
	certs, stranger := newTestTLS(t), newTestTLS(t)
	mutated := func(mutate func(*corev1.Secret)) *corev1.Secret {
		s := certs.secret("ns", "c-tls")
		mutate(s)
		return s
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret // nil: none
		message string         // "" for a usable Secret
	}{
		{name: "usable", secret: certs.secret("ns", "c-tls")},
		{name: "absent", message: "Secret c-tls (spec.tls.secretName) does not exist"},
		{name: "opaque", secret: mutated(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }),
			message: `Secret c-tls (spec.tls.secretName) is of type "Opaque", not "kubernetes.io/tls"`},
		{name: "without ca.crt", secret: mutated(func(s *corev1.Secret) { delete(s.Data, "ca.crt") }),
			message: "Secret c-tls (spec.tls.secretName) has no key ca.crt"},
		{name: "key of another certificate", secret: mutated(func(s *corev1.Secret) { s.Data["tls.key"] = stranger.issued.KeyPEM }),
			message: "holds no usable certificate and key in tls.crt and tls.key"},
		{name: "ca.crt not PEM", secret: mutated(func(s *corev1.Secret) { s.Data["ca.crt"] = []byte("not a certificate") }),
			message: "holds no PEM certificate in ca.crt"},
		{name: "ca.crt of another CA", secret: mutated(func(s *corev1.Secret) { s.Data["ca.crt"] = stranger.ca.PEM }),
			message: "holds a certificate that ca.crt does not accept for server auth"},
	}
	cluster := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	withTLS("c-tls")(cluster)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := fake.NewClientBuilder().WithScheme(testScheme)
			if tt.secret != nil {
				b = b.WithObjects(tt.secret)
			}
			got, err := clusterTLS(t.Context(), b.Build(), cluster)
			if tt.message == "" {
				if err != nil || got == nil || got.Secret != "ns/c-tls" || got.Version == "" || got.Roots == nil {
					t.Fatalf("clusterTLS: %+v, %v; want the Secret's CA and certificate at its version", got, err)
				}
				if s := fmt.Sprintf("%+v", got); s != "TLS Secret ns/c-tls at version "+got.Version {
					t.Errorf("a ClusterTLS prints as %q: its key must not show", s)
				}
				return
			}
			if !errors.Is(err, errNoTLS) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("clusterTLS: %v; want errNoTLS saying %q", err, tt.message)
			}
		})
	}
	if got, err := clusterTLS(t.Context(), fake.NewClientBuilder().Build(), &bloomeryv1alpha1.BloomCluster{}); got != nil || err != nil {
		t.Errorf("without spec.tls: %+v, %v; want nothing, and no Secret read", got, err)
	}
}

// The operator keeps one HTTP client per TLS Secret, and its connections, until the Secret
// changes: a renewed certificate is presented on the next connection.
func TestTLSClientsFollowTheSecretVersion(t *testing.T) {
	t.Parallel()
	d := NewHTTPDataPlane(time.Second)
	v1 := &ClusterTLS{Secret: "ns/c-tls", Version: "1"}
	first := d.tls.get(v1, d.transport)
	if again := d.tls.get(&ClusterTLS{Secret: "ns/c-tls", Version: "1"}, d.transport); again != first {
		t.Error("the same version of the Secret got a new client: connections are not reused")
	}
	if other := d.tls.get(&ClusterTLS{Secret: "ns/other-tls", Version: "7"}, d.transport); other == first {
		t.Error("two Secrets share a client")
	}
	renewed := d.tls.get(&ClusterTLS{Secret: "ns/c-tls", Version: "2"}, d.transport)
	if renewed == first {
		t.Error("a renewed Secret kept the client of its previous version")
	}
	if len(d.tls.clients) != 2 {
		t.Errorf("%d clients held, want one per Secret (2)", len(d.tls.clients))
	}
}

// With spec.tls the pods mount the Secret and are given its files, the template holds nothing of
// its content (a renewal reaches the pods without a roll), another secretName is mounted instead,
// and the endpoint says https.
func TestTLSPodTemplate(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startClusterReconciler(t, ns, 0)
	createBloomCluster(t, ns, "t", withTLS("t-tls"))

	sts := waitFor(t, &appsv1.StatefulSet{}, ns, "t", exists)
	pod := sts.Spec.Template.Spec
	wantSecretMounted(t, pod, "tls", "t-tls", "/var/run/secrets/bloomery-tls")
	ctr := pod.Containers[0]
	args := strings.Join(ctr.Args, " ")
	for _, flag := range []string{
		"--tls-cert-file /var/run/secrets/bloomery-tls/tls.crt",
		"--tls-key-file /var/run/secrets/bloomery-tls/tls.key",
		"--tls-ca-file /var/run/secrets/bloomery-tls/ca.crt",
	} {
		if !strings.Contains(args, flag) {
			t.Errorf("args %q lack %q", args, flag)
		}
	}
	if keys := slices.Sorted(maps.Keys(sts.Spec.Template.Annotations)); !slices.Equal(keys, []string{configHashAnnotation, tokenHashAnnotation}) {
		t.Errorf("pod template annotations %v, want the configuration's and the token's hashes alone: no hash of the TLS Secret", keys)
	}
	waitFor(t, &bloomeryv1alpha1.BloomCluster{}, ns, "t", func(c *bloomeryv1alpha1.BloomCluster) (bool, string) {
		return c.Status.Endpoint == "https://t."+ns+".svc:8080", "endpoint " + c.Status.Endpoint
	})

	modify(t, &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: ns}}, func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.TLS.SecretName = "t-tls-2"
	})
	waitFor(t, &appsv1.StatefulSet{}, ns, "t", func(s *appsv1.StatefulSet) (bool, string) {
		v := s.Spec.Template.Spec.Volumes
		return slices.ContainsFunc(v, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "t-tls-2" }), fmt.Sprint(v)
	})
}

// startTLSReconcilers runs both reconcilers in ns, with short periods, as the operator does: the
// BloomCluster's pushes the membership, the BloomFilter's creates the filter, both over https.
func startTLSReconcilers(t *testing.T, ns string) {
	t.Helper()
	startManager(t, ns, func(mgr ctrl.Manager) error {
		dataPlane := NewHTTPDataPlane(2 * time.Second)
		if err := (&BloomClusterReconciler{
			Client: mgr.GetClient(), Scheme: mgr.GetScheme(), DefaultImage: testImage,
			Resync: 100 * time.Millisecond, DataPlane: dataPlane,
		}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&BloomFilterReconciler{
			Client: mgr.GetClient(), DataPlane: dataPlane, Resync: 200 * time.Millisecond,
		}).SetupWithManager(mgr)
	})
}

// A cluster with spec.tls runs on pods that serve only TLS: the operator tells them an https
// membership, creates the filter over https, and the pods replicate to each other over it.
func TestClusterOverTLS(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	certs := newTestTLS(t)
	if err := k8s.Create(t.Context(), certs.secret(ns, "t-tls")); err != nil {
		t.Fatal(err)
	}
	createBloomCluster(t, ns, "t", func(c *bloomeryv1alpha1.BloomCluster) {
		c.Spec.Replicas = new(int32(2))
		withTLS("t-tls")(c)
	})
	token := testToken(t, ns, "t")
	pods := []*fakePod{startFakePod(t, "t-0", token, "", certs), startFakePod(t, "t-1", token, "", certs)}
	for _, p := range pods {
		createPodOf(t, ns, "t", p)
	}
	startTLSReconcilers(t, ns)

	waitMembership(t, ns, "t", pods...) // https URLs, read over https
	for _, m := range getCluster(t, ns, "t").Status.Members {
		if !strings.HasPrefix(m.URL, "https://") {
			t.Errorf("member %s at %s, want https", m.Pod, m.URL)
		}
	}
	createBloomFilter(t, ns, "users", "t")
	bf := waitCondition(t, ns, "users", ConditionReady, metav1.ConditionTrue, "all 2 pods")
	if want := "https://t." + ns + ".svc:8080/v1/bloomfilter/users"; bf.Status.URL != want {
		t.Errorf("url %q, want %q", bf.Status.URL, want)
	}
	if c := getCluster(t, ns, "t"); c.Status.Endpoint != "https://t."+ns+".svc:8080" {
		t.Errorf("endpoint %q, want https", c.Status.Endpoint)
	}

	// A write on one pod reaches the other through the https membership.
	if err := pods[0].client.MultiSet(t.Context(), "users", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the values on the other pod", func() (bool, string) {
		got, err := pods[1].client.MultiCheck(t.Context(), "users", []string{"a", "b"})
		return err == nil && slices.Equal(got, []bool{true, true}), fmt.Sprint(got, err)
	})
	// The pods speak nothing but TLS.
	plain := dpclient.New(fmt.Sprintf("http://127.0.0.1:%d", pods[0].ports.client))
	if _, err := plain.Check(t.Context(), "users", "a"); err == nil {
		t.Error("a pod of a cluster with spec.tls answered plain HTTP")
	}
}

// A spec.tls Secret that is missing, or lacks ca.crt, makes the cluster Degraded and its filters
// not Ready, naming the Secret and what is wrong, and no pod is called meanwhile; once the Secret
// is right, the cluster recovers.
func TestTLSSecretNotUsable(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	certs := newTestTLS(t)
	incomplete := certs.secret(ns, "b-tls")
	delete(incomplete.Data, tlsCAKey)
	if err := k8s.Create(t.Context(), incomplete); err != nil {
		t.Fatal(err)
	}
	createBloomCluster(t, ns, "a", withTLS("a-tls"))
	createBloomCluster(t, ns, "b", withTLS("b-tls"))
	plainPod := addPod(t, ns, "b", "b-0") // what the operator must not call in plain HTTP
	startTLSReconcilers(t, ns)
	createBloomFilter(t, ns, "users", "b")

	waitClusterCondition(t, ns, "a", ConditionDegraded, "True/"+ReasonTLSSecretNotUsable, "Secret a-tls (spec.tls.secretName) does not exist")
	waitClusterCondition(t, ns, "b", ConditionDegraded, "True/"+ReasonTLSSecretNotUsable, "Secret b-tls (spec.tls.secretName) has no key ca.crt")
	waitCondition(t, ns, "users", ConditionReady, metav1.ConditionFalse, ReasonTLSSecretNotUsable+": BloomCluster b has no usable TLS Secret: Secret b-tls")

	if held, err := plainPod.internal.Membership(t.Context()); err != nil || held.Epoch != 0 {
		t.Errorf("the pod was told a membership (%+v, %v) without TLS", held, err)
	}
	if _, err := plainPod.internal.FilterStatus(t.Context(), "users"); !dpclient.IsNotFound(err) {
		t.Errorf("the filter was made on the pod without TLS (%v)", err)
	}
	if c := getCluster(t, ns, "b"); len(c.Status.Members) > 0 {
		t.Errorf("status.members %+v, want none while the pods cannot be called", c.Status.Members)
	}

	if err := k8s.Create(t.Context(), certs.secret(ns, "a-tls")); err != nil {
		t.Fatal(err)
	}
	waitClusterCondition(t, ns, "a", ConditionDegraded, "False/"+ReasonAsExpected, "")
}
