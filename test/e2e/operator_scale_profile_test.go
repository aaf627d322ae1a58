//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// benchProfilesEnv, set (make bench-operator PROFILES=1), has the scale benchmark save CPU profiles
// of each phase; unset, it profiles nothing, since profiling costs the processes it measures.
const benchProfilesEnv = "E2E_BENCH_PROFILES"

// profileSeconds is the length of each CPU profile a phase of the scale benchmark saves: a phase's
// end is not known in advance, and a profile cut short is lost, so a phase is a series of them.
const profileSeconds = 10

// profiled is a process whose CPU profiles the benchmark saves: its name in the files', the base
// of its /debug/pprof, and the client that may read it.
type profiled struct {
	name, pprofURL string
	client         *http.Client
}

// profiledProcesses are the operator and the API server, whose work the benchmark measures.
func profiledProcesses(t *testing.T, o *runningOperator) []profiled {
	t.Helper()
	admin, err := rest.HTTPClientFor(h.cp.config)
	if err != nil {
		t.Fatal(err)
	}
	return []profiled{
		{name: "operator", pprofURL: o.pprofURL, client: http.DefaultClient},
		{name: "apiserver", pprofURL: strings.TrimSuffix(h.cp.config.Host, "/") + "/debug/pprof", client: admin},
	}
}

// profilePhase saves each process's CPU profiles, one per profileSeconds, until the returned stop
// is called (it waits for the profiles under way), in the run directory, as
// profiles/<process>-<phase>-N.pprof:
//
//	go tool pprof -top bloomery profiles/operator-ready-10000-*.pprof
//	go tool pprof -top $KUBEBUILDER_ASSETS/kube-apiserver profiles/apiserver-ready-10000-*.pprof
func profilePhase(t *testing.T, processes []profiled, phase string) (stop func()) {
	t.Helper()
	if os.Getenv(benchProfilesEnv) == "" {
		return func() {}
	}
	dir := filepath.Join(h.workDir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range processes {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				path := filepath.Join(dir, fmt.Sprintf("%s-%s-%03d.pprof", p.name, phase, i))
				// Not cut short by stop: a profile cut short is lost.
				if err := p.save(context.Background(), path); err != nil {
					t.Logf("profiling the %s (%s): %v", p.name, phase, err)
					return
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		t.Logf("CPU profiles while %s: %s", phase, filepath.Join(dir, "*-"+phase+"-*.pprof"))
	}
}

// save writes one CPU profile of profileSeconds to path.
func (p profiled) save(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/profile?seconds=%d", p.pprofURL, profileSeconds), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}
