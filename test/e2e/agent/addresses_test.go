//go:build e2e

package agent

import (
	"context"
	"net"
	"net/netip"
	"testing"
)

func TestAddressPoolHandsOutEachAddressOnceBeforeReusing(t *testing.T) {
	pool, err := newAddressPool(netip.MustParsePrefix("127.0.9.0/29")) // .1 to .6
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for range 6 {
		a, err := pool.allocate("pod", nil)
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] || a == netip.MustParseAddr("127.0.9.0") || a == netip.MustParseAddr("127.0.9.7") {
			t.Fatalf("allocated %v (seen before: %v)", a, seen[a])
		}
		seen[a] = true
	}
	if _, err := pool.allocate("pod", nil); err == nil {
		t.Fatal("a seventh address came out of a pool of six")
	}
	pool.release(netip.MustParseAddr("127.0.9.3"))
	if a, err := pool.allocate("pod", nil); err != nil || a != netip.MustParseAddr("127.0.9.3") {
		t.Errorf("after releasing 127.0.9.3, allocate = %v, %v", a, err)
	}
}

func TestAddressPoolSkipsAddressesWhosePortIsTaken(t *testing.T) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.9.9:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	pool, err := newAddressPool(netip.MustParsePrefix("127.0.9.8/30")) // .9 and .10
	if err != nil {
		t.Fatal(err)
	}
	if a, err := pool.allocate("pod", []int32{port}); err != nil || a != netip.MustParseAddr("127.0.9.10") {
		t.Errorf("allocate = %v, %v; want 127.0.9.10, since port %d of 127.0.9.9 is taken", a, err, port)
	}
}

func TestAddressPoolWantsTheHostsAddresses(t *testing.T) {
	// TEST-NET-3 (RFC 5737): documentation addresses, never this host's.
	if _, err := newAddressPool(netip.MustParsePrefix("203.0.113.0/24")); err == nil {
		t.Error("a network of addresses that are not this host's was accepted")
	}
}
