package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
)

// benchHandler is the API of an in-memory data plane with the filter "bench" (1e7 at 0.001), as
// bench/compare.sh creates it: the benchmarks below measure what a request costs from the router
// to the answer, without the network.
func benchHandler(b *testing.B) http.Handler {
	b.Helper()
	cfg := config.Default()
	cfg.InMemory = true
	d, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	h := d.ClientHandler()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(b.Context(), http.MethodPut, "/v1/bloomfilter/bench", strings.NewReader(`{"expectedInsertions":10000000,"fpp":0.001,"validPeriodAfterCreate":0}`)))
	if w.Code != http.StatusCreated {
		b.Fatalf("create: %d %s", w.Code, w.Body)
	}
	return h
}

func serveBench(b *testing.B, h http.Handler, path string, body func(i int) string) {
	b.Helper()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(b.Context(), http.MethodPost, path, strings.NewReader(body(i))))
		if w.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
	}
}

func BenchmarkCheckAndSetRequest(b *testing.B) {
	serveBench(b, benchHandler(b), "/v1/bloomfilter/bench/check-and-set", func(i int) string {
		return `{"value":"v` + strconv.Itoa(i) + `"}`
	})
}

func BenchmarkMultiCheckAndSet100Request(b *testing.B) {
	serveBench(b, benchHandler(b), "/v1/bloomfilter/bench/multi-check-and-set", func(i int) string {
		var sb strings.Builder
		sb.WriteString(`{"values":[`)
		for j := range 100 {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"v` + strconv.Itoa(i*100+j) + `"`)
		}
		sb.WriteString(`]}`)
		return sb.String()
	})
}
