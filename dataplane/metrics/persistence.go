package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomery/bloomery/dataplane/persist"
)

// syncBuckets span an fsync from a fast NVMe drive (tens of microseconds) to a network volume
// under load (seconds).
var syncBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Persistence are the snapshot, log and recovery metrics. The persister keeps its own counters
// (persist.Stats), read at scrape time; the series appear once the server attaches it, so a data
// plane without persistence (--in-memory) has none.
type Persistence struct {
	stats    atomic.Pointer[persist.Stats]
	recovery atomic.Pointer[persist.RecoveryReport]
	syncs    prometheus.Histogram

	snapshots, snapshotFailures, lastSnapshotTime, lastSnapshotDuration, lastSnapshotSize *prometheus.Desc
	logRecords, logBytes, logHealthy, logWriteErrors                                      *prometheus.Desc

	recoveryDuration, recoveryFilters, recoveryRecovered, recoverySkipped, recoveryExpired, recoveryCorrupt, recoverySnapshotBytes *prometheus.Desc
}

func newPersistence() *Persistence {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, nil)
	}
	return &Persistence{
		syncs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "log", Name: "fsync_duration_seconds",
			Help:    "Time each fsync of the update log took (under logSync: always, each direct synchronous write, where the file system takes them). Under logSync: always one covers every write that arrived while the previous one ran.",
			Buckets: syncBuckets,
		}),

		snapshots:            desc("snapshots_total", "Snapshots written."),
		snapshotFailures:     desc("snapshot_failures_total", "Snapshots that failed; the previous snapshot and the log stay in place."),
		lastSnapshotTime:     desc("snapshot_last_success_timestamp_seconds", "When the last snapshot was written, in seconds since the epoch; 0 before the first."),
		lastSnapshotDuration: desc("snapshot_last_duration_seconds", "How long the last snapshot took to write."),
		lastSnapshotSize:     desc("snapshot_last_size_bytes", "Size of the last snapshot written."),
		logRecords:           desc("log_appended_records_total", "Records appended to the update log."),
		logBytes:             desc("log_appended_bytes_total", "Bytes appended to the update log, record headers included."),
		logHealthy:           desc("log_healthy", "1 while the update log can be written; 0 while a failed write (a full or failing disk) keeps writes failing, until it heals."),
		logWriteErrors:       desc("log_write_errors_total", "Failed writes and syncs of the update log, and failed attempts to heal it."),

		recoveryDuration:      desc("recovery_duration_seconds", "How long recovery took at start."),
		recoveryFilters:       desc("recovery_filters", "Live filters in memory after recovery."),
		recoveryRecovered:     desc("recovery_recovered_records", "Records recovery used: filters from the snapshot files and log records applied."),
		recoverySkipped:       desc("recovery_skipped_records", "Records recovery could not use."),
		recoveryExpired:       desc("recovery_expired_filters", "Filters that had expired while the process was down, not recovered."),
		recoveryCorrupt:       desc("recovery_corrupt_files", "Files whose reading stopped at a torn or corrupt record, log segments missing, and log segments that lost records at their end."),
		recoverySnapshotBytes: desc("recovery_snapshot_bytes", "Bytes of snapshot.db read at recovery."),
	}
}

// Attach makes the persister's counters visible; call it once the persister is open.
func (p *Persistence) Attach(stats *persist.Stats) { p.stats.Store(stats) }

// Recovered records what recovery did.
func (p *Persistence) Recovered(rep persist.RecoveryReport) { p.recovery.Store(&rep) }

// ObserveSync is persist.Options.SyncObserver: it records one durable flush's duration. A histogram's
// Observe is lock-free, so the log's writers do not queue behind scrapes.
func (p *Persistence) ObserveSync(d time.Duration) { p.syncs.Observe(d.Seconds()) }

// Describe implements prometheus.Collector.
func (p *Persistence) Describe(ch chan<- *prometheus.Desc) {
	p.syncs.Describe(ch)
	for _, d := range []*prometheus.Desc{
		p.snapshots, p.snapshotFailures, p.lastSnapshotTime, p.lastSnapshotDuration, p.lastSnapshotSize,
		p.logRecords, p.logBytes, p.logHealthy, p.logWriteErrors,
		p.recoveryDuration, p.recoveryFilters, p.recoveryRecovered, p.recoverySkipped, p.recoveryExpired,
		p.recoveryCorrupt, p.recoverySnapshotBytes,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *Persistence) Collect(ch chan<- prometheus.Metric) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(d, t, v)
	}
	if s := p.stats.Load(); s != nil {
		p.syncs.Collect(ch)
		metric(p.snapshots, prometheus.CounterValue, float64(s.SnapshotsTaken.Load()))
		metric(p.snapshotFailures, prometheus.CounterValue, float64(s.SnapshotFailures.Load()))
		metric(p.lastSnapshotTime, prometheus.GaugeValue, float64(s.LastSnapshotUnix.Load()))
		metric(p.lastSnapshotDuration, prometheus.GaugeValue, float64(s.LastSnapshotMicros.Load())/1e6)
		metric(p.lastSnapshotSize, prometheus.GaugeValue, float64(s.LastSnapshotBytes.Load()))
		metric(p.logRecords, prometheus.CounterValue, float64(s.LogRecords.Load()))
		metric(p.logBytes, prometheus.CounterValue, float64(s.LogBytes.Load()))
		healthy := 1.0
		if s.LogBroken() != nil {
			healthy = 0
		}
		metric(p.logHealthy, prometheus.GaugeValue, healthy)
		metric(p.logWriteErrors, prometheus.CounterValue, float64(s.LogWriteErrors.Load()))
	}
	if r := p.recovery.Load(); r != nil {
		metric(p.recoveryDuration, prometheus.GaugeValue, r.Duration.Seconds())
		metric(p.recoveryFilters, prometheus.GaugeValue, float64(r.Filters))
		metric(p.recoveryRecovered, prometheus.GaugeValue, float64(r.Recovered))
		metric(p.recoverySkipped, prometheus.GaugeValue, float64(r.Skipped))
		metric(p.recoveryExpired, prometheus.GaugeValue, float64(r.Expired))
		metric(p.recoveryCorrupt, prometheus.GaugeValue, float64(r.CorruptRecords))
		metric(p.recoverySnapshotBytes, prometheus.GaugeValue, float64(r.SnapshotBytes))
	}
}
