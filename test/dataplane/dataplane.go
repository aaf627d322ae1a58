// Package dataplane assembles real data planes for tests, through dataplane/run's exported API,
// and holds the helpers their tests share: requests to the HTTP ports, the RESP port's client,
// scrapes of /metrics, and clusters of pods under a placement. The tests of httpapi, resp,
// metrics and run import it from their external test packages (httpapi_test, ...): an external
// test package may import run even though run imports the package under test.
//
// Prefer the one that needs least: Handlers mounts a data plane's handlers on httptest servers,
// without Run (no data directory, no RESP port, no background work); Start runs it, on loopback
// listeners of every port, as a pod does.
package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/tick/ticktest"
)

// Server is a data plane's client port, with a typed client for the calls whose bodies are
// well-formed and raw HTTP for the rest. Internal is the same pod's internal port, whose raw
// requests and client carry the token; Ops is its ops port's URL, RESP its RESP port's address
// ("" unless it was started with Start or Run).
type Server struct {
	URL      string
	HTTP     *http.Client
	Client   *client.Client
	Internal *Server
	Ops      string
	RESP     string // the RESP port's address

	// How the last request's body arrived, as the server saw it.
	mu                   sync.Mutex
	lastContentLength    int64
	lastTransferEncoding []string
}

// Token is the internal port's token in these tests.
const Token = "the-cluster-token-of-the-tests-0123456789"

// LastBody is how the last request's body arrived at the client port, as the server saw it: its
// Content-Length (-1 for unknown) and Transfer-Encoding. Only servers of Handlers record it.
func (s *Server) LastBody() (contentLength int64, transferEncoding []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastContentLength, s.lastTransferEncoding
}

// WithToken configures the internal port's token, in a file as a pod has it.
func WithToken(t *testing.T, cfg *config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.InternalTokenFile = path
}

// Handlers mounts the handlers of a data plane configured by configure (after the defaults and
// WithToken) on httptest servers: the API without Run, hence without persistence, RESP or the
// background purge.
func Handlers(t *testing.T, configure func(*config.Config)) *Server {
	t.Helper()
	return Mount(t, New(t, configure))
}

// HandlersAt is Handlers on tm's time; nil is the wall clock's.
func HandlersAt(t *testing.T, tm *Time, configure func(*config.Config)) *Server {
	t.Helper()
	return Mount(t, NewAt(t, tm, configure))
}

// Mount mounts srv's client, internal and ops handlers on httptest servers.
func Mount(t *testing.T, srv *run.DataPlane) *Server {
	t.Helper()
	ts := &Server{}
	handler := srv.ClientHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.lastContentLength, ts.lastTransferEncoding = r.ContentLength, r.TransferEncoding
		ts.mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	internal := httptest.NewServer(srv.InternalHandler())
	t.Cleanup(internal.Close)
	ops := httptest.NewServer(srv.OpsHandler())
	t.Cleanup(ops.Close)
	ts.URL, ts.HTTP, ts.Client = hs.URL, hs.Client(), client.New(hs.URL)
	ts.Internal, ts.Ops = InternalServer(internal.URL), ops.URL
	return ts
}

// InternalServer is the Server of an internal port at url, whose requests carry Token.
func InternalServer(url string) *Server {
	return &Server{
		URL:    url,
		HTTP:   &http.Client{Transport: Bearer{Token: Token, Next: http.DefaultTransport}},
		Client: client.New(url, client.Internal(Token)),
	}
}

// Bearer sends the token with every request, as the operator and peers do.
type Bearer struct {
	Token string
	Next  http.RoundTripper
}

// RoundTrip sends r with the token.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Next.RoundTrip(r)
}

// New assembles a data plane, not yet running, with the defaults, WithToken and then configure.
func New(t *testing.T, configure func(*config.Config)) *run.DataPlane {
	t.Helper()
	return NewAt(t, nil, configure)
}

// Time is the time of a data plane whose test moves it: Clock decides expiry, and Ticker runs
// the periodic work (purges, snapshot triggers) when the test ticks it.
type Time struct {
	Clock  *ticktest.Clock
	Ticker *ticktest.Ticker
}

// NewTime starts at the wall clock's now.
func NewTime() *Time {
	// Now, so that creation times look as the replication's checks of the wall clock expect.
	return &Time{Clock: ticktest.NewClock(time.Now().Truncate(time.Millisecond)), Ticker: new(ticktest.Ticker)}
}

// NewAt is New on tm's time; nil is the wall clock's.
func NewAt(t *testing.T, tm *Time, configure func(*config.Config)) *run.DataPlane {
	t.Helper()
	cfg := config.Default()
	WithToken(t, &cfg)
	if configure != nil {
		configure(&cfg)
	}
	log := slog.New(slog.DiscardHandler)
	var srv *run.DataPlane
	var err error
	if tm == nil {
		srv, err = run.New(cfg, log)
	} else {
		srv, err = run.NewWithTime(cfg, log, tm.Clock.Now, tm.Ticker.Every)
	}
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	return srv
}

// Start runs a data plane (New with a data directory of the test's) with (*run.DataPlane).Run,
// the production path, on loopback listeners of every port, and waits until it is ready. Unlike
// Handlers it persists, serves RESP and runs the background work.
func Start(t *testing.T, configure func(*config.Config)) *Server {
	t.Helper()
	return StartAt(t, nil, configure)
}

// StartAt is Start on tm's time; nil is the wall clock's.
func StartAt(t *testing.T, tm *Time, configure func(*config.Config)) *Server {
	t.Helper()
	srv := NewAt(t, tm, func(cfg *config.Config) {
		cfg.DataDir = t.TempDir()
		if configure != nil {
			configure(cfg)
		}
	})
	ts, stop := Run(t, srv)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	WaitUntilReady(t, ts)
	return ts
}

// Run runs srv on loopback listeners of every port; stop cancels Run and returns what it returned. It
// does not wait for readiness: the server answers HTTP while it recovers.
func Run(t *testing.T, srv *run.DataPlane) (ts *Server, stop func() error) {
	t.Helper()
	ls := run.Listeners{Client: Listen(t), Internal: Listen(t), Ops: Listen(t), RESP: Listen(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ls) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	url := "http://" + ls.Client.Addr().String()
	return &Server{
		URL: url, HTTP: &http.Client{}, Client: client.New(url),
		Internal: InternalServer("http://" + ls.Internal.Addr().String()),
		Ops:      "http://" + ls.Ops.Addr().String(),
		RESP:     ls.RESP.Addr().String(),
	}, stop
}

// Listen opens a listener on a free loopback port.
func Listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// WaitUntilReady waits for /readyz to answer 200: the filter API answers 503 while the server
// recovers, and tests start once it is ready, as a Service would send it traffic.
func WaitUntilReady(t *testing.T, ts *Server) {
	t.Helper()
	await.True(t, 30*time.Second, "readiness", func() bool {
		return ts.Send(t, http.MethodGet, "/readyz", "").Status == http.StatusOK
	})
}

// Response is an answer as it came.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Send sends body with a Content-Length; an empty body is sent as no body at all.
func (s *Server) Send(t *testing.T, method, path, body string) Response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return s.SendReader(t, method, path, r)
}

// SendChunked sends body with chunked transfer encoding: a reader of unknown length.
func (s *Server) SendChunked(t *testing.T, method, path, body string) Response {
	t.Helper()
	return s.SendReader(t, method, path, io.MultiReader(strings.NewReader(body)))
}

// SendReader sends body as it reads it; nil sends none.
func (s *Server) SendReader(t *testing.T, method, path string, body io.Reader) Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, body)
	if err != nil {
		t.Fatalf("building %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// WantError asserts the status and the error body's exact shape, {"error": "...", "code": n},
// served as JSON, and returns the message.
func (r Response) WantError(t *testing.T, status, code int) string {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d (body %s), want %d", r.Status, r.Body, status)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &fields); err != nil {
		t.Fatalf("error body %s is not a JSON object: %v", r.Body, err)
	}
	if len(fields) != 2 || fields["error"] == nil || fields["code"] == nil {
		t.Fatalf("error body %s, want exactly the fields error and code", r.Body)
	}
	var eb wire.ErrorBody
	if err := json.Unmarshal(r.Body, &eb); err != nil {
		t.Fatalf("error body %s: %v", r.Body, err)
	}
	if eb.Code != code || eb.Error == "" {
		t.Fatalf("error body %s, want code %d and a message", r.Body, code)
	}
	return eb.Error
}

// WantJSON asserts a 2xx status and decodes the body into out.
func (r Response) WantJSON(t *testing.T, status int, out any) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d (body %s), want %d", r.Status, r.Body, status)
	}
	if err := json.Unmarshal(r.Body, out); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
}

// WantAPIError asserts that err is the client's *Error with that status and code, and returns a
// copy of it.
func WantAPIError(t *testing.T, err error, status, code int) client.Error {
	t.Helper()
	e, ok := errors.AsType[*client.Error](err)
	if !ok {
		t.Fatalf("error = %v, want a *client.Error with status %d", err, status)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("error = %v, want status %d and code %d", e, status, code)
	}
	return *e
}

// Create creates the filter through the client and fails the test unless it is created.
func Create(t *testing.T, s *Server, name string, opts client.CreateOptions) wire.Filter {
	t.Helper()
	f, created, err := s.Client.Create(t.Context(), name, opts)
	if err != nil || !created {
		t.Fatalf("Create(%s) = created %v, %v; want created", name, created, err)
	}
	return f
}

// Get reads the filter through the client.
func Get(t *testing.T, s *Server, name string) wire.Filter {
	t.Helper()
	f, err := s.Client.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return f
}

// MultiCheck checks values in the filter through the client.
func MultiCheck(t *testing.T, s *Server, name string, values []string) []bool {
	t.Helper()
	got, err := s.Client.MultiCheck(t.Context(), name, values)
	if err != nil {
		t.Fatalf("MultiCheck(%s): %v", name, err)
	}
	return got
}

// Scrape fetches /metrics with acceptEncoding ("" for none) through hc, checks the answer, and
// parses it.
func Scrape(t *testing.T, hc *http.Client, url, acceptEncoding string) metricstest.Families {
	t.Helper()
	fs, _ := ScrapeBody(t, hc, url, acceptEncoding)
	return fs
}

// ScrapeBody is Scrape that also returns the body as it came, compressed or not.
func ScrapeBody(t *testing.T, hc *http.Client, url, acceptEncoding string) (metricstest.Families, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		// Set by hand, the transport leaves the body compressed, as a scraper receives it.
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	fs, err := metricstest.Parse(body, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return fs, body
}

// Value is the single sample of name with labels, and fails the test if there is none or more.
func Value(t *testing.T, fs metricstest.Families, name string, labels ...string) float64 {
	t.Helper()
	v, ok := fs.Value(name, labels...)
	if !ok {
		t.Fatalf("%s%v: no single sample", name, labels)
	}
	return v
}

// WantValue asserts the single sample of name with labels.
func WantValue(t *testing.T, fs metricstest.Families, want float64, name string, labels ...string) {
	t.Helper()
	if got := Value(t, fs, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// RedisClient connects go-redis to the RESP port with its defaults: it speaks RESP3, after
// HELLO 3.
func RedisClient(t *testing.T, ts *Server) *redis.Client {
	t.Helper()
	return RedisClientProtocol(t, ts, 0)
}

// RedisClientProtocol connects go-redis to the RESP port in protocol 2 or 3 (0: go-redis's
// default, 3).
func RedisClientProtocol(t *testing.T, ts *Server, protocol int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1, Protocol: protocol})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// WantBools asserts the answer of a go-redis call of booleans.
func WantBools(t *testing.T, what string, got []bool, err error, want ...bool) {
	t.Helper()
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("%s = %v, %v; want %v", what, got, err, want)
	}
}

// Expect checks the value and error of a go-redis call: Expect(t, what, want)(cmd.Result()).
func Expect[T comparable](t *testing.T, what string, want T) func(T, error) {
	t.Helper()
	return func(got T, err error) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", what, got, err, want)
		}
	}
}

// RESPPassword is the RESP port's password in these tests.
const RESPPassword = "the-resp-password"

// WithRESPPassword configures the RESP port's password, in a file as a pod has it.
func WithRESPPassword(t *testing.T, cfg *config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte(RESPPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.RESPPasswordFile = path
}

// Sum adds up every sample of a family, whatever its labels.
func Sum(fs metricstest.Families, name string) float64 {
	var total float64
	for _, m := range fs.Samples(name) {
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// WantRedisError checks that err is the error reply want.
func WantRedisError(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("%s = %v, want %q", what, err, want)
	}
}

// Cluster runs pods (Start) that know each other under a placement; Push tells them.
type Cluster struct {
	t     *testing.T
	Pods  []*Server
	Names []string
	epoch uint64
}

// NewCluster starts n pods, each configured by configure; they know nothing of each other until
// the first Push.
func NewCluster(t *testing.T, n int, configure func(*config.Config)) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for range n {
		c.Add(configure)
	}
	return c
}

// Epoch is the epoch of the membership Push sent last.
func (c *Cluster) Epoch() uint64 { return c.epoch }

// Add starts one more pod, which the next Push makes a member.
func (c *Cluster) Add(configure func(*config.Config)) {
	c.Pods = append(c.Pods, Start(c.t, configure))
	c.Names = append(c.Names, "p"+strconv.Itoa(len(c.Names)))
}

// Members are the pods, by their names p0, p1, ... and internal URLs.
func (c *Cluster) Members() []wire.Member {
	out := make([]wire.Member, len(c.Pods))
	for i, ts := range c.Pods {
		out[i] = wire.Member{Name: c.Names[i], URL: ts.Internal.URL}
	}
	return out
}

// Push sends every pod the next epoch of the members with placement and previous.
func (c *Cluster) Push(p wire.Placement, previous *wire.Placement) {
	c.t.Helper()
	c.epoch++
	for i, ts := range c.Pods {
		m := wire.Membership{Epoch: c.epoch, Self: c.Names[i], Members: c.Members(), Placement: p, Previous: previous}
		if err := ts.Internal.Client.SetMembership(c.t.Context(), m); err != nil {
			c.t.Fatalf("membership to %s: %v", c.Names[i], err)
		}
	}
	for _, ts := range c.Pods {
		WaitUntilReady(c.t, ts)
	}
}

// Status reads every pod's placement status.
func (c *Cluster) Status() []wire.PlacementStatus {
	c.t.Helper()
	out := make([]wire.PlacementStatus, len(c.Pods))
	for i, ts := range c.Pods {
		st, err := ts.Internal.Client.PlacementStatus(c.t.Context())
		if err != nil {
			c.t.Fatalf("placement status of %s: %v", c.Names[i], err)
		}
		out[i] = st
	}
	return out
}

// ToAny is items as go-redis takes them.
func ToAny(items []string) []any {
	out := make([]any, len(items))
	for i, item := range items {
		out[i] = item
	}
	return out
}

// Values are n distinct values, prefix followed by a number.
func Values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// EveryValueEverywhere checks that every pod finds every value, one at a time and in batches.
func (c *Cluster) EveryValueEverywhere(name string, vals []string) {
	c.t.Helper()
	for i, ts := range c.Pods {
		got, err := ts.Client.MultiCheck(c.t.Context(), name, vals)
		if err != nil {
			c.t.Fatalf("multi-check through %s: %v", c.Names[i], err)
		}
		if missing := slices.Index(got, false); missing >= 0 {
			c.t.Fatalf("multi-check through %s: %s missing", c.Names[i], vals[missing])
		}
		for _, v := range vals[:20] {
			if present, err := ts.Client.Check(c.t.Context(), name, v); err != nil || !present {
				c.t.Fatalf("check of %s through %s: %v, %v", v, c.Names[i], present, err)
			}
		}
	}
}
