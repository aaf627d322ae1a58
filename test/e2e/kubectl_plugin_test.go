//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bloomery/bloomery/kubectlplugin"
)

// TestKubectlPlugin runs the bloomery binary as kubectl's plugin, `kubectl bloomery`, found by
// kubectl on the PATH under the name kubectl-bloomery, against the samples' cluster: status shows
// the pods ready with their filters, create makes a BloomFilter that becomes Ready, add then check
// answer for the values added and others, info shows the filter, delete removes it.
//
// The plugin reaches the pods through the API server's proxy, as from a laptop with only a
// kubeconfig. Where the suite's pods have loopback addresses (harness_network_test.go), which the
// API server's proxy refuses, the test checks that the plugin says so and what to do, then uses
// --direct, as the test process reaches the pods' addresses.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	p := newPlugin(t, n)

	var direct []string
	if !h.net.servicesReachable() {
		t.Logf("pods on loopback addresses (%s): checking the plugin's advice, then using --direct", h.net.noServices)
		// The client Service has no endpoints (the API server refuses loopback addresses in
		// EndpointSlices), and the proxy to a pod refuses its loopback address.
		if _, err := p.try("check", "example", "users", "alice"); err == nil || !strings.Contains(err.Error(), `no endpoints available for service "example"`) {
			t.Errorf("check through the API server's proxy to the client Service: %v", err)
		}
		var proxied kubectlplugin.ClusterStatus
		p.json(&proxied, "status", "example")
		for _, pod := range proxied.Pods {
			if !strings.Contains(pod.Error, "address not allowed") || !strings.Contains(pod.Error, "--direct") || pod.Filters != nil {
				t.Errorf("status through the API server's proxy to pod %s: %+v", pod.Name, pod)
			}
		}
		direct = []string{"--direct"}
	}

	var status kubectlplugin.ClusterStatus
	p.json(&status, append(direct, "status", "example")...)
	if status.Phase != "AllReplicasReady" || status.ReadyReplicas != sampleReplicas || status.MembershipEpoch < 1 {
		t.Errorf("status: phase %q, %d/%d ready, epoch %d; want AllReplicasReady, %d ready, an epoch",
			status.Phase, status.ReadyReplicas, status.Replicas, status.MembershipEpoch, sampleReplicas)
	}
	if len(status.Pods) != sampleReplicas {
		t.Fatalf("status shows %d pods, want %d: %+v", len(status.Pods), sampleReplicas, status.Pods)
	}
	for _, pod := range status.Pods {
		if !pod.Ready || pod.Filters == nil || *pod.Filters != 1 || pod.Bytes == nil || *pod.Bytes <= 0 || pod.Error != "" {
			t.Errorf("status of pod %s: %+v; want ready, holding 1 filter of some bytes", pod.Name, pod)
		}
	}
	if len(status.Filters) != 1 || status.Filters[0].Name != "users" || status.Filters[0].Ready != "True" {
		t.Errorf("status shows the filters %+v, want users Ready", status.Filters)
	}
	screen := p.run(append(direct, "status", "example")...)
	for _, want := range []string{"Phase:             AllReplicasReady", "Replicas ready:    3/3", "example-2   true"} {
		if !strings.Contains(screen, want) {
			t.Errorf("status does not show %q:\n%s", want, screen)
		}
	}
	t.Logf("kubectl bloomery status example:\n%s", screen)
	if all := p.run("status"); !strings.Contains(all, "example") || !strings.Contains(all, "3/3") {
		t.Errorf("status of the namespace:\n%s", all)
	}

	out := p.run("create", "plugin", "--cluster", "example", "--capacity", "1000", "--false-positive-rate", "0.01", "--wait")
	if !strings.Contains(out, "bloomfilter.bloomery.io/plugin created and Ready") {
		t.Errorf("create said: %s", out)
	}
	if got := n.jsonpath("bloomfilter/plugin", `{.status.conditions[?(@.type=="Ready")].status}`); got != "True" {
		t.Errorf("after create --wait, Ready is %q", got)
	}

	var added []kubectlplugin.ValueResult
	p.json(&added, append(direct, "add", "example", "plugin", "alice", "bob", "carol")...)
	for _, r := range added {
		if r.Present {
			t.Errorf("add: %s was present before it was added", r.Value)
		}
	}
	var checked []kubectlplugin.ValueResult
	p.json(&checked, append(direct, "check", "example", "plugin", "alice", "bob", "carol", "dave", "erin")...)
	want := map[string]bool{"alice": true, "bob": true, "carol": true, "dave": false, "erin": false}
	if len(checked) != len(want) {
		t.Fatalf("check answered %+v", checked)
	}
	for _, r := range checked {
		if r.Present != want[r.Value] {
			t.Errorf("check %s: %v, want %v", r.Value, r.Present, want[r.Value])
		}
	}
	t.Logf("kubectl bloomery check example plugin ...:\n%s", p.run(append(direct, "check", "example", "plugin", "alice", "dave")...))

	var info struct {
		Name               string `json:"name"`
		ExpectedInsertions uint64 `json:"expectedInsertions"`
		Items              uint64 `json:"items"`
	}
	p.json(&info, append(direct, "info", "example", "plugin")...)
	if info.Name != "plugin" || info.ExpectedInsertions != 1000 || info.Items != 3 {
		t.Errorf("info: %+v, want plugin of capacity 1000 holding 3 items", info)
	}
	t.Logf("kubectl bloomery info example plugin:\n%s", p.run(append(direct, "info", "example", "plugin")...))

	if _, err := p.try("status", "nosuch"); err == nil || !strings.Contains(err.Error(), `BloomCluster "nosuch" not found`) || !strings.Contains(err.Error(), "there are: example") {
		t.Errorf("status of a missing cluster: %v", err)
	}
	if _, err := p.try(append(direct, "check", "example", "nosuch", "v")...); err == nil || !strings.Contains(err.Error(), `filter "nosuch" not found`) || !strings.Contains(err.Error(), "plugin, users") {
		t.Errorf("check of a missing filter: %v", err)
	}

	if out := p.run("delete", "plugin"); !strings.Contains(out, "bloomfilter.bloomery.io/plugin deleted") {
		t.Errorf("delete said: %s", out)
	}
	n.wait("delete", "bloomfilter/plugin")
	if _, err := p.try("delete", "plugin"); err == nil || !strings.Contains(err.Error(), `BloomFilter "plugin" not found`) {
		t.Errorf("deleting it again: %v", err)
	}
}

// plugin runs `kubectl bloomery` in one namespace, kubectl finding the plugin on the PATH.
type plugin struct {
	t    *testing.T
	n    namespace
	path string // PATH, with the directory of kubectl-bloomery first
}

// newPlugin links the suite's binary as kubectl-bloomery in a directory of its own.
func newPlugin(t *testing.T, n namespace) plugin {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(h.binary, filepath.Join(dir, kubectlplugin.BinaryName)); err != nil {
		t.Fatal(err)
	}
	return plugin{t: t, n: n, path: dir + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// try runs kubectl bloomery with args, and returns its output; err includes stderr.
func (p plugin) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout+waitTimeout)
	defer cancel()
	full := append([]string{"bloomery", "--kubeconfig", h.kubectl.kubeconfig, "--namespace", p.n.name}, args...)
	cmd := exec.CommandContext(ctx, h.kubectl.path, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "PATH="+p.path)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl bloomery %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

func (p plugin) run(args ...string) string {
	p.t.Helper()
	out, err := p.try(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// json runs kubectl bloomery with -o json and decodes its output into v.
func (p plugin) json(v any, args ...string) {
	p.t.Helper()
	out := p.run(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		p.t.Fatalf("kubectl bloomery %s -o json: %v:\n%s", strings.Join(args, " "), err, out)
	}
}
