package run_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// With homeLeaseSeconds, Run renews the pod's lease from the start. Outside Kubernetes every
// renewal fails (no in-cluster configuration): the pod holds no lease, says so in its metrics,
// and serves all the same.
//
// Not parallel: it takes the Kubernetes API's address out of the environment.
func TestHomeLeaseRenewedFromTheStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	ts := dataplane.Start(t, func(cfg *config.Config) {
		cfg.HomeLease = 3 * time.Second
		cfg.PodName, cfg.PodNamespace = "alpha-0", "ns"
	})
	await.Until(t, 10*time.Second, "a failed renewal counted", func() (bool, string) {
		fs := dataplane.Scrape(t, ts.HTTP, ts.Ops, "")
		failures := dataplane.Value(t, fs, "bloomery_home_lease_renew_failures_total")
		return failures >= 1, fmt.Sprintf("%v failures", failures)
	})
	fs := dataplane.Scrape(t, ts.HTTP, ts.Ops, "")
	dataplane.WantValue(t, fs, 0, "bloomery_home_lease_held")
	dataplane.WantValue(t, fs, 1, "bloomery_ready")
}

// Without it, nothing is renewed and no lease series is exported.
func TestNoHomeLeaseByDefault(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	if fs := dataplane.Scrape(t, ts.HTTP, ts.Ops, ""); fs["bloomery_home_lease_held"] != nil {
		t.Error("bloomery_home_lease_held exported without homeLeaseSeconds")
	}
}
