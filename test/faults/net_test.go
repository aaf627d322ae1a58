package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A network of its own per test: a namespace holding a bridge, one namespace per pod joined to the
// bridge by a veth pair, and a veth from the test's own namespace to the bridge, through which the
// test's clients reach the pods. Addresses are in 10.78.<subnet>.0/24, which exists only inside
// these namespaces and on the test's end of its veth.
type network struct {
	t      *testing.T
	id     string // short, unique: interface names hold at most 15 bytes
	subnet int
	bridge string // the bridge's namespace
}

// newNetwork makes the bridge's namespace and the test's link to it; all of it goes when the test
// ends.
func newNetwork(t *testing.T, subnet int) *network {
	t.Helper()
	// A suffix of the process's: a run killed before its cleanups leaves names no later run takes.
	n := &network{t: t, id: fmt.Sprintf("bf%d%04x", subnet, os.Getpid()%0x10000), subnet: subnet}
	n.bridge = n.id + "-br"
	host := n.id + "-h"
	t.Cleanup(func() {
		// Not the test's context, which is done by the time cleanups run.
		_ = exec.CommandContext(context.Background(), "ip", "link", "del", host).Run()
		_ = exec.CommandContext(context.Background(), "ip", "netns", "del", n.bridge).Run()
	})
	n.must("ip", "netns", "add", n.bridge)
	n.inNS(n.bridge, "ip", "link", "add", "br0", "type", "bridge")
	n.inNS(n.bridge, "ip", "link", "set", "br0", "up")
	n.inNS(n.bridge, "ip", "link", "set", "lo", "up")
	n.must("ip", "link", "add", host, "type", "veth", "peer", "name", "uplink", "netns", n.bridge)
	n.inNS(n.bridge, "ip", "link", "set", "uplink", "master", "br0", "up")
	n.must("ip", "addr", "add", n.addr(1)+"/24", "dev", host)
	n.must("ip", "link", "set", host, "up")
	return n
}

// addr is the address of host number i of the network.
func (n *network) addr(i int) string { return fmt.Sprintf("10.78.%d.%d", n.subnet, i) }

// podNS is the namespace of pod i.
func (n *network) podNS(i int) string { return fmt.Sprintf("%s-p%d", n.id, i) }

// podAddr is pod i's address.
func (n *network) podAddr(i int) string { return n.addr(10 + i) }

// addPod makes pod i's namespace, joined to the bridge.
func (n *network) addPod(i int) {
	n.t.Helper()
	ns := n.podNS(i)
	n.t.Cleanup(func() { _ = exec.CommandContext(context.Background(), "ip", "netns", "del", ns).Run() })
	n.must("ip", "netns", "add", ns)
	veth := fmt.Sprintf("p%d", i)
	n.must("ip", "link", "add", veth, "netns", n.bridge, "type", "veth", "peer", "name", "eth0", "netns", ns)
	n.inNS(n.bridge, "ip", "link", "set", veth, "master", "br0", "up")
	n.inNS(ns, "ip", "link", "set", "lo", "up")
	n.inNS(ns, "ip", "addr", "add", n.podAddr(i)+"/24", "dev", "eth0")
	n.inNS(ns, "ip", "link", "set", "eth0", "up")
}

// isolate drops, inside pod i's namespace, every packet to or from the other pods: a partition
// that the test's own clients still cross, as a client in the pod's zone would.
func (n *network) isolate(i int, others []int) {
	n.t.Helper()
	for _, o := range others {
		n.inNS(n.podNS(i), "iptables", "-A", "INPUT", "-s", n.podAddr(o), "-j", "DROP")
		n.inNS(n.podNS(i), "iptables", "-A", "OUTPUT", "-d", n.podAddr(o), "-j", "DROP")
	}
}

// heal removes every rule of pod i's namespace.
func (n *network) heal(i int) {
	n.t.Helper()
	n.inNS(n.podNS(i), "iptables", "-F")
}

func (n *network) inNS(ns string, args ...string) {
	n.t.Helper()
	n.must(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

func (n *network) must(args ...string) {
	n.t.Helper()
	out, err := exec.CommandContext(n.t.Context(), args[0], args[1:]...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}
