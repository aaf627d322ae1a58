//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// operatorResync is the operator's --resync and --filter-resync: shorter than the defaults (30 s
// and 10 min), so that what only a periodic pass notices shows within seconds, and so that a pass
// that called the pods would show in their calls (TestQuietMinuteCallsDoNotGrowWithFilters).
const operatorResync = "5s"

// buildTimeout bounds the build of the binary: seconds with a warm build cache, minutes cold.
const buildTimeout = 10 * time.Minute

// buildBloomery builds the bloomery binary of the repository at root into dir: the operator and
// every data-plane pod run it. When the suite runs with the race detector the binary has it too,
// and the suite fails on a race any process reports (raceReports); E2E_BUILD_FLAGS adds flags.
func buildBloomery(root, dir string) (string, error) {
	out := filepath.Join(dir, "bloomery")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	args := append([]string{"build", "-ldflags", "-X main.version=e2e", "-o", out}, strings.Fields(os.Getenv("E2E_BUILD_FLAGS"))...)
	if raceDetector {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, output)
	}
	return out, nil
}

// operatorRun is how one `bloomery operator` process runs, as installed: as a ServiceAccount (the
// kubeconfig holds its token), with leader election in its own namespace, its metrics over HTTPS.
type operatorRun struct {
	name           string // of its process, and of its log: <name>.log
	kubeconfig     string
	namespace      string // its own: the lease's, and --operator-namespace
	watchNamespace string // --watch-namespace; empty: every namespace
	metrics        bool   // serve metrics over HTTPS on a free port; off: --metrics-bind-address 0
}

// runningOperator is an operator's process and where its metrics are.
type runningOperator struct {
	*process
	metricsURL string // https://127.0.0.1:port/metrics; empty with metrics off
	pprofURL   string // http://127.0.0.1:port/debug/pprof; empty but in the scale benchmark
}

// startOperator runs `bloomery operator` as a process against the control plane, and waits until
// it reports ready and holds its lease: only the leader reconciles.
func (hs *harness) startOperator(run operatorRun) (*runningOperator, error) {
	probe, err := freeLocalAddress()
	if err != nil {
		return nil, err
	}
	metricsAddr, pprofAddr := "0", ""
	if run.metrics {
		if metricsAddr, err = freeLocalAddress(); err != nil {
			return nil, err
		}
	}
	args := []string{"operator",
		"--health-probe-bind-address", probe,
		// Over HTTPS (--metrics-secure, the default) with a self-signed certificate made at start,
		// for callers the API server authenticates and authorizes.
		"--metrics-bind-address", metricsAddr,
		"--leader-elect",
		// In a cluster the operator's namespace is its pod's; out of one it must be named.
		"--leader-election-namespace", run.namespace,
		"--operator-namespace", run.namespace,
		"--zap-devel=false",
	}
	if os.Getenv(benchOperatorEnv) == "" {
		// The operator scale benchmark measures the defaults.
		args = append(args, "--resync", operatorResync, "--filter-resync", operatorResync)
	} else {
		// But a lease that outlasts an API server slowed by thousands of filters' writes on a
		// loaded machine: with the defaults, renewals timed out for 10 s and the operator stopped,
		// where in a cluster it would restart, and the benchmark waited for nothing.
		args = append(args, "--leader-election-lease-duration", "60s", "--leader-election-renew-deadline", "45s")
		// And its profiles, which the benchmark saves for each phase.
		if pprofAddr, err = freeLocalAddress(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address", pprofAddr)
	}
	if run.watchNamespace != "" {
		args = append(args, "--watch-namespace", run.watchNamespace)
	}
	started := time.Now()
	p, err := startProcess(run.name, filepath.Join(hs.workDir, run.name+".log"), []string{"KUBECONFIG=" + run.kubeconfig}, hs.binary, args...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitHTTPOK(ctx, "http://"+probe+"/readyz", p); err != nil {
		return nil, errors.Join(fmt.Errorf("%s not ready: %w", run.name, err), p.stop(10*time.Second))
	}
	if err := hs.waitLease(p, run.namespace, leaseID, started); err != nil {
		return nil, errors.Join(err, p.stop(10*time.Second))
	}
	o := &runningOperator{process: p}
	if pprofAddr != "" {
		o.pprofURL = "http://" + pprofAddr + "/debug/pprof"
	}
	if run.metrics {
		o.metricsURL = "https://" + metricsAddr + "/metrics"
	}
	return o, nil
}

// freeLocalAddress returns a 127.0.0.1 address with a port free right now.
func freeLocalAddress() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// waitHTTPOK polls url until it answers 200, p exits or ctx ends.
func waitHTTPOK(ctx context.Context, url string, p *process) error {
	for {
		if err := p.running(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close() // only the status matters
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200: %w", url, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// repoRoot is the repository's root, from this package's directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return filepath.Abs(filepath.Join(wd, "..", ".."))
}

// raceReport is what the race detector writes when it finds a data race.
const raceReport = "WARNING: DATA RACE"

// raceReports lists the logs under dir (the operator's, the node agent's and every pod's) that
// hold a race report, with the report's first lines.
func raceReports(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".log" {
			return err // the binary holds the report's text too
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := bytes.Index(data, []byte(raceReport)); i >= 0 {
			found = append(found, path+":\n"+string(data[i:min(len(data), i+3000)]))
		}
		return nil
	})
	return found, err
}
