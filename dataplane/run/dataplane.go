package run

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/httpapi"
	"github.com/bloomery/bloomery/dataplane/lease"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/resp"
	"github.com/bloomery/bloomery/dataplane/tlsfiles"
	"github.com/bloomery/bloomery/dataplane/writes"
	"github.com/bloomery/bloomery/internal/tick"
)

// DataPlane is one data-plane process assembled: the engine, the replication node, the metrics
// and the HTTP API over them, and (once Run opens it) the data directory.
type DataPlane struct {
	cfg     config.Config
	log     *slog.Logger
	store   *filter.Store
	node    *replication.Node
	metrics *metrics.Metrics
	api     *httpapi.Server
	resp    *resp.Server
	// homeLease renews the pod's home lease; nil without homeLeaseSeconds.
	homeLease *lease.Renewer

	// persister is set once the data directory is open; nil when in memory.
	persister atomic.Pointer[persist.Persister]
	// beforeRecovery, if set, runs when recovery starts; tests hold recovery open with it.
	beforeRecovery func()
	// tls serves the client and internal ports over TLS; nil serves plain HTTP.
	tls *tlsfiles.Source
	// clock decides expiry, in the store and the persister; every runs the periodic work (the
	// purge of expired filters, the snapshot triggers). time.Now and tick.Every but in tests.
	clock func() time.Time
	every tick.Func
}

// New assembles a data plane from a validated configuration. Nothing touches the disk before Run.
func New(cfg config.Config, log *slog.Logger) (*DataPlane, error) {
	return newDataPlane(cfg, log, time.Now, tick.Every)
}

// newDataPlane is New with the clock and ticker that tests replace.
func newDataPlane(cfg config.Config, log *slog.Logger, clock func() time.Time, every tick.Func) (*DataPlane, error) {
	token, err := readToken(cfg.InternalTokenFile)
	if err != nil {
		return nil, err
	}
	respPassword, err := readRESPPassword(cfg.RESPPasswordFile)
	if err != nil {
		return nil, err
	}
	if err := resp.CheckDisabledCommands(cfg.RESPDisabledCommands); err != nil {
		return nil, err
	}
	var certs *tlsfiles.Source
	var peerTLS *tls.Config
	if cfg.TLSCertFile != "" {
		if certs, err = tlsfiles.Load(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile, log); err != nil {
			return nil, err
		}
		if cfg.TLSCAFile != "" {
			peerTLS = client.PodTLS(certs.Roots, certs.Certificate)
		}
	}
	d := &DataPlane{
		cfg:   cfg,
		log:   log,
		tls:   certs,
		store: filter.NewStore(filter.Limits{FilterBytes: cfg.MaxFilterBytes, TotalBytes: cfg.MaxTotalBytes, Filters: cfg.MaxFilters}, clock),
		clock: clock,
		every: every,
	}
	// homeLease is the renewer's Held, nil without a lease: a home then needs none.
	var homeLease func() bool
	if cfg.HomeLease > 0 {
		d.homeLease = lease.New(lease.Options{
			Leases:    lease.InCluster(cfg.PodNamespace),
			Name:      cfg.PodName,
			Namespace: cfg.PodNamespace,
			Duration:  cfg.HomeLease,
			// Read only once Run renews, when the node exists.
			Epoch: func() uint64 { return d.node.Membership().Epoch },
			EpochChanged: func() <-chan struct{} {
				_, changed := d.node.Known()
				return changed
			},
			Log: log,
		})
		homeLease = d.homeLease.Held
	}
	d.node = replication.NewNode(replication.Options{
		Store:               d.store,
		Log:                 log,
		WriteConsistency:    cfg.WriteConsistency,
		Timeout:             cfg.ReplicationTimeout,
		AwaitMembership:     cfg.AwaitMembership,
		AntiEntropyInterval: cfg.AntiEntropyInterval,
		MaxDumpBytes:        maxDumpBytes(cfg),
		MaxBatchBytes:       cfg.MaxHTTPRequestLength,
		PodName:             cfg.PodName,
		Durable:             d.durable,
		Token:               token,
		TLS:                 peerTLS,
		HomeLease:           homeLease,
	})
	mopts := metrics.Options{
		Store:              d.store,
		Cluster:            d.node,
		MaxLabelledFilters: cfg.MetricsMaxLabelledFilters,
		Ready:              func() bool { return d.api.Ready() },
	}
	if d.homeLease != nil {
		mopts.HomeLease = d.homeLease
	}
	d.metrics = metrics.New(mopts)
	ws := writes.New(d.store, d.node, log)
	d.api, err = httpapi.New(httpapi.Options{
		Config:        cfg,
		Log:           log,
		Store:         d.store,
		Node:          d.node,
		Metrics:       d.metrics,
		Writes:        ws,
		LastSnapshot:  d.lastSnapshot,
		Durable:       d.durable,
		InternalToken: token,
		LogBroken:     d.logBroken,
	})
	if err != nil {
		return nil, err
	}
	d.resp = resp.New(resp.Options{
		Config:  cfg,
		Log:     log,
		Store:   d.store,
		Writes:  ws,
		Metrics: d.metrics,
		// Redis's answer while it loads its dataset, which clients retry, fits a pod that may
		// lack what its peers hold as well as one that loads its files.
		Loading:  func() bool { return d.api.Phase() == httpapi.Recovering || !d.node.Ready() },
		Password: respPassword,
		Budget:   d.api.Budget(),
	})
	return d, nil
}

// ClientHandler serves the client port; tests mount the handlers on httptest servers.
func (d *DataPlane) ClientHandler() http.Handler { return d.api.ClientHandler() }

// InternalHandler serves the internal port, to callers with the token.
func (d *DataPlane) InternalHandler() http.Handler { return d.api.InternalHandler() }

// OpsHandler serves the ops port.
func (d *DataPlane) OpsHandler() http.Handler { return d.api.OpsHandler() }

// minTokenBits refuses tokens weak enough to guess. The estimate, log2(distinct characters) ×
// length, is what a guesser who knows the alphabet faces: 16 identical characters estimate 0 bits,
// the operator's 64 hexadecimal digits 256.
const minTokenBits = 128

// readToken reads the internal port's token from path, "" for no path. Surrounding white space,
// such as the newline an editor adds, is not part of it.
func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("internalTokenFile: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if bits := tokenBits(token); bits < minTokenBits {
		return "", fmt.Errorf("internalTokenFile %s: the token is too easy to guess: %d characters, %d of them distinct, estimate %.0f bits of entropy (log2(distinct) × length), and at least %d are needed; 32 random bytes in hexadecimal (openssl rand -hex 32) have 256",
			path, utf8.RuneCountInString(token), distinctRunes(token), bits, minTokenBits)
	}
	return token, nil
}

// tokenBits estimates the entropy of token: log2 of the number of distinct characters it uses,
// times its length in characters.
func tokenBits(token string) float64 {
	distinct := distinctRunes(token)
	if distinct == 0 {
		return 0
	}
	return math.Log2(float64(distinct)) * float64(utf8.RuneCountInString(token))
}

func distinctRunes(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// minRESPPasswordLength refuses passwords short enough to guess in an afternoon of AUTHs.
const minRESPPasswordLength = 8

// readRESPPassword reads the RESP port's password from path, "" for no path. Surrounding white
// space, such as the newline an editor or `echo` adds, is not part of it.
func readRESPPassword(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("respPasswordFile: %w", err)
	}
	password := strings.TrimSpace(string(raw))
	switch {
	case password == "":
		return "", fmt.Errorf("respPasswordFile %s: the file holds no password; remove respPasswordFile to leave the RESP port without one", path)
	case len(password) < minRESPPasswordLength:
		return "", fmt.Errorf("respPasswordFile %s: the password must have at least %d characters, it has %d", path, minRESPPasswordLength, len(password))
	}
	return password, nil
}

// durable makes the store's current state survive a crash with a snapshot; bits merged from a
// dump are not in the log.
func (d *DataPlane) durable() error {
	if p := d.persister.Load(); p != nil {
		return p.MakeDurable()
	}
	return nil
}

// logBroken answers why the update log cannot be written; nil while it can, and in memory.
func (d *DataPlane) logBroken() error {
	if p := d.persister.Load(); p != nil {
		if err := p.Stats().LogBroken(); err != nil {
			return fmt.Errorf("the update log cannot be written: %w", err)
		}
	}
	return nil
}

// lastSnapshot is when the last snapshot completed; zero before the first and in memory.
func (d *DataPlane) lastSnapshot() time.Time {
	if p := d.persister.Load(); p != nil {
		if at := p.Stats().LastSnapshotUnix.Load(); at > 0 {
			return time.Unix(at, 0)
		}
	}
	return time.Time{}
}

// persistOptions is the part of the configuration the persister takes. The configuration has
// types of its own because the operator, which builds it too, must not import the persister.
func persistOptions(c config.Config, log *slog.Logger, syncObserver func(time.Duration)) persist.Options {
	criteria := make([]persist.Criterion, len(c.TriggerPersistenceCriteria))
	for i, tc := range c.TriggerPersistenceCriteria {
		criteria[i] = persist.Criterion{Period: tc.Period, UpdatesMoreThan: tc.UpdatesMoreThan}
	}
	return persist.Options{
		Dir:                  c.DataDir,
		Sync:                 persist.SyncPolicy(c.LogSync), // the same spellings; TestLogSyncPolicies holds them together
		AllowCorruptSnapshot: c.AllowRecoverFromCorruptedPersistentFile,
		AllowLowDiskSpace:    c.AllowStartWithLowDiskSpace,
		Criteria:             criteria,
		SnapshotLogBytes:     int64(min(c.SnapshotLogBytes, math.MaxInt64)),
		Log:                  log,
		SyncObserver:         syncObserver,
	}
}

// maxDumpBytes bounds a dump read from a peer: what the memory limits let one filter hold (the
// total limit, or the per-filter one, which bounds each of up to MaxPartitions partitions), plus
// room for the record's head.
func maxDumpBytes(cfg config.Config) int64 {
	limit := cfg.MaxTotalBytes
	if byPartition := min(cfg.MaxFilterBytes, 1<<40) * filter.MaxPartitions; limit == 0 || (byPartition > 0 && byPartition < limit) {
		limit = byPartition
	}
	if limit == 0 || limit > 1<<40 {
		return 1 << 40
	}
	return int64(limit) + 64<<10
}
