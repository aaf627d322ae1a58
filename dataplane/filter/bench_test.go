package filter

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// Benchmarks of the engine on a small filter and on the 1e8 / 0.001 filter of the performance
// targets (180 MB of bits, so most probes miss the CPU caches). Run them with
// `make bench` or `go test -run '^$' -bench . -benchmem ./dataplane/filter`; for benchstat,
// `make bench-engine` (see bench/README.md).
//
// BenchmarkBaselineTestOrAdd is the engine's yardstick (docs/performance.md): a plain loop of bits-and-blooms' TestOrAdd
// on a filter of the same shape, one key after the other. BenchmarkCheckAndSetMany1000 is the
// engine's batch path on the same keys; both report ns/key.

var benchShapes = []struct {
	name string
	opts Options
}{
	{"small", Options{Capacity: 10_000, FPP: 0.01, Scalable: true, Growth: DefaultGrowth, Tightening: DefaultTightening}},
	{"1e8", Options{Capacity: 100_000_000, FPP: 0.001, Scalable: true, Growth: DefaultGrowth, Tightening: DefaultTightening}},
	// The same filter split into 8 partitions: what routing a batch by partition costs.
	{"1e8-p8", Options{Capacity: 100_000_000, FPP: 0.001, Scalable: true, Growth: DefaultGrowth, Tightening: DefaultTightening, Partitions: 8}},
}

// keys are prepared up front so that the benchmarks measure the filter, not strconv.
var benchKeys = func() []string {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i*7919)
	}
	return keys
}()

func benchFilter(b *testing.B, opts Options) *Filter {
	b.Helper()
	f, _, err := NewStore(Limits{}, nil).Create("bench", opts, false)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func BenchmarkCheck(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			_ = f.AddMany(benchKeys[:len(benchKeys)/2])
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f.Check(benchKeys[i&(len(benchKeys)-1)])
				i++
			}
		})
	}
}

func BenchmarkCheckParallel(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			_ = f.AddMany(benchKeys[:len(benchKeys)/2])
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1) * 1000)
				for pb.Next() {
					f.Check(benchKeys[i&(len(benchKeys)-1)])
					i++
				}
			})
		})
	}
}

func BenchmarkAdd(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = f.Add(benchKeys[i&(len(benchKeys)-1)])
				i++
			}
		})
	}
}

func BenchmarkCheckAndSet(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = f.CheckAndSet(benchKeys[i&(len(benchKeys)-1)])
				i++
			}
		})
	}
}

// BenchmarkBaselineTestOrAdd is bits-and-blooms alone: TestOrAdd in a loop over the keys that
// BenchmarkCheckAndSetMany1000 sends in batches, on one layer of the same shape.
func BenchmarkBaselineTestOrAdd(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			layer, err := shape.opts.LayerShape(0)
			if err != nil {
				b.Fatal(err)
			}
			bf := bloom.New(layer.Bits, layer.Hashes)
			keys := make([][]byte, len(benchKeys))
			for i, key := range benchKeys {
				keys[i] = []byte(key)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				start := (n * 1000) & (len(keys) - 1)
				for _, key := range keys[start:min(start+1000, len(keys))] {
					bf.TestOrAdd(key)
				}
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*1000), "ns/key")
		})
	}
}

// BenchmarkCheckAndSetMany1000 reports ns per batch of 1000 keys, and ns/key.
func BenchmarkCheckAndSetMany1000(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := (i * 1000) & (len(benchKeys) - 1)
				end := min(start+1000, len(benchKeys))
				_, _ = f.CheckAndSetMany(benchKeys[start:end])
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i*1000), "ns/key")
		})
	}
}

func BenchmarkCheckMany1000(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			f := benchFilter(b, shape.opts)
			_ = f.AddMany(benchKeys[:len(benchKeys)/2])
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := (i * 1000) & (len(benchKeys) - 1)
				end := min(start+1000, len(benchKeys))
				f.CheckMany(benchKeys[start:end])
				i++
			}
		})
	}
}

// BenchmarkCheckManyAbsentOrPresent checks batches of 1000 keys that are all absent, and then all
// present, on the 1e8 filter: a check of an absent key needs a word or two of the filter, one of
// a present key all k.
func BenchmarkCheckManyAbsentOrPresent(b *testing.B) {
	f := benchFilter(b, benchShapes[1].opts)
	half := len(benchKeys) / 2
	_ = f.AddMany(benchKeys[:half])
	for _, kind := range []struct {
		name string
		keys []string
	}{{"absent", benchKeys[half:]}, {"present", benchKeys[:half]}} {
		b.Run(kind.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := (i * 1000) % (len(kind.keys) - 1000)
				f.CheckMany(kind.keys[start : start+1000])
				i++
			}
		})
	}
}

// BenchmarkWriteDuringInfo describes a filter of 1 GiB of bits (Info, what GET answers) while a
// writer sets keys one at a time, and reports what a describe costs (ns/op) and the longest a
// single write took meanwhile (max-write-µs): the describe reads kept counts, so neither grows
// with the filter.
func BenchmarkWriteDuringInfo(b *testing.B) {
	f := benchFilter(b, Options{Capacity: 900_000_000, FPP: 0.01}) // 1.0 GiB in one layer
	if size := f.SizeBytes(); size < 1<<30 {
		b.Fatalf("the filter holds %d bytes, want 1 GiB", size)
	}
	stop, worst := make(chan struct{}), make(chan time.Duration)
	go func() {
		var longest time.Duration
		for i := 0; ; i++ {
			select {
			case <-stop:
				worst <- longest
				return
			default:
			}
			start := time.Now()
			if _, err := f.CheckAndSet(benchKeys[i&(len(benchKeys)-1)]); err != nil {
				panic(err)
			}
			longest = max(longest, time.Since(start))
		}
	}()
	for b.Loop() {
		f.Info()
	}
	close(stop)
	b.ReportMetric(float64((<-worst).Microseconds()), "max-write-µs")
}
