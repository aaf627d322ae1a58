package run

import (
	"crypto/tls"
	"fmt"
	"net"
)

// respServer is the RESP server running on its listener; nil when the port is closed.
type respServer struct {
	d    *DataPlane
	ln   net.Listener
	done chan error // receives why Serve returned, once
}

// startRESP serves ln in a goroutine; the server bounds its connections itself (respMaxClients),
// refusing rather than leaving them in the accept queue. A failure to serve goes to failed, as an
// HTTP server's does. Without a listener it serves nothing. With the
// data plane's certificate it serves TLS, as the client port does: the same certificate, re-read
// when it changes, and no client certificate asked for even with a CA, since the port's clients
// are applications, not the cluster's pods.
func (d *DataPlane) startRESP(ln net.Listener, failed chan<- error) *respServer {
	if ln == nil {
		return nil
	}
	addr := ln.Addr().String()
	if d.tls != nil {
		ln = tls.NewListener(ln, d.tls.ServerConfig(false))
	}
	rs := &respServer{d: d, ln: ln, done: make(chan error, 1)}
	go func() {
		err := d.resp.Serve(ln)
		if err != nil {
			failed <- fmt.Errorf("serving the RESP port: %w", err)
		}
		rs.done <- err
	}()
	d.log.Info("Listening", "listener", "resp", "address", addr, "tls", d.tls != nil, "password", d.cfg.RESPPasswordFile != "")
	return rs
}

// stop closes the listener, which closes every connection, and waits for the commands in
// flight: after it returns, no RESP command changes a filter.
func (rs *respServer) stop() {
	if rs == nil {
		return
	}
	_ = rs.ln.Close() // Serve returns either way, and reports its own failure
	if err := <-rs.done; err != nil {
		rs.d.log.Warn("RESP server failed", "error", err.Error())
	}
	rs.d.resp.Drain()
}
