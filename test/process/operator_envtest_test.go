package process

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/testassets"
)

// TestOperatorCommand runs `bloomery operator` as a process against a real kube-apiserver, with
// leader election, and checks that it reconciles a BloomCluster and stops cleanly on SIGTERM.
func TestOperatorCommand(t *testing.T) {
	assets := testassets.Kubernetes(t)
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (run `make envtest-assets`): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := writeFile(t, "kubeconfig", string(kubeconfig))

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = bloomeryv1alpha1.AddToScheme(scheme)
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// Usage errors come before any cluster is needed.
	if r := runBinary(t, "operator", "--no-such-flag"); r.code != 2 || !strings.Contains(r.stderr, "unknown flag") {
		t.Errorf("unknown flag: exit %d, %q; want 2 and the flag named", r.code, r.stderr)
	}
	if r := runBinary(t, "operator", "-h"); r.code != 0 || !strings.Contains(r.stdout, "--watch-namespace") {
		t.Errorf("-h: exit %d, %q; want 0 and the flags", r.code, r.stdout)
	}

	probe := freeAddress(t)
	cmd := exec.CommandContext(t.Context(), binary, "operator",
		"--health-probe-bind-address", probe, "--metrics-bind-address", "0",
		"--leader-elect", "--leader-election-namespace", "default",
		"--dataplane-image", "example.com/bloomery:test", "--zap-devel=false")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // a failed test left it running
			_ = cmd.Process.Kill()
			t.Logf("operator killed: %v\n%s", <-exited, logs.String())
		}
	})

	await.True(t, 30*time.Second, "the operator's /readyz", func() bool {
		alive(t, exited, "the operator's /readyz")
		resp, err := http.Get("http://" + probe + "/readyz") //nolint:noctx // a probe, as the kubelet sends it
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	bc := &bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"}}
	if err := k8s.Create(t.Context(), bc); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	await.True(t, 30*time.Second, "the StatefulSet of the BloomCluster", func() bool {
		alive(t, exited, "the StatefulSet of the BloomCluster")
		return k8s.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "smoke"}, &sts) == nil
	})
	if image := sts.Spec.Template.Spec.Containers[0].Image; image != "example.com/bloomery:test" {
		t.Errorf("data-plane image %q, want the --dataplane-image default", image)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the operator did not stop after SIGTERM:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "Successfully acquired lease") {
		t.Errorf("no leader election in the logs:\n%s", logs.String())
	}
	noDataRace(t, "the operator", logs.String())
}

func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// alive fails the test at once if the operator has exited: what the test waits for cannot
// happen any more, and waiting out the timeout would only hide why.
func alive(t *testing.T, exited <-chan error, what string) {
	t.Helper()
	select {
	case err := <-exited:
		t.Fatalf("the operator exited (%v) while waiting for %s", err, what)
	default:
	}
}
