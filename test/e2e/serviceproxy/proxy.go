//go:build e2e

// Package serviceproxy forwards connections to Services' cluster IPs to their ready endpoints,
// as kube-proxy does on a node: for each TCP port of each Service with a cluster IP it listens on
// that IP and port, and hands each accepted connection to the next ready endpoint that the
// EndpointSlice controller published for the port, round robin. A connection stays with the
// endpoint it was given until one side closes it, as with kube-proxy's connection tracking; a
// Service without a ready endpoint refuses connections.
package serviceproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// dialTimeout bounds the connection to an endpoint, as a SYN to a dead pod would time out.
const dialTimeout = 3 * time.Second

// Proxy is the service proxy of one node. Create it with New and run it with Run.
type Proxy struct {
	client kubernetes.Interface
	log    *slog.Logger

	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	resync    chan struct{}
	stopping  context.Context // ends the connections in flight when Run returns
	mu        sync.Mutex
	listeners map[netip.AddrPort]*frontend
	conns     sync.WaitGroup

	countsMu sync.Mutex
	counts   map[string]int // accepted connections per endpoint ("ip:port")
}

// frontend is one cluster IP and port: the Service port it serves and its current endpoints.
type frontend struct {
	service  string // namespace/name:port, for the log
	listener net.Listener

	mu        sync.Mutex
	endpoints []string
	next      int
}

// New returns a proxy that does nothing until Run.
func New(client kubernetes.Interface, log *slog.Logger) *Proxy {
	return &Proxy{client: client, log: log, resync: make(chan struct{}, 1),
		listeners: map[netip.AddrPort]*frontend{}, counts: map[string]int{}}
}

// Connections returns how many connections the proxy has handed to endpoint ("ip:port") so far.
func (p *Proxy) Connections(endpoint string) int {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	return p.counts[endpoint]
}

// Run proxies until ctx ends, then closes its listeners and waits for its connections.
func (p *Proxy) Run(ctx context.Context) error {
	p.stopping = ctx
	factory := informers.NewSharedInformerFactory(p.client, 0)
	services := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	p.services, p.slices = services.Lister(), slices.Lister()
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.poke() },
		UpdateFunc: func(any, any) { p.poke() },
		DeleteFunc: func(any) { p.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), slices.Informer()} {
		if _, err := inf.AddEventHandler(changed); err != nil {
			return fmt.Errorf("service proxy: watching: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), services.Informer().HasSynced, slices.Informer().HasSynced) {
		return fmt.Errorf("service proxy: caches did not sync: %w", context.Cause(ctx))
	}
	p.log.Info("Service proxy running")
	for {
		select {
		case <-ctx.Done():
			p.closeAll()
			p.conns.Wait()
			return nil
		case <-p.resync:
			p.sync()
		}
	}
}

// poke asks for a resync; changes that arrive during one are folded into the next.
func (p *Proxy) poke() {
	select {
	case p.resync <- struct{}{}:
	default:
	}
}

// sync brings the listeners and their endpoints in line with the Services and EndpointSlices.
func (p *Proxy) sync() {
	services, err := p.services.List(labels.Everything())
	if err != nil {
		p.log.Error("Listing Services", "err", err)
		return
	}
	wanted := map[netip.AddrPort]bool{}
	for _, svc := range services {
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			continue // headless, or not yet allocated
		}
		for _, port := range svc.Spec.Ports {
			if port.Protocol != corev1.ProtocolTCP && port.Protocol != "" {
				continue
			}
			front := netip.AddrPortFrom(ip, uint16(port.Port))
			name := fmt.Sprintf("%s/%s:%s", svc.Namespace, svc.Name, port.Name)
			f := p.frontend(front, name)
			if f == nil {
				continue
			}
			wanted[front] = true
			f.setEndpoints(p.endpoints(svc, port.Name))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for front, f := range p.listeners {
		if !wanted[front] {
			p.log.Info("Service port removed", "service", f.service, "address", front)
			_ = f.listener.Close() // its accept loop ends with the error
			delete(p.listeners, front)
		}
	}
}

// frontend returns the listener of front, starting it if needed; nil if it cannot listen.
func (p *Proxy) frontend(front netip.AddrPort, service string) *frontend {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.listeners[front]; f != nil {
		return f
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", front.String())
	if err != nil {
		p.log.Error("Cannot listen on a Service's cluster IP", "service", service, "address", front, "err", err)
		return nil
	}
	f := &frontend{service: service, listener: l}
	p.listeners[front] = f
	p.log.Info("Service port added", "service", service, "address", front)
	p.conns.Go(func() { p.accept(f) })
	return f
}

// endpoints are the ready endpoints of the Service's port, as "ip:port". An endpoint whose
// ready condition is unset counts as ready, as the API documents.
func (p *Proxy) endpoints(svc *corev1.Service, portName string) []string {
	slices, err := p.slices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, port := range s.Ports {
			if port.Port == nil || port.Name == nil || *port.Name != portName {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, addr := range e.Addresses {
					out = append(out, net.JoinHostPort(addr, strconv.Itoa(int(*port.Port))))
				}
			}
		}
	}
	return out
}

func (f *frontend) setEndpoints(endpoints []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endpoints = endpoints
}

// pick returns the next endpoint, or "" when there is none.
func (f *frontend) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.endpoints) == 0 {
		return ""
	}
	f.next = (f.next + 1) % len(f.endpoints)
	return f.endpoints[f.next]
}

func (p *Proxy) accept(f *frontend) {
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Error("Accepting", "service", f.service, "err", err)
			}
			return
		}
		endpoint := f.pick()
		if endpoint == "" {
			p.log.Info("Connection refused: no ready endpoint", "service", f.service)
			_ = conn.Close() // as kube-proxy rejects it
			continue
		}
		p.countsMu.Lock()
		p.counts[endpoint]++
		p.countsMu.Unlock()
		p.conns.Go(func() { p.forward(conn, endpoint, f.service) })
	}
}

// forward copies both ways between the client and the endpoint until both sides are done.
func (p *Proxy) forward(client net.Conn, endpoint, service string) {
	defer func() { _ = client.Close() }() // done with it either way
	backend, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(p.stopping, "tcp", endpoint)
	if err != nil {
		p.log.Info("Connection to endpoint failed", "service", service, "endpoint", endpoint, "err", err)
		return
	}
	defer func() { _ = backend.Close() }()
	stop := context.AfterFunc(p.stopping, func() {
		_ = client.Close() // unblocks both copies
		_ = backend.Close()
	})
	defer stop()
	var both sync.WaitGroup
	both.Go(func() { pipe(backend, client) })
	pipe(client, backend)
	both.Wait()
}

// pipe copies src to dst and then half-closes dst, so the other side sees the end.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src) // an error ends the connection, which is all the proxy can do
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
		return
	}
	_ = dst.Close()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for front, f := range p.listeners {
		_ = f.listener.Close()
		delete(p.listeners, front)
	}
}
