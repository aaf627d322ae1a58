package run_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/metrics/metricstest"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/internal/testca"
)

// testRESPPassword is the RESP port's password in these tests.
const testRESPPassword = "the-resp-password"

// withRESPPassword configures the RESP port's password, in a file as a pod has it.
func withRESPPassword(t *testing.T, cfg *config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte(testRESPPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.RESPPasswordFile = path
}

// sum adds up every sample of a family, whatever its labels.
func sum(fs metricstest.Families, name string) float64 {
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

// wantRedisError checks that err is the error reply want.
func wantRedisError(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("%s = %v, want %q", what, err, want)
	}
}

// With a password, a connection answers NOAUTH to everything but AUTH, HELLO and QUIT until it
// authenticates; a wrong password answers WRONGPASS, and is counted.
func TestRESPAuth(t *testing.T) {
	t.Parallel()
	ts := runServer(t, func(cfg *config.Config) { withRESPPassword(t, cfg) })
	ctx := t.Context()

	// Without a password go-redis's HELLO 3 is refused and its commands answer NOAUTH.
	anon := redis.NewClient(&redis.Options{Addr: ts.resp, MaxRetries: -1, PoolSize: 4})
	t.Cleanup(func() { _ = anon.Close() })
	for _, args := range [][]any{{"PING"}, {"BF.ADD", "k", "a"}, {"BF.EXISTS", "k", "a"}, {"KEYS", "*"}, {"SELECT", "0"}, {"CLIENT", "GETNAME"}, {"ECHO", "x"}} {
		wantRedisError(t, "unauthenticated "+args[0].(string), anon.Do(ctx, args...).Err(), "NOAUTH Authentication required.")
	}
	// Redis checks that a command exists and its arity before authentication.
	wantRedisError(t, "unauthenticated unknown command", anon.Do(ctx, "NOSUCH").Err(), "ERR unknown command 'NOSUCH', with args beginning with: ")
	wantRedisError(t, "unauthenticated HELLO 2", anon.Do(ctx, "HELLO", "2").Err(),
		"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")

	conn := anon.Conn()
	defer func() { _ = conn.Close() }()
	wantRedisError(t, "AUTH wrong", conn.Do(ctx, "AUTH", "not-the-password").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	wantRedisError(t, "AUTH default wrong", conn.Do(ctx, "AUTH", "default", "not-the-password").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	wantRedisError(t, "AUTH another user", conn.Do(ctx, "AUTH", "bob", testRESPPassword).Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	wantRedisError(t, "AUTH a b c", conn.Do(ctx, "AUTH", "a", "b", "c").Err(), "ERR syntax error")
	wantRedisError(t, "PING after a failed AUTH", conn.Ping(ctx).Err(), "NOAUTH Authentication required.")
	expect(t, "AUTH password", "OK")(conn.Do(ctx, "AUTH", testRESPPassword).Text())
	expect(t, "PING once authenticated", "PONG")(conn.Ping(ctx).Result())
	expect(t, "BF.ADD once authenticated", true)(conn.BFAdd(ctx, "k", "a").Result())
	// A failed AUTH leaves an authenticated connection so, as Redis's does.
	wantRedisError(t, "AUTH wrong when authenticated", conn.Do(ctx, "AUTH", "nope-nope").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	expect(t, "BF.EXISTS after a failed AUTH", true)(conn.BFExists(ctx, "k", "a").Result())

	// AUTH default password, on another connection: authentication is the connection's.
	other := anon.Conn()
	defer func() { _ = other.Close() }()
	wantRedisError(t, "another connection", other.Ping(ctx).Err(), "NOAUTH Authentication required.")
	expect(t, "AUTH default password", "OK")(other.Do(ctx, "AUTH", "default", testRESPPassword).Text())
	expect(t, "BF.EXISTS after AUTH default", true)(other.BFExists(ctx, "k", "a").Result())

	// QUIT needs no authentication.
	q := anon.Conn()
	defer func() { _ = q.Close() }()
	expect(t, "QUIT unauthenticated", "OK")(q.Do(ctx, "QUIT").Text())

	// go-redis with the password: its HELLO 3 AUTH is refused (NOPROTO), so it AUTHs apart.
	rdb := redis.NewClient(&redis.Options{Addr: ts.resp, Password: testRESPPassword, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	expect(t, "BF.EXISTS with go-redis's Password", true)(rdb.BFExists(ctx, "k", "a").Result())
	// And a wrong one fails every command with WRONGPASS.
	bad := redis.NewClient(&redis.Options{Addr: ts.resp, Password: "not-the-password", MaxRetries: -1})
	t.Cleanup(func() { _ = bad.Close() })
	wantRedisError(t, "go-redis with a wrong password", bad.Ping(ctx).Err(), "WRONGPASS invalid username-password pair or user is disabled.")

	fs := scrape(t, &http.Client{}, ts.ops, "")
	if n := value(t, fs, "bloomery_resp_auth_failures_total"); n < 5 {
		t.Errorf("bloomery_resp_auth_failures_total = %v, want at least the 5 refusals", n)
	}
	if n := value(t, fs, "bloomery_resp_command_errors_total", "command", "ping"); n < 3 {
		t.Errorf(`bloomery_resp_command_errors_total{command="ping"} = %v, want the NOAUTH answers counted`, n)
	}
}

// HELLO 2 AUTH default password authenticates and answers the server's map; with a wrong password
// it answers WRONGPASS and leaves the options unapplied.
func TestRESPHelloAuth(t *testing.T) {
	t.Parallel()
	ts := runServer(t, func(cfg *config.Config) { withRESPPassword(t, cfg) })
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: ts.resp, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	conn := rdb.Conn()
	defer func() { _ = conn.Close() }()

	wantRedisError(t, "HELLO 2 AUTH wrong", conn.Do(ctx, "HELLO", "2", "AUTH", "default", "wrong-password", "SETNAME", "early").Err(),
		"WRONGPASS invalid username-password pair or user is disabled.")
	wantRedisError(t, "HELLO 2 AUTH without a password", conn.Do(ctx, "HELLO", "2", "AUTH", "default").Err(), "ERR Syntax error in HELLO option 'AUTH'")
	wantRedisError(t, "HELLO 3 AUTH", conn.Do(ctx, "HELLO", "3", "AUTH", "default", testRESPPassword).Err(), "NOPROTO unsupported protocol version")
	hello, err := conn.Do(ctx, "HELLO", "2", "AUTH", "default", testRESPPassword, "SETNAME", "named").Slice()
	if err != nil || len(hello) != 14 || hello[0] != "server" {
		t.Fatalf("HELLO 2 AUTH default password = %v, %v; want the server's map", hello, err)
	}
	expect(t, "CLIENT GETNAME after HELLO AUTH SETNAME", "named")(conn.ClientGetName(ctx).Result())
	expect(t, "BF.ADD after HELLO AUTH", true)(conn.BFAdd(ctx, "h", "x").Result())
}

// Without a password, AUTH password answers Redis's hint that none is configured, and AUTH
// default anything succeeds, as Redis's default user without a password does.
func TestRESPAuthWithoutPassword(t *testing.T) {
	t.Parallel()
	ts := runServer(t, nil)
	ctx := t.Context()
	rdb := redisClient(t, ts)
	wantRedisError(t, "AUTH without a password configured", rdb.Do(ctx, "AUTH", "whatever").Err(),
		"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	expect(t, "AUTH default x", "OK")(rdb.Do(ctx, "AUTH", "default", "x").Text())
	wantRedisError(t, "AUTH bob x", rdb.Do(ctx, "AUTH", "bob", "x").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
}

// A password file that is empty or too short stops the data plane at start, naming the file.
func TestRESPPasswordFileRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ content, want string }{
		{"  \n", "holds no password"},
		{"short\n", "the password must have at least 8 characters, it has 5"},
	} {
		path := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		cfg.InMemory, cfg.RESPPort, cfg.RESPPasswordFile = true, 6379, path
		_, err := run.New(cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "respPasswordFile "+path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("password file %q: New = %v, want an error naming the file and %q", tt.content, err, tt.want)
		}
	}
}

// With the data plane's certificate the RESP port serves TLS, without asking clients for a
// certificate even though a CA is configured: applications are not the cluster's pods.
func TestRESPTLS(t *testing.T) {
	t.Parallel()
	ca, err := testca.New("resp-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ca.Issue("pod-0")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), issued)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, func(cfg *config.Config) {
		cfg.InMemory = true
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = files.Cert, files.Key, files.CA
		withToken(t, cfg)
		withRESPPassword(t, cfg)
	})
	ts, stop := startRun(t, srv)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, 30*time.Second, 5*time.Millisecond, "readiness", func() bool {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.ops+"/readyz", nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ctx := t.Context()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)

	rdb := redis.NewClient(&redis.Options{
		Addr: ts.resp, Password: testRESPPassword, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "pod-0", MinVersion: tls.VersionTLS12},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	expect(t, "BF.ADD over TLS", true)(rdb.BFAdd(ctx, "secure", "x").Result())
	expect(t, "BF.EXISTS over TLS", true)(rdb.BFExists(ctx, "secure", "x").Result())

	// A client that does not trust the CA fails the handshake.
	untrusting := redis.NewClient(&redis.Options{Addr: ts.resp, MaxRetries: -1, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "pod-0"}})
	t.Cleanup(func() { _ = untrusting.Close() })
	if err := untrusting.Ping(ctx).Err(); err == nil || !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("PING from a client without the CA = %v, want a certificate verification error", err)
	}
	// Plain RESP on the TLS port is not served.
	shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	plain := redis.NewClient(&redis.Options{Addr: ts.resp, Password: testRESPPassword, MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	if err := plain.Ping(shortCtx).Err(); err == nil {
		t.Error("PING in plain text on the TLS port answered")
	}
}

// Each command has its series: count, errors and latency by its lower-case name, every unknown
// name as other; the connections are counted as they open and close.
func TestRESPMetricsPerCommand(t *testing.T) {
	t.Parallel()
	ts := runServer(t, nil)
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: ts.resp, MaxRetries: -1, PoolSize: 2})
	for range 3 {
		if err := rdb.BFAdd(ctx, "m", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = rdb.Do(ctx, "bf.exists", "m").Err() // wrong arity: an error of bf.exists
	_ = rdb.Do(ctx, "NoSuchThing", "a").Err()
	_ = rdb.Do(ctx, "another-unknown").Err()

	fs := scrape(t, &http.Client{}, ts.ops, "")
	wantValue(t, fs, 3, "bloomery_resp_commands_total", "command", "bf.add")
	wantValue(t, fs, 0, "bloomery_resp_command_errors_total", "command", "bf.add")
	wantValue(t, fs, 3, "bloomery_resp_command_duration_seconds", "command", "bf.add")
	wantValue(t, fs, 1, "bloomery_resp_command_errors_total", "command", "bf.exists")
	wantValue(t, fs, 2, "bloomery_resp_commands_total", "command", "other")
	wantValue(t, fs, 2, "bloomery_resp_command_errors_total", "command", "other")
	for _, label := range fs.LabelValues("bloomery_resp_commands_total", "command") {
		if label != strings.ToLower(label) || strings.Contains(label, "thing") || strings.Contains(label, "unknown") {
			t.Errorf("command label %q: want the known names in lower case and other", label)
		}
	}
	opened := value(t, fs, "bloomery_resp_connections_total")
	if open := value(t, fs, "bloomery_resp_connections"); open < 1 || opened < open {
		t.Errorf("bloomery_resp_connections = %v, _total = %v; want at least the client's connection open", open, opened)
	}
	_ = rdb.Close()
	eventually(t, 10*time.Second, 5*time.Millisecond, "the connections closed", func() bool {
		return value(t, scrape(t, &http.Client{}, ts.ops, ""), "bloomery_resp_connections") == 0
	})
}

// Pipelined BF.ADDs, which are answered as one batch once the connection has authenticated,
// answer NOAUTH each before, and add nothing; then AUTH in the same pipeline lets the next run in.
func TestRESPPipelinedAddsNeedAuth(t *testing.T) {
	t.Parallel()
	ts := runServer(t, func(cfg *config.Config) { withRESPPassword(t, cfg) })
	ctx := t.Context()
	anon := redis.NewClient(&redis.Options{Addr: ts.resp, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = anon.Close() })
	conn := anon.Conn()
	defer func() { _ = conn.Close() }()
	pipe := conn.Pipeline()
	var before, after []*redis.BoolCmd
	for i := range 100 {
		before = append(before, pipe.BFAdd(ctx, "guarded", fmt.Sprintf("v-%d", i)))
	}
	pipe.Do(ctx, "AUTH", testRESPPassword)
	for i := range 100 {
		after = append(after, pipe.BFAdd(ctx, "guarded", fmt.Sprintf("w-%d", i)))
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range before {
		wantRedisError(t, fmt.Sprintf("pipelined BF.ADD %d before AUTH", i), cmd.Err(), "NOAUTH Authentication required.")
	}
	for i, cmd := range after {
		expect(t, fmt.Sprintf("pipelined BF.ADD %d after AUTH", i), true)(cmd.Result())
	}
	expect(t, "a value sent before AUTH", false)(conn.BFExists(ctx, "guarded", "v-0").Result())
}
