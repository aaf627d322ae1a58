package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// syncBuffer collects log output written from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// At debug level every request has one access-log line; at info level none.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			logs := &syncBuffer{}
			srv, err := run.New(config.Default(), slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level})))
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv.ClientHandler())
			t.Cleanup(hs.Close)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/v1/bloomfilter/nothing/check", strings.NewReader(`{"value":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request-ID", "req-42")
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// Read to the end, so that the connection serves the next request.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if level == slog.LevelInfo {
				// The next request's line would come after this one's, were there any.
				if r := (&dataplane.Server{URL: hs.URL, HTTP: hs.Client()}).Send(t, http.MethodGet, "/healthz", ""); r.Status != http.StatusOK {
					t.Fatal(r.Status)
				}
				if got := logs.lines(t, "Request"); len(got) != 0 {
					t.Errorf("access-log lines at info level: %v", got)
				}
				return
			}
			await.True(t, 10*time.Second, "the access-log line", func() bool { return len(logs.lines(t, "Request")) == 1 })
			line := logs.lines(t, "Request")[0]
			for key, want := range map[string]any{
				"level": "DEBUG", "method": "POST", "route": "/v1/bloomfilter/:name/check",
				"path": "/v1/bloomfilter/nothing/check", "status": float64(404), "requestId": "req-42",
			} {
				if line[key] != want {
					t.Errorf("access log %s = %v, want %v (line %v)", key, line[key], want, line)
				}
			}
			if d, ok := line["duration"].(float64); !ok || d <= 0 {
				t.Errorf("access log duration %v", line["duration"])
			}
		})
	}
}

// Every answer carries a request ID, the client's or a new one; a panic is answered with a 500,
// logged with its stack and counted; http.ErrAbortHandler aborts the connection, as net/http
// means it to, and leaves no request counted in flight.
func TestRequestIDsAndPanics(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	srv, err := run.New(config.Default(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	run.AddRoute(srv, "/test/panic", func(echo.Context) error { panic("boom") })
	run.AddRoute(srv, "/test/abort", func(echo.Context) error { panic(http.ErrAbortHandler) })
	hs := httptest.NewServer(srv.ClientHandler())
	t.Cleanup(hs.Close)
	s := &dataplane.Server{URL: hs.URL, HTTP: hs.Client()}

	first, second := s.Send(t, http.MethodGet, "/healthz", ""), s.Send(t, http.MethodGet, "/healthz", "")
	a, b := first.Header.Get(echo.HeaderXRequestID), second.Header.Get(echo.HeaderXRequestID)
	if a == "" || b == "" || a == b {
		t.Errorf("request IDs %q and %q: want two different ones", a, b)
	}

	r := s.Send(t, http.MethodGet, "/test/panic", "")
	if msg := r.WantError(t, http.StatusInternalServerError, wire.CodeInternal); msg != "internal error: boom" {
		t.Errorf("panic answered %q", msg)
	}
	if r.Header.Get(echo.HeaderXRequestID) == "" {
		t.Error("the 500 has no request ID")
	}
	lines := logs.lines(t, "Recovered from panic")
	if len(lines) != 1 || lines[0]["error"] != "boom" || !strings.Contains(fmt.Sprint(lines[0]["stack"]), "TestRequestIDsAndPanics") {
		t.Errorf("log lines %v: want one naming the error, with the stack of the panicking handler", lines)
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/test/abort", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Errorf("http.ErrAbortHandler answered %d, want the connection aborted", resp.StatusCode)
	}

	fs := dataplane.Scrape(t, s.HTTP, s.URL, "")
	dataplane.WantValue(t, fs, 1, "bloomery_http_requests_total", "route", "unmatched", "method", "GET", "code", "500")
	dataplane.WantValue(t, fs, 1, "bloomery_http_requests_in_flight") // the scrape
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the JSON log lines with message msg.
func (b *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			continue
		}
		if fields["msg"] == msg {
			out = append(out, fields)
		}
	}
	return out
}
