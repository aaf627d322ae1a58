package run

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/httpapi"
	"github.com/bloomery/bloomery/dataplane/persist"
)

// Listeners are where the data plane serves: the client port's public API, the internal port
// (nil when the pod serves alone, without a token), the ops port and the RESP port (nil unless
// respPort is set).
type Listeners struct {
	Client, Internal, Ops, RESP net.Listener
}

func (ls Listeners) close() {
	for _, ln := range []net.Listener{ls.Client, ls.Internal, ls.Ops, ls.RESP} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// Run serves on the listeners until ctx is cancelled, then shuts down gracefully and takes a
// final snapshot. It returns nil after a clean shutdown. With cfg.InMemory nothing touches the
// disk.
//
// The order matters to whoever watches the pod:
//  1. lock the data directory (a second process on it fails here, before it listens);
//  2. serve HTTP at once: /healthz, /v1/ping and /metrics answer, /readyz and the filter API
//     answer 503 (code 7) while the filters are recovered, the RESP port's filter commands
//     LOADING;
//  3. recover, then /readyz turns 200 and the filter API serves;
//  4. on cancellation /readyz turns 503 first, the API serves on for cfg.ShutdownDrainDelay so
//     that load balancers notice, then the server stops accepting connections and waits up to
//     cfg.GracefulShutdownTimeout for the requests in flight; the RESP port closes its
//     connections once its commands in flight are answered, the peers' streams of writes once
//     their batches in flight are;
//  5. with HTTP and RESP down, a final snapshot.
func (d *DataPlane) Run(ctx context.Context, ls Listeners) (err error) {
	// The home lease is renewed from the start, through recovery (the operator would otherwise
	// take a recovering pod for a lapsed one), until HTTP is down.
	if d.homeLease != nil {
		leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
		var renewing sync.WaitGroup
		renewing.Go(func() { d.homeLease.Run(leaseCtx) })
		defer renewing.Wait()
		defer stopLease()
	}
	var p *persist.Persister
	if d.cfg.InMemory {
		d.log.Warn("Persistence is off: filters live in memory only and are lost when the process ends")
	} else {
		opts := persistOptions(d.cfg, d.log, d.metrics.Persistence.ObserveSync)
		opts.Clock, opts.Every = d.clock, d.every
		if p, err = persist.Open(opts); err != nil {
			ls.close()
			return err
		}
		defer func() { err = errors.Join(err, p.Close()) }()
		d.metrics.Persistence.Attach(p.Stats())
		d.persister.Store(p)
		d.api.SetPhase(httpapi.Recovering)
		// Before HTTP serves, so that no push races it; in the data directory, so that the
		// membership stays with the pod's volume. A kept membership that cannot be read costs
		// what it would have spared: the pod counts its peers once it is told again.
		if err := d.node.Remember(filepath.Join(d.cfg.DataDir, "membership.json")); err != nil {
			d.log.Warn("Could not restore the membership kept before the restart; waiting to be told", "error", err.Error())
		} else if m := d.node.Kept(); m.Epoch > 0 {
			d.log.Info("Restored the membership kept before the restart", "epoch", m.Epoch, "members", len(m.Members))
		}
	}

	hs := d.startHTTP(ls)
	rs := d.startRESP(ls.RESP, hs.failed)
	if p != nil {
		if err := d.recoverFilters(p); err != nil {
			rs.stop()
			hs.close()
			return err
		}
	}
	if ctx.Err() == nil {
		d.api.SetPhase(httpapi.Serving)
		d.log.Info("Ready")
	}

	// Background work runs until HTTP is down, and no longer: the final snapshot must not race
	// with a periodic one, nor with a purge.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { d.every(bgCtx, d.cfg.PurgeInterval, d.purgeExpired) })
	background.Go(func() { d.every(bgCtx, time.Minute, d.forgetTombstones) })
	background.Go(func() { tuneGC(bgCtx) })
	background.Go(func() { d.node.Run(bgCtx) })
	defer d.node.Close()
	if p != nil {
		background.Go(func() { p.Run(bgCtx) })
	}

	var serveErr error
	select {
	case err := <-hs.failed: // a listener failed: nothing left to drain
		rs.stop()
		hs.close()
		serveErr = err
	case <-ctx.Done():
		d.drain(hs)
		rs.stop()
		serveErr = hs.shutdown(ctx, d.cfg.GracefulShutdownTimeout)
	}
	// The peers' streams of writes are connections the HTTP servers handed over: closed apart.
	d.api.CloseStreams()
	stopBackground()
	background.Wait()
	if p == nil {
		return serveErr
	}
	// HTTP and RESP are down: no request changes the filters while the last snapshot runs.
	if err := p.Snapshot(); err != nil {
		return errors.Join(serveErr, fmt.Errorf("final snapshot: %w", err))
	}
	return serveErr
}

// recoverFilters loads the data directory into the store.
func (d *DataPlane) recoverFilters(p *persist.Persister) error {
	if d.beforeRecovery != nil {
		d.beforeRecovery()
	}
	rep, err := p.Recover(d.store)
	if err != nil {
		return fmt.Errorf("recovering from %s: %w", d.cfg.DataDir, err)
	}
	d.metrics.Persistence.Recovered(rep)
	return nil
}

// drain turns /readyz to 503 and waits for cfg.ShutdownDrainDelay while the API still serves.
// Every answer meanwhile closes its connection: a client's pooled connection would otherwise
// bring its retries back here, where the operator's next membership, which leaves this pod out,
// is not heard, rather than through the Service to a pod that serves them.
func (d *DataPlane) drain(hs *httpServers) {
	d.api.SetPhase(httpapi.Draining)
	hs.closeAfterAnswers()
	if d.cfg.ShutdownDrainDelay <= 0 {
		return
	}
	d.log.Info("Draining: /readyz answers 503 before the server stops accepting connections",
		"delay", d.cfg.ShutdownDrainDelay.String())
	// Not interruptible on purpose: a second SIGTERM or SIGINT kills the process (see runDataPlane).
	time.Sleep(d.cfg.ShutdownDrainDelay)
}

// purgeExpired removes expired filters, every PurgeInterval. Requests already answer 404 for
// them; purging gives their memory back.
func (d *DataPlane) purgeExpired() {
	for _, name := range d.store.PurgeExpired() {
		d.log.Info("Purged expired filter", "filter", name)
	}
}

// forgetTombstones drops the tombstones past their retention, once a minute: they are kept for
// days, and the sweep holds the lock that creates and deletes take.
func (d *DataPlane) forgetTombstones() {
	if n := d.store.PurgeTombstones(); n > 0 {
		d.log.Info("Forgot tombstones of deleted filters past their retention", "tombstones", n, "retention", filter.TombstoneRetention.String())
	}
}
