package persist

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// Options.SyncObserver hears every fsync of the log, with its duration: metrics build the log's
// sync latency histogram from it.
func TestSyncObserverHearsEveryFsync(t *testing.T) {
	var syncs, nanos atomic.Int64
	_, store, _ := open(t, t.TempDir(), func(o *Options) {
		o.SyncObserver = func(d time.Duration) { syncs.Add(1); nanos.Add(int64(d)) }
	})
	f := mustCreate(t, store, "f", filter.Options{Capacity: 1000, FPP: 0.01})
	for _, key := range keys("k", 3) {
		if err := f.Add(key); err != nil {
			t.Fatal(err)
		}
	}
	// SyncAlways fsyncs before answering each of the four writes (one create, three adds); no
	// other writer ran, so no fsync was shared.
	if got := syncs.Load(); got != 4 {
		t.Errorf("observer heard %d fsyncs, want 4", got)
	}
	if nanos.Load() <= 0 {
		t.Error("observed fsyncs took no time at all")
	}
}

// RecoveryReport.Recovered counts the records recovery used: filters from the snapshot and log
// records applied; a record for a filter that is gone is counted as skipped.
func TestRecoveryReportCountsRecoveredRecords(t *testing.T) {
	dir := t.TempDir()
	p, store, _ := open(t, dir)
	a := mustCreate(t, store, "a", filter.Options{Capacity: 1000, FPP: 0.01})
	if err := a.AddMany(keys("a", 10)); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, store, "b", filter.Options{Capacity: 1000, FPP: 0.01})
	if err := p.Snapshot(); err != nil { // two filters in snapshot.db
		t.Fatal(err)
	}
	if err := a.Add("after"); err != nil { // one log record
		t.Fatal(err)
	}
	if _, _, err := store.Delete("b"); err != nil { // and another
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, rep := open(t, dir)
	if rep.Recovered != 4 || rep.Skipped != 0 || rep.LogRecords != 2 {
		t.Errorf("report %+v: want 4 recovered (2 filters, 2 log records), 0 skipped", rep)
	}
}

// Stats.LogRecords and LogBytes count every record appended to the log, accesses included: they
// are bloomery_log_appended_records_total and bloomery_log_appended_bytes_total.
func TestStatsCountEveryAppendedRecord(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	p, store, _ := open(t, dir, func(o *Options) { o.Clock = func() time.Time { return now } })
	f := mustCreate(t, store, "sliding", filter.Options{Capacity: 10, FPP: 0.1, ValidAfterAccess: time.Minute})
	if err := f.Add("x"); err != nil {
		t.Fatal(err)
	}
	records, bytes := p.Stats().LogRecords.Load(), p.Stats().LogBytes.Load()
	at := time.Now()
	p.Accessed("sliding", at)
	if got, want := p.Stats().LogRecords.Load()-records, int64(1); got != want {
		t.Errorf("an access added %d to LogRecords, want %d", got, want)
	}
	if got, want := p.Stats().LogBytes.Load()-bytes, int64(len(encodeAccess("sliding", at))+recordHeaderSize); got != want {
		t.Errorf("an access added %d to LogBytes, want %d", got, want)
	}
	counted := p.Stats().LogRecords.Load()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, rep := open(t, dir, func(o *Options) { o.Clock = func() time.Time { return now } }); int64(rep.LogRecords) != counted {
		t.Errorf("the log holds %d records, the stats counted %d", rep.LogRecords, counted)
	}
}
