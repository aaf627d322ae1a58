package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// BenchmarkConcurrentGzipScrapes measures the CPU time one scrape costs when N scrapers ask for
// the same gzip exposition of 10,000 series at the same moment, with the work shared per wave,
// with every scrape producing its own, and with client_golang's promhttp handler for reference.
// ns/op is the wall time of one wave of N scrapes; cpu-ns/wave is the process's CPU time (user
// and system, all goroutines, garbage collection included) that one wave of N scrapes costs, and
// cpu-ns/scrape the same divided by N. The target of docs/performance.md, N=100 costing at most
// twice the CPU of N=1, compares the shared cpu-ns/wave of scrapers=100 with that of scrapers=1;
// encodings/wave shows how many of the N scrapes produced their own response.
//
//	go test -run '^$' -bench ConcurrentGzipScrapes -benchtime 20x ./dataplane/metrics
func BenchmarkConcurrentGzipScrapes(b *testing.B) {
	reg := prometheus.NewRegistry()
	series := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bench_series", Help: "One of many series."}, []string{"filter"})
	for i := range 10_000 {
		series.WithLabelValues("filter-" + strconv.Itoa(i)).Set(float64(i))
	}
	reg.MustRegister(series)

	for _, scrapers := range []int{1, 10, 100} {
		for _, mode := range []string{"shared", "unshared", "promhttp"} {
			b.Run(fmt.Sprintf("scrapers=%d/%s", scrapers, mode), func(b *testing.B) {
				// The encodings counter goes to a registry of its own, so every mode encodes the
				// same 10,000 series.
				counters := prometheus.NewRegistry()
				var handler http.Handler = newHandler(reg, counters, mode == "shared")
				if mode == "promhttp" {
					handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
				}
				requests := make([]*http.Request, scrapers)
				for i := range requests {
					requests[i] = httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/metrics", nil)
					requests[i].Header.Set("Accept-Encoding", "gzip")
				}
				start := cpuTime(b)
				waves := 0
				for b.Loop() {
					release := make(chan struct{})
					var wg sync.WaitGroup
					for _, r := range requests {
						wg.Go(func() {
							<-release
							handler.ServeHTTP(discardWriter{http.Header{}}, r)
						})
					}
					close(release)
					wg.Wait()
					waves++
				}
				cpu := cpuTime(b) - start
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(waves), "cpu-ns/wave")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(waves*scrapers), "cpu-ns/scrape")
				if mode != "promhttp" {
					b.ReportMetric(counterSum(b, counters)/float64(waves), "encodings/wave")
				}
			})
		}
	}
}

type discardWriter struct{ header http.Header }

func (w discardWriter) Header() http.Header         { return w.header }
func (w discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w discardWriter) WriteHeader(int)             {}

// cpuTime is the CPU time the process has used, in user and system mode.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func counterSum(b *testing.B, g prometheus.Gatherer) float64 {
	b.Helper()
	families, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
