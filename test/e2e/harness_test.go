//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bloomery/bloomery/internal/testassets"
)

// h is the harness every test shares: one control plane, one operator, one node.
var h *harness

type harness struct {
	root     string // the repository
	workDir  string // this run's files: binaries, kubeconfig, logs, pod directories
	binary   string // bloomery, which the operator and every pod run
	kubectl  kubectl
	net      network
	cp       *controlPlane
	agent    *runningAgent
	proxy    *runningProxy // nil when Services cannot be reached (net.noServices says why)
	stopOnce sync.Once
	stopErr  error

	operatorMu  sync.Mutex
	operator    *runningOperator // the cluster-wide operator; nil while TestNamespacedOperator runs
	operatorRun operatorRun      // how it runs

	hooksMu sync.Mutex
	hooks   []func() // run first by stop: the tests' background commands
}

// onStop registers f to run when the harness stops, before anything else stops.
func (hs *harness) onStop(f func()) {
	hs.hooksMu.Lock()
	defer hs.hooksMu.Unlock()
	hs.hooks = append(hs.hooks, f)
}

// startHarness builds the binary and starts the control plane, the node agent and the operator.
// On failure it stops what it started and returns the harness so far, for its directory.
func startHarness() (*harness, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := testassets.KubernetesDir("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
	if err != nil {
		return nil, fmt.Errorf("%w (`make test-e2e` does)", err)
	}
	workDir, err := os.MkdirTemp("", "bloomery-e2e-")
	if err != nil {
		return nil, fmt.Errorf("creating the run directory: %w", err)
	}
	hs := &harness{root: root, workDir: workDir, net: setUpNetwork()}
	controllers := kubeControllers
	if hs.net.servicesReachable() {
		controllers = append(controllers, endpointSliceController)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: pods get loopback addresses and no Service can be reached, so the scenarios through a Service skip:", hs.net.noServices)
	}

	// The build and the control plane's start both take a while; do them at once.
	type built struct {
		path string
		err  error
	}
	buildDone := make(chan built, 1)
	go func() {
		path, err := buildBloomery(root, workDir)
		buildDone <- built{path, err}
	}()
	hs.cp, err = startControlPlane(assets, []string{
		filepath.Join(root, "config", "crd", "bases"),
		// The Prometheus Operator's ServiceMonitor CRD (hack/servicemonitor-crd.sh), so that the
		// ServiceMonitors the operator makes meet the real schema.
		filepath.Join(root, "test", "crds"),
	}, controllers, workDir)
	b := <-buildDone
	if err = errors.Join(err, b.err); err != nil {
		return hs, errors.Join(err, hs.stop())
	}
	hs.binary = b.path
	hs.kubectl = kubectl{path: filepath.Join(assets, "kubectl"), kubeconfig: hs.cp.kubeconfigPath, cacheDir: filepath.Join(workDir, "kubectl-cache")}

	if hs.agent, err = startAgent(hs.cp.config, b.path, hs.net.pods, workDir); err != nil {
		return hs, errors.Join(err, hs.stop())
	}
	if hs.net.servicesReachable() {
		if hs.proxy, err = startProxy(hs.cp.config, workDir); err != nil {
			return hs, errors.Join(err, hs.stop())
		}
	}
	if err := hs.waitNodeReady(); err != nil {
		return hs, errors.Join(err, hs.stop())
	}
	kubeconfig, err := hs.installOperator()
	if err != nil {
		return hs, errors.Join(err, hs.stop())
	}
	hs.operatorRun = operatorRun{name: "operator", kubeconfig: kubeconfig, namespace: operatorNamespace, metrics: true}
	if hs.operator, err = hs.startOperator(hs.operatorRun); err != nil {
		return hs, errors.Join(err, hs.stop())
	}
	return hs, nil
}

// clusterWideOperator is the operator every test but TestNamespacedOperator runs under.
func (hs *harness) clusterWideOperator() *runningOperator {
	hs.operatorMu.Lock()
	defer hs.operatorMu.Unlock()
	return hs.operator
}

// stopClusterWideOperator stops the cluster-wide operator (it gives up its lease as it stops), and
// returns a function that starts it again.
func (hs *harness) stopClusterWideOperator() (restart func() error, err error) {
	hs.operatorMu.Lock()
	defer hs.operatorMu.Unlock()
	if hs.operator == nil {
		return nil, errors.New("the cluster-wide operator is not running")
	}
	if err := hs.operator.stop(15 * time.Second); err != nil {
		return nil, err
	}
	hs.operator = nil
	return func() error {
		o, err := hs.startOperator(hs.operatorRun)
		if err != nil {
			return err
		}
		hs.operatorMu.Lock()
		defer hs.operatorMu.Unlock()
		hs.operator = o
		return nil
	}, nil
}

// waitNodeReady waits until the agent's node is registered and Ready.
func (hs *harness) waitNodeReady() error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
		out, _, err := hs.kubectl.run(ctx, "", "get", "node", nodeName,
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		cancel()
		if err == nil && out == "True" {
			return nil
		}
		if time.Now().After(deadline) {
			log := filepath.Join(hs.workDir, "node-agent.log")
			if err != nil {
				return fmt.Errorf("node %s not Ready within a minute (see %s): %w", nodeName, log, err)
			}
			return fmt.Errorf("node %s not Ready within a minute (Ready is %q; see %s)", nodeName, out, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop stops the tests' background commands, the cluster-wide operator, then the node agent (which kills every
// pod's process), the service proxy, then the control plane. It runs once; later calls return the first result.
func (hs *harness) stop() error {
	hs.stopOnce.Do(func() {
		hs.hooksMu.Lock()
		for _, f := range hs.hooks {
			f()
		}
		hs.hooksMu.Unlock()
		var errs []error
		if o := hs.clusterWideOperator(); o != nil {
			errs = append(errs, o.stop(15*time.Second))
		}
		if hs.agent != nil {
			errs = append(errs, hs.agent.stop())
		}
		if hs.proxy != nil {
			errs = append(errs, hs.proxy.stop())
		}
		if hs.cp != nil {
			errs = append(errs, hs.cp.stop())
		}
		hs.stopErr = errors.Join(errs...)
	})
	return hs.stopErr
}
