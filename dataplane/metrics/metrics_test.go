package metrics_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/persist"
)

func gather(t *testing.T, m *metrics.Metrics) metricstest.Families {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	fs := metricstest.Families{}
	for _, mf := range families {
		fs[mf.GetName()] = mf
	}
	return fs
}

func want(t *testing.T, fs metricstest.Families, expected float64, name string, labels ...string) {
	t.Helper()
	got, ok := fs.Value(name, labels...)
	if !ok {
		t.Errorf("%s%v: no single sample", name, labels)
		return
	}
	if got != expected {
		t.Errorf("%s%v = %v, want %v", name, labels, got, expected)
	}
}

func create(t *testing.T, s *filter.Store, name string, opts filter.Options) *filter.Filter {
	t.Helper()
	f, _, err := s.Create(name, opts, false)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Per-filter series exist for the first filters by name, up to the cap; the totals count every
// filter, labelled or not, and deleted filters' counts stay in them.
func TestFilterMetrics(t *testing.T) {
	store := filter.NewStore(filter.Limits{FilterBytes: 1 << 20, TotalBytes: 4 << 20}, nil)
	m := metrics.New(metrics.Options{Store: store, MaxLabelledFilters: 3})
	opts := filter.Options{Capacity: 1000, FPP: 0.01}
	for _, name := range []string{"e", "c", "a", "d", "b"} {
		f := create(t, store, name, opts)
		if err := f.AddMany([]string{"x", "y"}); err != nil {
			t.Fatal(err)
		}
		f.CheckMany([]string{"x", "y", "z"})
	}

	fs := gather(t, m)
	if got := fs.LabelValues("bloomery_filter_items", "filter"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("labelled filters %v, want the first three by name", got)
	}
	filterA, err := store.Get("a")
	if err != nil {
		t.Fatal(err)
	}
	want(t, fs, 5, "bloomery_filters")
	want(t, fs, 2, "bloomery_filters_unlabelled")
	want(t, fs, 10, "bloomery_filters_items")
	want(t, fs, float64(store.UsedBytes()), "bloomery_filters_bytes")
	want(t, fs, 4<<20, "bloomery_filters_bytes_limit")
	want(t, fs, 1<<20, "bloomery_filter_bytes_limit")
	want(t, fs, 15, "bloomery_filters_checked_keys_total")
	want(t, fs, 10, "bloomery_filters_set_keys_total")
	want(t, fs, 2, "bloomery_filter_items", "filter", "a")
	want(t, fs, float64(filterA.SizeBytes()), "bloomery_filter_bytes", "filter", "a")
	want(t, fs, 1, "bloomery_filter_layers", "filter", "a")
	want(t, fs, 3, "bloomery_filter_checked_keys_total", "filter", "b")
	want(t, fs, 2, "bloomery_filter_set_keys_total", "filter", "c")
	want(t, fs, 0.01, "bloomery_filter_target_fpp", "filter", "a")
	want(t, fs, 1000, "bloomery_filter_capacity", "filter", "a")
	want(t, fs, 0, "bloomery_filter_scalable", "filter", "a")
	want(t, fs, filterA.Usage().EstimatedFPP, "bloomery_filter_estimated_fpp", "filter", "a")
	if fpp, _ := fs.Value("bloomery_filter_estimated_fpp", "filter", "a"); fpp <= 0 || fpp >= 0.01 {
		t.Errorf("estimated fpp of a filter holding 2 of 1000 keys: %v", fpp)
	}
	if fill, _ := fs.Value("bloomery_filter_fill_ratio", "filter", "a"); fill <= 0 || fill > 0.01 {
		t.Errorf("fill ratio of a filter holding 2 of 1000 keys: %v", fill)
	}

	// Deleting a labelled filter lets the next one by name in; its traffic stays in the totals.
	if _, _, err := store.Delete("a"); err != nil {
		t.Fatal(err)
	}
	fs = gather(t, m)
	if got := fs.LabelValues("bloomery_filter_items", "filter"); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("labelled filters after deleting a: %v, want b c d", got)
	}
	want(t, fs, 4, "bloomery_filters")
	want(t, fs, 15, "bloomery_filters_checked_keys_total")
	want(t, fs, 10, "bloomery_filters_set_keys_total")
}

// A scalable filter says so, with the capacity and rate it was created for.
func TestScalableFilterMetrics(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	m := metrics.New(metrics.Options{Store: store, MaxLabelledFilters: 10})
	opts := filter.Options{Capacity: 100, FPP: 0.001, Scalable: true, Growth: 2, Tightening: 0.5}
	create(t, store, "grows", opts)
	fs := gather(t, m)
	want(t, fs, 1, "bloomery_filter_scalable", "filter", "grows")
	want(t, fs, 100, "bloomery_filter_capacity", "filter", "grows")
	want(t, fs, 0.001, "bloomery_filter_target_fpp", "filter", "grows")
	want(t, fs, 0, "bloomery_filter_estimated_fpp", "filter", "grows")
}

func TestFilterMetricsWithoutLabelsOrLimits(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	m := metrics.New(metrics.Options{Store: store, MaxLabelledFilters: 0})
	create(t, store, "only", filter.Options{Capacity: 10, FPP: 0.1})
	fs := gather(t, m)
	want(t, fs, 1, "bloomery_filters")
	want(t, fs, 1, "bloomery_filters_unlabelled")
	for _, name := range []string{"bloomery_filter_items", "bloomery_filters_bytes_limit", "bloomery_filter_bytes_limit"} {
		if fs[name] != nil {
			t.Errorf("%s is exposed: %v", name, fs[name])
		}
	}
}

func TestHTTPMetrics(t *testing.T) {
	m := metrics.New(metrics.Options{Store: filter.NewStore(filter.Limits{}, nil)})
	m.HTTP.Started()
	m.HTTP.Started()
	fs := gather(t, m)
	want(t, fs, 2, "bloomery_http_requests_in_flight")

	m.HTTP.Finished("/v1/bloomfilter/:name", http.MethodGet, http.StatusOK, 3*time.Millisecond)
	m.HTTP.Finished("", "BREW", http.StatusNotFound, time.Millisecond)
	m.HTTP.ConnState(nil, http.StateNew)
	m.HTTP.ConnState(nil, http.StateNew)
	m.HTTP.ConnState(nil, http.StateIdle)
	m.HTTP.ConnState(nil, http.StateClosed)
	fs = gather(t, m)
	want(t, fs, 0, "bloomery_http_requests_in_flight")
	want(t, fs, 1, "bloomery_http_requests_total", "route", "/v1/bloomfilter/:name", "method", "GET", "code", "200")
	want(t, fs, 1, "bloomery_http_requests_total", "route", metrics.Unmatched, "method", "other", "code", "404")
	want(t, fs, 1, "bloomery_http_request_duration_seconds", "route", "/v1/bloomfilter/:name", "method", "GET")
	want(t, fs, 1, "bloomery_http_open_connections")
	hist := fs.Samples("bloomery_http_request_duration_seconds", "route", "/v1/bloomfilter/:name")[0].GetHistogram()
	if sum := hist.GetSampleSum(); sum != 0.003 {
		t.Errorf("latency sum %v, want 0.003", sum)
	}
}

// Persistence series appear only once a persister is attached, and read its counters at scrape
// time.
func TestPersistenceMetrics(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	m := metrics.New(metrics.Options{Store: store})
	if fs := gather(t, m); fs["bloomery_snapshots_total"] != nil || fs["bloomery_recovery_duration_seconds"] != nil ||
		fs["bloomery_log_fsync_duration_seconds"] != nil {
		t.Fatal("persistence series before a persister is attached")
	}

	p, err := persist.Open(persist.Options{Dir: t.TempDir(), Sync: persist.SyncAlways, SyncObserver: m.Persistence.ObserveSync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	m.Persistence.Attach(p.Stats())
	rep, err := p.Recover(store)
	if err != nil {
		t.Fatal(err)
	}
	m.Persistence.Recovered(rep)
	f := create(t, store, "f", filter.Options{Capacity: 1000, FPP: 0.01})
	if err := f.Add("x"); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Unix()
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}

	fs := gather(t, m)
	want(t, fs, 1, "bloomery_snapshots_total")
	want(t, fs, 0, "bloomery_snapshot_failures_total")
	want(t, fs, 2, "bloomery_log_appended_records_total")
	want(t, fs, float64(p.Stats().LogBytes.Load()), "bloomery_log_appended_bytes_total")
	want(t, fs, float64(p.Stats().LastSnapshotBytes.Load()), "bloomery_snapshot_last_size_bytes")
	want(t, fs, 0, "bloomery_recovery_filters")
	want(t, fs, 0, "bloomery_recovery_recovered_records")
	if ts, _ := fs.Value("bloomery_snapshot_last_success_timestamp_seconds"); ts < float64(before) {
		t.Errorf("last snapshot at %v, before the snapshot (%d)", ts, before)
	}
	// Two fsyncs answered the writes; the snapshot's rotation of the log fsyncs again.
	if n, _ := fs.Value("bloomery_log_fsync_duration_seconds"); n < 2 {
		t.Errorf("%v fsyncs observed, want at least 2", n)
	}
	if fs["bloomery_snapshot_last_size_bytes"].GetMetric()[0].GetGauge().GetValue() <= 0 {
		t.Error("the snapshot has no size")
	}
}

// bloomery_ready follows the Ready function, and the Go and process collectors are there.
func TestReadyAndRuntimeMetrics(t *testing.T) {
	ready := false
	m := metrics.New(metrics.Options{Store: filter.NewStore(filter.Limits{}, nil), Ready: func() bool { return ready }})
	want(t, gather(t, m), 0, "bloomery_ready")
	ready = true
	fs := gather(t, m)
	want(t, fs, 1, "bloomery_ready")
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fs[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}
}

// Series names are ours: everything but the runtime and process collectors' is under bloomery_.
func TestNamesAreUnderOurNamespace(t *testing.T) {
	m := metrics.New(metrics.Options{Store: filter.NewStore(filter.Limits{}, nil)})
	m.HTTP.Finished("/", http.MethodGet, http.StatusOK, time.Millisecond)
	for name := range gather(t, m) {
		if !strings.HasPrefix(name, "bloomery_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is outside the bloomery_ namespace", name)
		}
	}
}

type homeLease struct {
	held     bool
	failures uint64
}

func (l *homeLease) Held() bool       { return l.held }
func (l *homeLease) Failures() uint64 { return l.failures }

// The home lease's series read the renewer at each scrape, and exist only with a lease.
func TestHomeLeaseMetrics(t *testing.T) {
	l := &homeLease{}
	m := metrics.New(metrics.Options{Store: filter.NewStore(filter.Limits{}, nil), HomeLease: l})
	fs := gather(t, m)
	want(t, fs, 0, "bloomery_home_lease_held")
	want(t, fs, 0, "bloomery_home_lease_renew_failures_total")
	l.held, l.failures = true, 3
	fs = gather(t, m)
	want(t, fs, 1, "bloomery_home_lease_held")
	want(t, fs, 3, "bloomery_home_lease_renew_failures_total")
	if fs := gather(t, metrics.New(metrics.Options{Store: filter.NewStore(filter.Limits{}, nil)})); fs["bloomery_home_lease_held"] != nil {
		t.Error("bloomery_home_lease_held exported without a lease")
	}
}
