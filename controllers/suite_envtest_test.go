package controllers

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/internal/testassets"
)

// The controller tests run against a real kube-apiserver and etcd (envtest): the schema, CEL
// rules, defaults, the status subresource and watches are the API server's own. envtest has no
// controllers of its own: no StatefulSet controller makes pods and no garbage collector deletes
// children, so tests create Pod objects themselves and check owner references.

var (
	testEnv    *envtest.Environment
	restConfig *rest.Config
	k8s        client.Client // a plain client for the tests' own reads and writes
	testScheme = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if err := clientgoscheme.AddToScheme(testScheme); err != nil {
		panic(err)
	}
	if err := bloomeryv1alpha1.AddToScheme(testScheme); err != nil {
		panic(err)
	}
	flag.Parse()
	if testing.Short() {
		return m.Run() // the tests that need the API server skip (needsAPIServer)
	}
	assets, err := testassets.KubernetesDir("etcd", "kube-apiserver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	if restConfig, err = testEnv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	if k8s, err = client.New(restConfig, client.Options{Scheme: testScheme}); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	return m.Run()
}

// newNamespace creates a namespace of the test's own, so tests can run side by side.
func newNamespace(t testing.TB) string {
	t.Helper()
	needsAPIServer(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// writeCounter counts the writes a manager's client sends to the API server.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) Load() int64 { return w.n.Load() }

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.n.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.n.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.n.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.n.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.n.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.n.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// startManager runs a manager limited to namespace, with the reconcilers setup registers, until
// the test ends. Its client counts writes into the returned counter.
func startManager(t testing.TB, namespace string, setup func(mgr ctrl.Manager) error) *writeCounter {
	t.Helper()
	return startManagerAs(t, restConfig, namespace, setup)
}

// startManagerAs is startManager with the identity of cfg.
func startManagerAs(t testing.TB, cfg *rest.Config, namespace string, setup func(mgr ctrl.Manager) error) *writeCounter {
	t.Helper()
	writes, _ := startStoppableManager(t, cfg, namespace, setup)
	return writes
}

// startStoppableManager is startManagerAs, and a function that stops the manager before the test
// ends (an operator that restarts).
func startStoppableManager(t testing.TB, cfg *rest.Config, namespace string, setup func(mgr ctrl.Manager) error) (*writeCounter, func()) {
	t.Helper()
	writes := &writeCounter{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  testScheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The operator's own cache scoping: a child the reconcilers could not see would fail here.
		Cache: CacheOptions(namespace),
		NewClient: func(config *rest.Config, options client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(config, options)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, writes.funcs()), nil
		},
		// Every test runs its own manager with the same controller names.
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := IndexFields(t.Context(), mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return writes, stop
}

// needsAPIServer skips a test that needs envtest's API server when -short left it out.
func needsAPIServer(t testing.TB) {
	t.Helper()
	if restConfig == nil {
		testassets.SkipInShort(t, "envtest's API server")
	}
}
