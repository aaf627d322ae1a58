//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/testca"
)

// kubectlTimeout bounds one kubectl command that is not itself a wait.
const kubectlTimeout = time.Minute

// kubectl runs the kubectl built with the control plane against it, as the administrator. Its
// discovery cache lives in the run's directory, not in the user's home.
type kubectl struct {
	path, kubeconfig, cacheDir string
}

// run runs kubectl with args and stdin, and returns its output; err includes stderr.
func (k kubectl) run(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := k.command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), nil
}

// command is kubectl with args, killed when ctx ends or the test binary dies.
func (k kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)
	cmd := exec.CommandContext(ctx, k.path, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// namespace is kubectl in one namespace of one test.
type namespace struct {
	t    testing.TB
	name string
}

// run runs kubectl in the namespace and fails the test if it fails.
func (n namespace) run(args ...string) string {
	n.t.Helper()
	out, err := n.try(args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// try runs kubectl in the namespace and returns its output and error.
func (n namespace) try(args ...string) (string, error) {
	return n.tryStdin("", args...)
}

// apply applies a manifest from stdin and fails the test if it is refused.
func (n namespace) apply(manifest string) string {
	n.t.Helper()
	out, err := n.tryStdin(manifest, "apply", "-f", "-")
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

func (n namespace) tryStdin(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout+waitTimeout)
	defer cancel()
	out, _, err := h.kubectl.run(ctx, stdin, append([]string{"--namespace", n.name}, args...)...)
	return out, err
}

// jsonpath reads one field of an object with -o jsonpath.
func (n namespace) jsonpath(object, path string) string {
	n.t.Helper()
	return n.run("get", object, "-o", "jsonpath="+path)
}

// wait runs kubectl wait --for=cond on objects, which watches rather than polls.
func (n namespace) wait(cond string, objects ...string) {
	n.t.Helper()
	args := append([]string{"wait", "--for=" + cond, "--timeout=" + waitTimeout.String()}, objects...)
	if _, err := n.try(args...); err != nil {
		n.t.Fatalf("waiting for %s of %s: %v", cond, strings.Join(objects, " "), err)
	}
}

// createTLSSecret makes a CA and a certificate for the sample cluster's Service, and the
// kubernetes.io/tls Secret example-tls holding them as cert-manager writes one.
func (n namespace) createTLSSecret() (*testca.CA, testca.Issued) {
	n.t.Helper()
	ca, err := testca.New("bloomery-e2e-" + n.name)
	if err != nil {
		n.t.Fatal(err)
	}
	issued, err := ca.Issue("example." + n.name + ".svc")
	if err != nil {
		n.t.Fatal(err)
	}
	files, err := ca.WriteFiles(n.t.TempDir(), issued)
	if err != nil {
		n.t.Fatal(err)
	}
	n.run("create", "secret", "generic", "example-tls", "--type=kubernetes.io/tls",
		"--from-file=tls.crt="+files.Cert, "--from-file=tls.key="+files.Key, "--from-file=ca.crt="+files.CA)
	return ca, issued
}
