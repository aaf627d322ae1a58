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
	"testing"
)

// profileSeconds is the length of each CPU profile a phase of the scale benchmark saves: a phase's
// end is not known in advance, and a profile cut short is lost, so a phase is a series of them.
const profileSeconds = 10

// profilePhase saves the operator's CPU profiles, one per profileSeconds, until the returned stop
// is called (it waits for the profile under way), in the run directory under profiles/<phase>-N.pprof:
//
//	go tool pprof -top bin/bloomery profiles/ready-10000-*.pprof
func profilePhase(t *testing.T, o *runningOperator, phase string) (stop func()) {
	t.Helper()
	dir := filepath.Join(h.workDir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			path := filepath.Join(dir, fmt.Sprintf("%s-%03d.pprof", phase, i))
			// Not cut short by stop: a profile cut short is lost.
			if err := saveProfile(context.Background(), o.pprofURL, path); err != nil {
				t.Logf("profiling the operator (%s): %v", phase, err)
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
		t.Logf("the operator's CPU profiles while %s: %s", phase, filepath.Join(dir, phase+"-*.pprof"))
	}
}

// saveProfile writes one CPU profile of profileSeconds, taken from pprofURL, to path.
func saveProfile(ctx context.Context, pprofURL, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/profile?seconds=%d", pprofURL, profileSeconds), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
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
