//go:build e2e

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
)

// addressPool hands out the addresses pods run on, one per pod incarnation (pod UID),
// as a cluster's network gives a recreated pod a new IP: the operator must follow the pod to its
// new address rather than remember the old one. A container restart keeps its pod's address, as
// on a real node. Addresses go round the prefix before one is reused, so a client that still
// holds an old pod's address reaches nothing rather than the wrong pod.
type addressPool struct {
	prefix netip.Prefix

	mu    sync.Mutex
	next  netip.Addr
	inUse map[netip.Addr]string // address → the pod key holding it
}

// newAddressPool takes a network of this host's own addresses: pods' processes run on the host
// and listen on their pod's address.
func newAddressPool(prefix netip.Prefix) (*addressPool, error) {
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("address prefix %s: want an IPv4 network of at least 4 addresses", prefix)
	}
	first := prefix.Addr().Next()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", net.JoinHostPort(first.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("address prefix %s is not this host's (its address %s cannot be listened on): %w", prefix, first, err)
	}
	_ = l.Close() // only probing
	return &addressPool{prefix: prefix, next: first, inUse: map[netip.Addr]string{}}, nil
}

// allocate returns a free address for owner. It skips addresses on which one of ports is taken by
// a process the pool does not know of, such as the pods of another test run on the same machine.
func (p *addressPool) allocate(owner string, ports []int32) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 1 << (32 - p.prefix.Bits()) {
		addr := p.next
		p.next = p.advance(addr)
		if !p.usable(addr) || p.inUse[addr] != "" || !portsFree(addr, ports) {
			continue
		}
		p.inUse[addr] = owner
		return addr, nil
	}
	return netip.Addr{}, errors.New("no free address left in " + p.prefix.String())
}

// release returns addr to the pool once its pod's processes have exited.
func (p *addressPool) release(addr netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inUse, addr)
}

// usable excludes the network and broadcast addresses.
func (p *addressPool) usable(addr netip.Addr) bool {
	return addr != p.prefix.Addr() && p.prefix.Contains(addr) && p.prefix.Contains(addr.Next())
}

func (p *addressPool) advance(addr netip.Addr) netip.Addr {
	next := addr.Next()
	if !p.usable(next) {
		return p.prefix.Addr().Next()
	}
	return next
}

// portsFree reports whether every TCP port can be bound on addr right now.
func portsFree(addr netip.Addr, ports []int32) bool {
	for _, port := range ports {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
		if err != nil {
			return false
		}
		_ = l.Close() // only probing; nothing was served
	}
	return true
}
