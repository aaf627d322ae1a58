package persist

import (
	"strconv"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// Snapshot and recovery of 1 GiB of filters: eight fixed filters of 128 MiB each. Run with
//
//	go test -run '^$' -bench 'Snapshot1GiB|Recovery1GiB' -benchtime 3x ./dataplane/persist
//
// The MB/s column is the rate through the snapshot file.

const benchFilters, benchFilterBytes = 8, 128 << 20

// benchStore fills a store with 1 GiB of filters with some bits set.
func benchStore(b *testing.B) *filter.Store {
	b.Helper()
	store := filter.NewStore(filter.Limits{}, nil)
	// n such that a 0.001 filter takes benchFilterBytes: m = n * ln(1/p) / ln(2)^2.
	capacity := benchFilterBytes * 8 * 0.4804530139182014 / 6.907755278982137
	for i := range benchFilters {
		f, _, err := store.Create("f"+strconv.Itoa(i), filter.Options{Capacity: uint64(capacity), FPP: 0.001}, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.AddMany(keys("k", 100_000)); err != nil {
			b.Fatal(err)
		}
	}
	if used := store.UsedBytes(); used < benchFilters*benchFilterBytes*99/100 {
		b.Fatalf("store holds %d bytes, want about 1 GiB", used)
	}
	return store
}

func BenchmarkSnapshot1GiB(b *testing.B) {
	store := benchStore(b)
	p, err := Open(Options{Dir: b.TempDir(), Sync: SyncEverySecond})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	// Recovery of the empty directory attaches the persister to the filled store.
	if _, err := p.Recover(store); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(store.UsedBytes()))
	for b.Loop() {
		if err := p.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecovery1GiB(b *testing.B) {
	dir := b.TempDir()
	store := benchStore(b)
	p, err := Open(Options{Dir: dir, Sync: SyncEverySecond})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Recover(store); err != nil {
		b.Fatal(err)
	}
	if err := p.Snapshot(); err != nil {
		b.Fatal(err)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(store.UsedBytes()))
	for b.Loop() {
		p, err := Open(Options{Dir: dir, Sync: SyncEverySecond})
		if err != nil {
			b.Fatal(err)
		}
		rep, err := p.Recover(filter.NewStore(filter.Limits{}, nil))
		if err != nil || rep.Filters != benchFilters {
			b.Fatalf("recovered %d filters, err %v", rep.Filters, err)
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
