//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The networks of the suite. Pods and Services need addresses that the API server accepts in
// EndpointSlices and proxies to, which loopback addresses are not: where the suite may change the
// host's routes, it makes routedPods and serviceNetwork local addresses of the loopback interface
// (`ip route replace local NETWORK dev lo`, which lets a process listen on any address of the
// network) and leaves them in place for later runs. Both are in 198.18.0.0/15, which RFC 2544
// sets aside for benchmarking networks: no real host a test machine talks to is there. Elsewhere
// pods get loopback addresses, and the scenarios through a Service skip, saying why.
const (
	routedPods     = "198.18.0.0/24"
	loopbackPods   = "127.0.1.0/24"
	serviceNetwork = "198.19.0.0/24" // the API server's service-cluster-ip-range
)

// network is what the host gives the suite.
type network struct {
	pods netip.Prefix
	// noServices says why no Service can be reached, when none can.
	noServices string
}

// setUpNetwork makes the routed networks local when the process may, or falls back to loopback.
func setUpNetwork() network {
	if os.Geteuid() != 0 {
		return loopbackNetwork(fmt.Sprintf("the suite is not running as root, and making %s and %s local addresses (ip route) needs it", routedPods, serviceNetwork))
	}
	for _, prefix := range []string{routedPods, serviceNetwork} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, "ip", "route", "replace", "local", prefix, "dev", "lo").CombinedOutput()
		cancel()
		if err != nil {
			return loopbackNetwork(fmt.Sprintf("`ip route replace local %s dev lo` failed (%v): %s", prefix, err, strings.TrimSpace(string(out))))
		}
	}
	return network{pods: netip.MustParsePrefix(routedPods)}
}

func loopbackNetwork(why string) network {
	return network{pods: netip.MustParsePrefix(loopbackPods), noServices: why}
}

// servicesReachable reports whether Services' cluster IPs lead to their ready pods.
func (n network) servicesReachable() bool { return n.noServices == "" }
