// Package charts holds the tests of the Helm chart and of the kustomize install: what they
// render must be accepted by a real kube-apiserver (envtest's), with the CRDs installed.
package charts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bloomery/bloomery/internal/testassets"
)

const (
	root     = ".."
	chartDir = "bloomery"
	// The namespace of the releases, as in the kustomize install.
	releaseNamespace = "bloomery-system"
)

// tool is the path of a binary that the Makefile installs into bin/ (env name set by make).
// The test fails, not skips, without it: CI must never pass by not running.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	testassets.SkipInShort(t, name)
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join(root, "bin", name)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("%s not found at %s (env %s): run `make helm kustomize` (or `make test`, which installs them)", name, abs, env)
	}
	return abs
}

func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// helmTemplate renders the chart as `helm template` does for an install into releaseNamespace.
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm := tool(t, "HELM", "helm")
	base := []string{"template", "bloomery", chartDir, "--namespace", releaseNamespace}
	return decode(t, run(t, ".", helm, append(base, args...)...))
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding the rendered manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if len(objs) == 0 {
		t.Fatal("nothing rendered")
	}
	return objs
}

func readObjects(t *testing.T, paths ...string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decode(t, b)...)
	}
	return objs
}

// apiServer starts envtest's kube-apiserver, with the CRDs of config/crd/bases and the Prometheus
// Operator's ServiceMonitor and PrometheusRule CRDs when withCRDs, and returns a client of it
// and the path of a kubeconfig file for it.
func apiServer(t *testing.T, withCRDs bool) (client.Client, string) {
	t.Helper()
	env := &envtest.Environment{BinaryAssetsDirectory: testassets.Kubernetes(t)}
	if withCRDs {
		env.CRDDirectoryPaths = []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "test", "crds", "monitoring.coreos.com_servicemonitors.yaml"),
			filepath.Join(root, "test", "crds", "monitoring.coreos.com_prometheusrules.yaml"),
		}
		env.ErrorIfCRDPathMissing = true
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}

// dryRunApply sends every object to the API server as a server-side apply with dryRun=All: the
// server validates it completely (schema, CEL rules, defaults, admission) and stores nothing.
// Server-side apply refuses fields the schema does not declare. The namespaces the objects
// name are created first, for real, since a dry run creates nothing.
func dryRunApply(t *testing.T, c client.Client, defaultNamespace string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		ns := o.GetNamespace()
		if o.GetKind() == "Namespace" {
			ns = o.GetName()
		}
		if ns == "" {
			continue
		}
		err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	for _, o := range objs {
		o = o.DeepCopy()
		mapping, err := c.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Errorf("%s %s: kind unknown to the API server: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		if mapping.Scope.Name() == "namespace" && o.GetNamespace() == "" {
			o.SetNamespace(defaultNamespace)
		}
		err = c.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(o),
			client.DryRunAll, client.ForceOwnership, client.FieldOwner("bloomery-chart-test"))
		if err != nil {
			t.Errorf("%s %s/%s refused by the API server: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if o.GetKind() == "Deployment" {
			podIsRestricted(t, c, o)
		}
	}
}

// restrictedNamespace enforces the restricted Pod Security Standard.
const restrictedNamespace = "restricted"

// podIsRestricted creates (dry run) a Pod of the Deployment's template in a namespace that
// enforces the restricted Pod Security Standard: the PodSecurity admission of the API server
// refuses it unless the operator's pod is as locked down as the standard requires.
func podIsRestricted(t *testing.T, c client.Client, deployment *unstructured.Unstructured) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restrictedNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := c.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", restrictedNamespace, err)
	}
	spec, ok, err := unstructured.NestedMap(deployment.Object, "spec", "template", "spec")
	if !ok || err != nil {
		t.Fatalf("Deployment %s has no pod template (%v)", deployment.GetName(), err)
	}
	// The ServiceAccount exists only in the release's namespace; the check is about security.
	delete(spec, "serviceAccountName")
	pod := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetName(deployment.GetName())
	pod.SetNamespace(restrictedNamespace)
	if err := c.Create(t.Context(), pod, client.DryRunAll); err != nil {
		t.Errorf("the pod of Deployment %s breaks the restricted Pod Security Standard: %v", deployment.GetName(), err)
	}
}

// TestInstallManifestsAreAccepted renders the chart with several value sets, and the kustomize
// install, and has a real API server validate every object.
func TestInstallManifestsAreAccepted(t *testing.T) {
	tool(t, "HELM", "helm")
	kustomize := tool(t, "KUSTOMIZE", "kustomize")
	c, _ := apiServer(t, true)

	bloomClusterValues := filepath.Join(t.TempDir(), "bloomcluster.yaml")
	if err := os.WriteFile(bloomClusterValues, []byte(`
bloomCluster:
  enabled: true
  name: filters
  replicas: 3
  image: registry.example/bloomery:v9
  resources:
    requests: {cpu: 250m, memory: 512Mi}
    limits: {memory: 2Gi}
  storage: {size: 10Gi, storageClassName: fast, whenDeleted: Delete, whenScaled: Retain}
  persistence:
    logSync: Always
    snapshotTriggers:
      - {periodSeconds: 60, updatesMoreThan: 1000}
    allowRecoveryFromCorruptSnapshot: false
  limits: {maxFilterBytes: 512Mi, maxTotalBytes: 1536Mi}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations:
    - {key: dedicated, operator: Equal, value: bloom, effect: NoSchedule}
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels: {app.kubernetes.io/name: bloomery, app.kubernetes.io/component: dataplane}
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels: {app.kubernetes.io/name: bloomery, app.kubernetes.io/component: dataplane}
  priorityClassName: system-cluster-critical
  imagePullSecrets: [{name: registry}]
  podDisruptionBudget: {enabled: true, maxUnavailable: 34%}
  serviceMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
`), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		// Kinds the case must render, so that it cannot pass by rendering nothing new.
		want []string
	}{
		{"defaults", nil, []string{"CustomResourceDefinition", "Deployment", "ClusterRole", "ClusterRoleBinding", "Role", "Service"}},
		{"watchNamespaces", []string{"--set", "watchNamespaces={team-a,team-b}"}, []string{"Role", "RoleBinding"}},
		{"serviceMonitor forced", []string{"--set", "prometheus.serviceMonitor.forceEnable=true",
			"--set", "prometheus.serviceMonitor.labels.release=kube-prometheus-stack",
			"--set", "prometheus.serviceMonitor.namespace=monitoring",
			"--set", "prometheus.rules.labels.release=kube-prometheus-stack",
			"--set", "prometheus.rules.namespace=monitoring"}, []string{"ServiceMonitor", "PrometheusRule"}},
		{"serviceMonitor detected", []string{"--api-versions", "monitoring.coreos.com/v1"}, []string{"ServiceMonitor", "PrometheusRule"}},
		{"grafana dashboard", []string{"--set", "grafana.dashboard.enabled=true", "--set", "grafana.dashboard.namespace=monitoring",
			"--set", "grafana.dashboard.annotations.grafana_folder=Bloomery"}, []string{"ConfigMap"}},
		{"bloomCluster", []string{"--values", bloomClusterValues, "--api-versions", "bloomery.io/v1alpha1"}, []string{"BloomCluster"}},
		{"bloomCluster defaults, CRD present", []string{"--set", "bloomCluster.enabled=true", "--api-versions", "bloomery.io/v1alpha1"},
			[]string{"BloomCluster"}},
		{"everything off", []string{"--set", "crds.enabled=false,metrics.enabled=false,rbac.userRoles=false",
			"--set", "operator.leaderElection.enabled=false,serviceAccount.create=false"}, []string{"Deployment"}},
	}
	for _, tc := range cases {
		t.Run("helm "+tc.name, func(t *testing.T) {
			objs := helmTemplate(t, tc.args...)
			for _, kind := range tc.want {
				if len(find(objs, kind)) == 0 {
					t.Errorf("no %s rendered", kind)
				}
			}
			dryRunApply(t, c, releaseNamespace, objs)
		})
	}

	t.Run("kustomize config/default", func(t *testing.T) {
		// The same build as `make build-installer`, without its image edit of config/manager.
		dryRunApply(t, c, releaseNamespace, decode(t, run(t, root, kustomize, "build", "config/default")))
	})
	for _, dir := range []string{"config/prometheus", "config/grafana"} {
		t.Run("kustomize "+dir, func(t *testing.T) {
			dryRunApply(t, c, releaseNamespace, decode(t, run(t, root, kustomize, "build", dir)))
		})
	}
	t.Run("kustomize config/samples", func(t *testing.T) {
		dryRunApply(t, c, "default", decode(t, run(t, root, kustomize, "build", "config/samples")))
	})
}

// find returns the rendered objects of a kind.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// TestChartCopiesOfGeneratedManifestsAreCurrent fails when the CRDs or the operator's RBAC rules
// in the chart differ from what `make manifests` generates in config/.
func TestChartCopiesOfGeneratedManifestsAreCurrent(t *testing.T) {
	const fix = "run `make helm-manifests` to copy them from config/"
	rendered := helmTemplate(t)

	want := map[string]*unstructured.Unstructured{}
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (%v)", err)
	}
	for _, crd := range readObjects(t, bases...) {
		want[crd.GetName()] = crd
	}
	got := find(rendered, "CustomResourceDefinition")
	if len(got) != len(want) {
		t.Errorf("the chart has %d CRDs, config/crd/bases %d: %s", len(got), len(want), fix)
	}
	for _, crd := range got {
		crd = crd.DeepCopy()
		if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s: not kept on uninstall by default", crd.GetName())
		}
		// The chart adds its labels and the keep annotation; everything else must be equal.
		crd.SetLabels(nil)
		annotations := crd.GetAnnotations()
		delete(annotations, "helm.sh/resource-policy")
		crd.SetAnnotations(annotations)
		base, ok := want[crd.GetName()]
		if !ok {
			t.Errorf("CRD %s is in the chart but not in config/crd/bases: %s", crd.GetName(), fix)
			continue
		}
		if !reflect.DeepEqual(crd.Object, base.Object) {
			t.Errorf("CRD %s in the chart differs from config/crd/bases: %s", crd.GetName(), fix)
		}
	}

	role := readObjects(t, filepath.Join(root, "config", "rbac", "role.yaml"))
	roles := find(rendered, "ClusterRole")
	i := slices.IndexFunc(roles, func(o *unstructured.Unstructured) bool { return o.GetName() == "bloomery-operator" })
	if i < 0 {
		t.Fatal("no ClusterRole bloomery-operator rendered")
	}
	if !reflect.DeepEqual(roles[i].Object["rules"], role[0].Object["rules"]) {
		t.Errorf("the operator's rules in the chart differ from config/rbac/role.yaml: %s", fix)
	}
}

// TestChartDefaultsMatchKustomize: the chart's default render and `kustomize build
// config/default` install the same operator: same kinds, same rules, same flags and security.
func TestChartDefaultsMatchKustomize(t *testing.T) {
	kustomize := tool(t, "KUSTOMIZE", "kustomize")
	chart := helmTemplate(t)
	kust := decode(t, run(t, root, kustomize, "build", "config/default"))

	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			m[o.GetKind()]++
		}
		return m
	}
	chartKinds, kustKinds := kinds(chart), kinds(kust)
	// The kustomize install makes its namespace; Helm installs into one (--create-namespace).
	delete(kustKinds, "Namespace")
	if !reflect.DeepEqual(chartKinds, kustKinds) {
		t.Errorf("kinds differ:\nchart:     %v\nkustomize: %v", chartKinds, kustKinds)
	}

	container := func(objs []*unstructured.Unstructured) map[string]any {
		t.Helper()
		deps := find(objs, "Deployment")
		if len(deps) != 1 {
			t.Fatalf("%d Deployments, want 1", len(deps))
		}
		cs, _, _ := unstructured.NestedSlice(deps[0].Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			t.Fatalf("%d containers, want 1", len(cs))
		}
		return cs[0].(map[string]any)
	}
	cc, kc := container(chart), container(kust)
	for _, field := range []string{"securityContext", "livenessProbe", "readinessProbe", "ports", "resources"} {
		if !reflect.DeepEqual(cc[field], kc[field]) {
			t.Errorf("operator container's %s differs:\nchart:     %v\nkustomize: %v", field, cc[field], kc[field])
		}
	}
	flagNames := func(c map[string]any) []string {
		var names []string
		for _, a := range c["args"].([]any) {
			name, _, _ := strings.Cut(fmt.Sprint(a), "=")
			names = append(names, name)
		}
		return names
	}
	for _, flag := range flagNames(kc) {
		if !slices.Contains(flagNames(cc), flag) {
			t.Errorf("the kustomize install passes %s and the chart does not", flag)
		}
	}
}

// TestHelmInstallUpgradeUninstall runs the real Helm life cycle against an API server that has
// no CRDs yet: the install creates the CRDs but not the default BloomCluster (Helm maps every
// object of a release before creating any, so that kind cannot be in the release that creates
// its CRD), the next upgrade creates it, and the uninstall deletes it and keeps the CRDs.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	helm := tool(t, "HELM", "helm")
	c, kubeconfig := apiServer(t, false)
	home := t.TempDir()
	helmCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), helm, append(args, "--kubeconfig", kubeconfig, "--namespace", releaseNamespace)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Helm waits for its CRDs to be established, but the API server's discovery, which the
	// client's REST mapper reads, can lag behind: until it lists the kind, ask again.
	bloomCluster := func() error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("bloomery.io/v1alpha1")
		u.SetKind("BloomCluster")
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := c.Get(t.Context(), client.ObjectKey{Namespace: releaseNamespace, Name: "bloomery"}, u)
			if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	notes := helmCmd("install", "bloomery", chartDir, "--create-namespace", "--set", "bloomCluster.enabled=true")
	if err := bloomCluster(); !apierrors.IsNotFound(err) {
		t.Fatalf("after install, the default BloomCluster: %v, want none yet", err)
	}
	if !strings.Contains(notes, "--reuse-values") {
		t.Errorf("the install's notes do not say how to create the BloomCluster:\n%s", notes)
	}
	helmCmd("upgrade", "bloomery", chartDir, "--reuse-values")
	if err := bloomCluster(); err != nil {
		t.Fatalf("after upgrade, the default BloomCluster: %v", err)
	}
	helmCmd("uninstall", "bloomery")
	if err := bloomCluster(); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall, the BloomCluster of the release: %v, want it deleted", err)
	}
	for _, name := range []string{"bloomclusters.bloomery.io", "bloomfilters.bloomery.io"} {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Errorf("after uninstall, CRD %s: %v, want it kept", name, err)
		}
	}
}
