package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/internal/cli"
)

func TestInvokedAsPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-bloomery":                true,
		"/usr/local/bin/kubectl-bloomery": true,
		"kubectl-bloomery.exe":            true,
		"bloomery":                        false,
		"/bin/kubectl":                    false,
		"kubectl-bloomery-old":            false,
	} {
		if got := InvokedAsPlugin(argv0); got != want {
			t.Errorf("InvokedAsPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}

// execute runs the plugin with args against the API server at server (none: unreachable), and
// returns its output and error.
func execute(t *testing.T, server string, args ...string) (string, error) {
	t.Helper()
	if server == "" {
		server = "https://127.0.0.1:1"
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]
current-context: x
users: [{name: u, user: {token: secret}}]
`, server)
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := NewPluginCommand("test")
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "--request-timeout", "5s"}, args...))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestArgumentValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "missing command"},
		{[]string{"stauts"}, `did you mean "status"`},
		{[]string{"status", "a", "b"}, `unexpected argument "b"`},
		{[]string{"check", "c", "f"}, "want CLUSTER FILTER VALUE..., got 2 arguments"},
		{[]string{"add", "c"}, "want CLUSTER FILTER VALUE..."},
		{[]string{"info", "c"}, "want CLUSTER FILTER"},
		{[]string{"info", "", "f"}, "a name cannot be empty"},
		{[]string{"delete"}, "want one FILTER"},
		{[]string{"status", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"create", "f", "--capacity", "10", "--false-positive-rate", "0.1"}, "--cluster is required"},
		{[]string{"create", "f", "--cluster", "c", "--false-positive-rate", "0.1"}, "--capacity is required"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "0", "--false-positive-rate", "0.1"}, "want at least 1"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10"}, "--false-positive-rate is required"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "1"}, "want a decimal between 0 and 1"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "0.0"}, "want a decimal between 0 and 1"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "0.1", "--growth", "17"}, "want 1 to 16"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "0.1", "--expire-after-create", "1h", "--expire-after-access", "1h"}, "at most one of"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "0.1", "--expire-after-access", "-1s"}, "want a positive duration"},
		{[]string{"create", "f", "--cluster", "c", "--capacity", "10", "--false-positive-rate", "0.1", "--deletion-policy", "Keep"}, "want Delete or Retain"},
		{[]string{"create", "f", "--capacity", "ten"}, `invalid argument "ten"`},
	} {
		_, err := execute(t, "", tc.args...)
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

func TestCreateSpec(t *testing.T) {
	cmd := createCommand(&globalFlags{})
	if err := cmd.ParseFlags([]string{"--cluster", "c", "--capacity", "500", "--false-positive-rate", ".01",
		"--scalable=false", "--growth", "4", "--expire-after-access", "24h", "--deletion-policy", "Retain"}); err != nil {
		t.Fatal(err)
	}
	o := &createOptions{}
	// The command's options are its closure's; read them back through the flags.
	fl := cmd.Flags()
	o.cluster, _ = fl.GetString("cluster")
	o.capacity, _ = fl.GetInt64("capacity")
	o.falsePositiveRate, _ = fl.GetString("false-positive-rate")
	o.scalable, _ = fl.GetBool("scalable")
	o.growth, _ = fl.GetInt32("growth")
	o.expireAfterAccess, _ = fl.GetDuration("expire-after-access")
	o.deletionPolicy, _ = fl.GetString("deletion-policy")
	bf, err := o.bloomFilter(cmd, "f")
	if err != nil {
		t.Fatal(err)
	}
	s := bf.Spec
	if bf.Name != "f" || s.ClusterRef.Name != "c" || s.Capacity != 500 || s.FalsePositiveRate != ".01" ||
		s.Scalable == nil || *s.Scalable || s.Growth == nil || *s.Growth != 4 ||
		s.Expiry == nil || s.Expiry.AfterAccess == nil || s.Expiry.AfterAccess.Hours() != 24 || s.Expiry.AfterCreate != nil ||
		s.DeletionPolicy != bloomeryv1alpha1.Retain {
		t.Errorf("spec %+v", s)
	}
	// Flags left out are left to the operator's defaults.
	cmd = createCommand(&globalFlags{})
	if err := cmd.ParseFlags([]string{"--cluster", "c", "--capacity", "1", "--false-positive-rate", "0.5"}); err != nil {
		t.Fatal(err)
	}
	o = &createOptions{cluster: "c", capacity: 1, falsePositiveRate: "0.5", scalable: true, growth: 2}
	if bf, err = o.bloomFilter(cmd, "g"); err != nil {
		t.Fatal(err)
	}
	if bf.Spec.Scalable != nil || bf.Spec.Growth != nil || bf.Spec.Expiry != nil || bf.Spec.DeletionPolicy != "" {
		t.Errorf("defaults given explicitly: %+v", bf.Spec)
	}
}

func TestUnreachableAPIServer(t *testing.T) {
	_, err := execute(t, "", "status")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Kubernetes API server at https://127.0.0.1:1") {
		t.Errorf("got %v", err)
	}
}

// fakeAPIServer answers the API server's paths from a map of "METHOD path" to status and body.
func fakeAPIServer(t *testing.T, routes map[string]func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := routes[r.Method+" "+r.URL.Path]; ok {
			h(w, r)
			return
		}
		t.Logf("fake API server: no route for %s %s", r.Method, r.URL.Path)
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg, Details: details,
	})
}

const clustersPath = "/apis/bloomery.io/v1alpha1/namespaces/team/bloomclusters"

func clusterList(names ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		list := bloomeryv1alpha1.BloomClusterList{TypeMeta: metav1.TypeMeta{APIVersion: "bloomery.io/v1alpha1", Kind: "BloomClusterList"}}
		for _, n := range names {
			list.Items = append(list.Items, bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "team"}})
		}
		writeJSON(w, http.StatusOK, list)
	}
}

func TestRBACDenied(t *testing.T) {
	server := fakeAPIServer(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET " + clustersPath: func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				`bloomclusters.bloomery.io is forbidden: User "dev" cannot list resource "bloomclusters" in API group "bloomery.io" in the namespace "team"`,
				&metav1.StatusDetails{Group: "bloomery.io", Kind: "bloomclusters"})
		},
	})
	_, err := execute(t, server, "status")
	if err == nil || !strings.Contains(err.Error(), `RBAC denied: you may not list bloomclusters.bloomery.io in namespace "team"`) {
		t.Errorf("got %v", err)
	}
}

func TestClusterNotFound(t *testing.T) {
	server := fakeAPIServer(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET " + clustersPath + "/nosuch": func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, `bloomclusters.bloomery.io "nosuch" not found`,
				&metav1.StatusDetails{Name: "nosuch", Group: "bloomery.io", Kind: "bloomclusters"})
		},
		"GET " + clustersPath: clusterList("alpha", "beta"),
	})
	for _, args := range [][]string{{"status", "nosuch"}, {"check", "nosuch", "f", "v"}, {"info", "nosuch", "f"}} {
		_, err := execute(t, server, args...)
		if err == nil || err.Error() != `BloomCluster "nosuch" not found in namespace "team"; there are: alpha, beta` {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestCRDsMissing(t *testing.T) {
	_, err := execute(t, fakeAPIServer(t, nil), "status")
	if err == nil || !strings.Contains(err.Error(), "is Bloomery's operator, with its CRDs, installed?") {
		t.Errorf("got %v", err)
	}
}

// TestThroughTheProxy checks and adds through the API server's proxy to the client Service, and
// turns the data plane's 404 and the API server's refusal into errors that say what to do.
func TestThroughTheProxy(t *testing.T) {
	proxy := "/api/v1/namespaces/team/services/http:example:http/proxy/v1/bloomfilter/"
	var gotBody map[string][]string
	server := fakeAPIServer(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET " + clustersPath + "/example": func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, bloomeryv1alpha1.BloomCluster{ObjectMeta: metav1.ObjectMeta{Name: "example", Namespace: "team"}})
		},
		"POST " + proxy + "users/multi-check": func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&gotBody)
			writeJSON(w, http.StatusOK, []bool{true, false})
		},
		"POST " + proxy + "gone/multi-check-and-set": func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "filter gone not found", "code": 2})
		},
		"GET /apis/bloomery.io/v1alpha1/namespaces/team/bloomfilters": func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, bloomeryv1alpha1.BloomFilterList{Items: []bloomeryv1alpha1.BloomFilter{
				{ObjectMeta: metav1.ObjectMeta{Name: "users"}, Spec: bloomeryv1alpha1.BloomFilterSpec{ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "example"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: bloomeryv1alpha1.BloomFilterSpec{ClusterRef: bloomeryv1alpha1.ClusterReference{Name: "elsewhere"}}},
			}})
		},
		"GET " + proxy + "users": func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "address not allowed", nil)
		},
		"POST " + proxy + "users/multi-set": func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "example"`, nil)
		},
	})
	out, err := execute(t, server, "check", "example", "users", "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if want := "VALUE   PRESENT\nalice   true\nbob     false\n"; out != want {
		t.Errorf("check printed\n%s\nwant\n%s", out, want)
	}
	if fmt.Sprint(gotBody) != "map[values:[alice bob]]" {
		t.Errorf("check sent %v", gotBody)
	}

	_, err = execute(t, server, "add", "example", "gone", "v")
	if err == nil || err.Error() != `on BloomCluster "example": filter "gone" not found in namespace "team"; there are: users` {
		t.Errorf("add to a missing filter: %v", err)
	}
	_, err = execute(t, server, "add", "--set-only", "example", "users", "v")
	if err == nil || !strings.Contains(err.Error(), `no ready pod behind the Service of BloomCluster "example"`) || !strings.Contains(err.Error(), "--direct") {
		t.Errorf("add without endpoints: %v", err)
	}
	_, err = execute(t, server, "info", "example", "users")
	if err == nil || !strings.Contains(err.Error(), "the API server refuses to proxy to the address of service http:example:http") ||
		!strings.Contains(err.Error(), "use --direct") {
		t.Errorf("info refused by the proxy: %v", err)
	}
}
