//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// The operator runs as installed: as a ServiceAccount with the RBAC of config/rbac, applied with
// the namespace and name prefix config/default gives it.
const (
	// operatorNamespace is the install's namespace: the ServiceAccount's, the lease's.
	operatorNamespace = "bloomery-system"
	// installPrefix is config/default's namePrefix.
	installPrefix = "bloomery-"
	// operatorAccount is the operator's ServiceAccount, config/rbac's "operator" with the prefix.
	operatorAccount = installPrefix + "operator"
	// metricsReaderRole is config/rbac's ClusterRole for whoever scrapes the operator.
	metricsReaderRole = installPrefix + "metrics-reader"
	// leaseID is the operator's default --leader-election-id.
	leaseID = "operator.bloomery.io"
	// tokenLifetime outlives any run of the suite: the operator's token is not renewed, where a
	// kubelet would renew a pod's.
	tokenLifetime = 6 * time.Hour
)

// installOperator applies config/rbac as config/default does (its namespace, its name prefix), in
// the namespace it creates first: the ServiceAccount, the ClusterRole generated from the markers
// and its binding, the leader election Role, the metrics auth and reader ClusterRoles. It returns
// a kubeconfig that authenticates as the ServiceAccount.
func (hs *harness) installOperator() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	if _, _, err := hs.kubectl.run(ctx, "", "create", "namespace", operatorNamespace); err != nil {
		return "", err
	}
	overlay, err := kustomizeOverlay(filepath.Join(hs.workDir, "install"), operatorNamespace, installPrefix,
		filepath.Join(hs.root, "config", "rbac"))
	if err != nil {
		return "", err
	}
	if _, _, err := hs.kubectl.run(ctx, "", "apply", "-k", overlay); err != nil {
		return "", fmt.Errorf("installing config/rbac: %w", err)
	}
	return hs.accountKubeconfig(operatorNamespace, operatorAccount, tokenLifetime)
}

// kustomizeOverlay writes, in dir, a kustomization of bases with a namespace and a name prefix,
// and returns dir.
func kustomizeOverlay(dir, namespace, prefix string, bases ...string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var resources strings.Builder
	for _, base := range bases {
		rel, err := filepath.Rel(dir, base) // kustomize takes a base by a relative path only
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&resources, "  - %s\n", rel)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
namePrefix: %s
resources:
%s`, namespace, prefix, resources.String())
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600)
}

// token mints a token of the ServiceAccount through the TokenRequest API, as `kubectl create
// token` does.
func (hs *harness) token(namespace, account string, lifetime time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	out, _, err := hs.kubectl.run(ctx, "", "create", "token", account, "--namespace", namespace, "--duration", lifetime.String())
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// accountKubeconfig writes a kubeconfig that reaches the control plane as the administrator's does
// and authenticates with a token of the ServiceAccount, and returns its path.
func (hs *harness) accountKubeconfig(namespace, account string, lifetime time.Duration) (string, error) {
	token, err := hs.token(namespace, account, lifetime)
	if err != nil {
		return "", err
	}
	config, err := clientcmd.LoadFromFile(hs.cp.kubeconfigPath)
	if err != nil {
		return "", fmt.Errorf("reading the administrator's kubeconfig: %w", err)
	}
	kubeContext := config.Contexts[config.CurrentContext]
	if kubeContext == nil {
		return "", fmt.Errorf("the administrator's kubeconfig has no context %q", config.CurrentContext)
	}
	user := namespace + "-" + account
	config.AuthInfos = map[string]*clientcmdapi.AuthInfo{user: {Token: token}}
	kubeContext.AuthInfo = user
	path := filepath.Join(hs.workDir, "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s/%s: %w", namespace, account, err)
	}
	return path, nil
}

// readRules reads the rules of a Role or ClusterRole of config/rbac.
func readRules(root, file string) ([]rbacv1.PolicyRule, error) {
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
	if err != nil {
		return nil, err
	}
	var role rbacv1.ClusterRole // a Role's fields are the same
	if err := yaml.Unmarshal(data, &role); err != nil {
		return nil, fmt.Errorf("config/rbac/%s: %w", file, err)
	}
	if len(role.Rules) == 0 {
		return nil, fmt.Errorf("config/rbac/%s has no rules", file)
	}
	return role.Rules, nil
}

// roleManifest is a Role of rules in namespace and its binding to a ServiceAccount, as YAML.
func roleManifest(name, namespace string, rules []rbacv1.PolicyRule, account rbacv1.Subject) (string, error) {
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	role := rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: meta,
		Rules:      rules,
	}
	binding := rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{account},
	}
	var docs []string
	for _, o := range []any{role, binding} {
		data, err := yaml.Marshal(o)
		if err != nil {
			return "", err
		}
		docs = append(docs, string(data))
	}
	return strings.Join(docs, "---\n"), nil
}

// rbacDenial is how the API server refuses a request that RBAC does not allow, as client-go and
// the operator's log (where quotes are escaped) carry it. A namespace being deleted refuses
// creates as forbidden too, with another message ("unable to create new content").
var rbacDenial = regexp.MustCompile(`is forbidden: User \\?"[^"\\]+\\?" cannot [a-z]+ `)

// rbacDenials lists the operators' logs under dir (operator*.log) that hold a request the RBAC
// refused, with the first such line: the operator must never lack a permission it uses.
func rbacDenials(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), "operator") || filepath.Ext(path) != ".log" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(data)) {
			if rbacDenial.MatchString(line) {
				found = append(found, path+":\n"+strings.TrimSpace(line))
				break
			}
		}
		return nil
	})
	return found, err
}

// leaseAcquiredSince reports whether the lease ns/id is held, and was acquired at or after since.
func (hs *harness) leaseAcquiredSince(ns, id string, since time.Time) (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	out, _, err := hs.kubectl.run(ctx, "", "get", "lease", id, "--namespace", ns,
		"-o", "jsonpath={.spec.holderIdentity} {.spec.acquireTime}")
	if err != nil {
		return false, "", err
	}
	holder, acquired, _ := strings.Cut(out, " ")
	at, err := time.Parse(time.RFC3339Nano, acquired)
	if holder == "" || err != nil {
		return false, out, nil // a lease released, or being taken: not yet
	}
	return !at.Before(since), out, nil
}

// waitLease waits until the operator p holds the lease ns/id, acquired after it started.
func (hs *harness) waitLease(p *process, ns, id string, started time.Time) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if err := p.running(); err != nil {
			return err
		}
		ok, seen, err := hs.leaseAcquiredSince(ns, id, started)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s did not acquire the lease %s/%s within a minute (lease: %q; log: %s)",
				p.name, ns, id, seen, p.logPath), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
