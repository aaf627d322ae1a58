package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Fault is what a Proxy does to the connections it is given. The zero Fault passes traffic.
type Fault struct {
	kind  faultKind
	delay time.Duration
	after int64
}

type faultKind int

const (
	passing faultKind = iota
	dropping
	refusing
	delaying
	stalling
	stallingAfter
)

// Pass forwards every byte both ways, as if the proxy were not there.
func Pass() Fault { return Fault{} }

// Drop accepts connections and closes them at once, before anything is forwarded: the caller sees
// a reset or an EOF.
func Drop() Fault { return Fault{kind: dropping} }

// Refuse closes the proxy's listener: connections are refused (ECONNREFUSED), as by a pod that is
// down. The proxy listens again on the same address when another fault is set.
func Refuse() Fault { return Fault{kind: refusing} }

// Delay forwards every byte both ways, each chunk read held back for d.
func Delay(d time.Duration) Fault { return Fault{kind: delaying, delay: d} }

// Stall accepts connections and reads what the caller sends, but never reaches the pod behind
// and never answers: a peer that hangs.
func Stall() Fault { return Fault{kind: stalling} }

// StallAfter forwards the caller's bytes, and the first n bytes of what the pod answers on each
// connection, then nothing more: an answer that stops mid-transfer. What the pod sends after that
// is read and thrown away.
func StallAfter(n int64) Fault { return Fault{kind: stallingAfter, after: n} }

func (f Fault) String() string {
	switch f.kind {
	case dropping:
		return "drop"
	case refusing:
		return "refuse"
	case delaying:
		return fmt.Sprintf("delay(%s)", f.delay)
	case stalling:
		return "stall"
	case stallingAfter:
		return fmt.Sprintf("stall after %d bytes", f.after)
	}
	return "pass"
}

// Proxy stands between one pod and the internal port of another: the first pod's membership names
// the proxy's address as the other's URL, so everything it sends that pod (replicated writes,
// forwarded requests, quorum reads, inventories, dumps) crosses the proxy, and the test decides
// at run time what happens to it. Setting a fault cuts the connections open at that moment, so
// that kept-alive ones do not escape it.
type Proxy struct {
	// From and To are the names of the pod that calls through the proxy and of the pod behind it.
	From, To string

	t      testing.TB
	addr   string // where the proxy listens, kept across Refuse
	target string // the pod's internal port

	mu       sync.Mutex
	fault    Fault
	ln       net.Listener // nil while refusing
	conns    map[net.Conn]struct{}
	closed   bool
	accepted int
	wg       sync.WaitGroup
}

func newProxy(t testing.TB, from, to, target string) *Proxy {
	t.Helper()
	ln := listen(t)
	p := &Proxy{From: from, To: to, t: t, addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.accept(ln) })
	return p
}

// URL is the proxy's address as the calling pod's membership names the pod behind it.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Set switches the fault, and cuts the connections open.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.fault = f
	for c := range p.conns {
		_ = c.Close()
	}
	switch {
	case f.kind == refusing && p.ln != nil:
		_ = p.ln.Close()
		p.ln = nil
	case f.kind != refusing && p.ln == nil:
		// Listening again on the address the pod was told; the port was ours a moment ago.
		var ln net.Listener
		err := eventuallyErr(5*time.Second, func() (err error) {
			ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", p.addr)
			return err
		})
		if err != nil {
			p.t.Errorf("proxy %s→%s: listening again on %s: %v", p.From, p.To, p.addr, err)
			return
		}
		p.ln = ln
		p.wg.Go(func() { p.accept(ln) })
	}
}

// Fault is the fault in force.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Accepted counts the connections the proxy accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// close stops the proxy and every connection through it.
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.accepted++
		f := p.fault
		p.conns[c] = struct{}{}
		p.wg.Go(func() { p.serve(c, f) })
		p.mu.Unlock()
	}
}

// track registers a connection to close with the others; false when the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) serve(in net.Conn, f Fault) {
	switch f.kind {
	case dropping, refusing: // refusing: accepted just before the listener closed
		p.forget(in)
		return
	case stalling:
		_, _ = io.Copy(io.Discard, in)
		p.forget(in)
		return
	}
	out, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		p.forget(in)
		return
	}
	if !p.track(out) {
		p.forget(in, out)
		return
	}
	var delay time.Duration
	if f.kind == delaying {
		delay = f.delay
	}
	answerLimit := int64(-1)
	if f.kind == stallingAfter {
		answerLimit = f.after
	}
	var both sync.WaitGroup
	both.Go(func() {
		pipe(out, in, delay, -1)
		p.forget(in, out) // either side ending ends the pair: HTTP/1.1 clients do not half-close
	})
	both.Go(func() {
		pipe(in, out, delay, answerLimit)
		p.forget(in, out)
	})
	both.Wait()
}

// pipe copies from src to dst, each chunk held back for delay, and at most limit bytes (no limit
// below 0); past the limit, src is read and its bytes thrown away until it ends.
func pipe(dst io.Writer, src io.Reader, delay time.Duration, limit int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if (n > 0 && !forward(dst, buf[:n], delay, &limit)) || err != nil {
			return
		}
	}
}

// forward holds chunk back for delay, then writes what the limit lets through (see pipe), and
// answers false when dst failed.
func forward(dst io.Writer, chunk []byte, delay time.Duration, limit *int64) bool {
	if *limit >= 0 {
		chunk = chunk[:min(int64(len(chunk)), *limit)]
		*limit -= int64(len(chunk))
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if len(chunk) == 0 {
		return true
	}
	_, err := dst.Write(chunk)
	return err == nil
}

// eventuallyErr retries f until it succeeds or timeout passes, and returns its last error.
func eventuallyErr(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listen opens a listener on a free loopback port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}
