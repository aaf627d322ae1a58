package run

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// opsProbeReserve is how many connections the ops port admits beyond maxOpsConnections, to be
// served the probes alone, when every connection of its budget is answering a request: the
// kubelet's liveness and readiness probes, a few at a time.
const opsProbeReserve = 8

// httpServers are the HTTP servers running on the listeners.
type httpServers struct {
	servers []*httpServer
	// failed receives why a server stopped serving other than by close or shutdown.
	failed chan error
	log    *slog.Logger
}

// httpServer is one listener's server.
type httpServer struct {
	name string
	srv  *http.Server
	done chan error // receives why Serve returned, once
}

// startHTTP serves each listener in a goroutine of its own; close or shutdown stops them all.
func (d *DataPlane) startHTTP(ls Listeners) *httpServers {
	hs := &httpServers{failed: make(chan error, 4), log: d.log} // one per listener, RESP's too
	// The ops port stays plain HTTP: the kubelet's probes and Prometheus's scrapes carry nothing
	// secret, and need no certificate to reach it.
	var clientTLS, internalTLS *tls.Config
	if d.tls != nil {
		clientTLS = d.tls.ServerConfig(false)
		internalTLS = d.tls.ServerConfig(d.cfg.TLSCAFile != "")
	}
	hs.start(d, "client", ls.Client, d.api.ClientHandler(), newConnBudget("client", d.cfg.MaxHTTPConnections, 0, d.metrics.HTTP), clientTLS)
	if ls.Internal != nil {
		hs.start(d, "internal", ls.Internal, d.api.InternalHandler(), newConnBudget("internal", d.cfg.MaxHTTPConnections, 0, d.metrics.HTTP), internalTLS)
	}
	hs.start(d, "ops", ls.Ops, probesOnly(d.api.OpsHandler()), newConnBudget("ops", d.cfg.MaxOpsConnections, opsProbeReserve, d.metrics.HTTP), nil)
	return hs
}

func (hs *httpServers) start(d *DataPlane, name string, ln net.Listener, h http.Handler, budget *connBudget, tlsConfig *tls.Config) {
	addr := ln.Addr().String()
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	s := &httpServer{
		name: name,
		srv: &http.Server{
			Handler: h,
			// The API answers from memory; a request that takes longer than the timeout to arrive
			// or to be answered is a stuck client, and its connection is better closed. The header
			// deadline closes a connection that sends no complete request as well.
			ReadHeaderTimeout: d.cfg.RequestTimeout,
			ReadTimeout:       d.cfg.RequestTimeout,
			WriteTimeout:      d.cfg.RequestTimeout,
			IdleTimeout:       d.cfg.IdleTimeout,
			ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
			ConnContext:       budget.connContext,
			ConnState:         budget.connState,
		},
		done: make(chan error, 1),
	}
	hs.servers = append(hs.servers, s)
	go func() {
		err := s.srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			hs.failed <- fmt.Errorf("serving the %s port: %w", name, err)
		}
		s.done <- err
	}()
	d.log.Info("Listening", "listener", name, "address", addr, "tls", tlsConfig != nil)
}

// closeAfterAnswers closes the idle connections, and every other one after its next answer.
func (hs *httpServers) closeAfterAnswers() {
	for _, s := range hs.servers {
		s.srv.SetKeepAlivesEnabled(false)
	}
}

// close stops serving at once, cutting off the requests in flight.
func (hs *httpServers) close() {
	for _, s := range hs.servers {
		_ = s.srv.Close() // it can only fail to close the listener, which Serve then reports
	}
	for _, s := range hs.servers {
		if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
			hs.log.Warn("HTTP server failed", "listener", s.name, "error", err.Error())
		}
	}
}

// shutdown stops accepting connections and waits up to timeout for the requests in flight.
func (hs *httpServers) shutdown(ctx context.Context, timeout time.Duration) error {
	hs.log.Info("Shutting down", "timeout", timeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	errs := make([]error, len(hs.servers))
	var wg sync.WaitGroup
	for i, s := range hs.servers {
		wg.Go(func() { errs[i] = s.srv.Shutdown(shutdownCtx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		hs.close() // whatever did not finish in time is cut off
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	var failed []error
	for _, s := range hs.servers {
		if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
			failed = append(failed, fmt.Errorf("serving the %s port: %w", s.name, err))
		}
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	hs.log.Info("Stopped")
	return nil
}
