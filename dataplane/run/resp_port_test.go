package run_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/internal/testca"
	"github.com/bloomery/bloomery/test/dataplane"
)

// While the filters are recovered, filter commands answer LOADING, as Redis does while it loads;
// the connection commands answer.
func TestRESPLoadingWhileRecovering(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillAndStop(t, dir)
	ts, release := startHeldInRecovery(t, dir)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	dataplane.Expect(t, "PING while recovering", "PONG")(rdb.Ping(ctx).Result())
	for _, args := range [][]any{{"BF.EXISTS", "kept", "value"}, {"BF.ADD", "kept", "v"}, {"KEYS", "*"}} {
		if err := rdb.Do(ctx, args...).Err(); err == nil || err.Error() != "LOADING Bloomery is loading the dataset in memory" {
			t.Errorf("%v while recovering = %v, want LOADING", args, err)
		}
	}
	release()
	dataplane.WaitUntilReady(t, ts)
	dataplane.Expect(t, "BF.EXISTS once recovered", true)(rdb.BFExists(ctx, "kept", "value").Result())
}

// Shutdown closes the RESP connections before the final snapshot, and what they added is in it.
func TestRESPShutdownClosesConnections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts, stop := dataplane.Run(t, dataplane.New(t, func(cfg *config.Config) { cfg.DataDir = dir }))
	dataplane.WaitUntilReady(t, ts)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	if err := rdb.BFAdd(ctx, "durable", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rdb.Ping(shortCtx).Err(); err == nil {
		t.Error("PING answered after shutdown")
	}

	ts, stop = dataplane.Run(t, dataplane.New(t, func(cfg *config.Config) { cfg.DataDir = dir }))
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	dataplane.WaitUntilReady(t, ts)
	dataplane.Expect(t, "BF.EXISTS after a restart", true)(dataplane.RedisClient(t, ts).BFExists(ctx, "durable", "x").Result())
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
	srv := dataplane.New(t, func(cfg *config.Config) {
		cfg.InMemory = true
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = files.Cert, files.Key, files.CA
		dataplane.WithToken(t, cfg)
		dataplane.WithRESPPassword(t, cfg)
	})
	ts, stop := dataplane.Run(t, srv)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	await.True(t, 30*time.Second, "readiness", func() bool {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.Ops+"/readyz", nil)
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
		Addr: ts.RESP, Password: dataplane.RESPPassword, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "pod-0", MinVersion: tls.VersionTLS12},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	dataplane.Expect(t, "BF.ADD over TLS", true)(rdb.BFAdd(ctx, "secure", "x").Result())
	dataplane.Expect(t, "BF.EXISTS over TLS", true)(rdb.BFExists(ctx, "secure", "x").Result())

	// A client that does not trust the CA fails the handshake.
	untrusting := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "pod-0"}})
	t.Cleanup(func() { _ = untrusting.Close() })
	if err := untrusting.Ping(ctx).Err(); err == nil || !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("PING from a client without the CA = %v, want a certificate verification error", err)
	}
	// Plain RESP on the TLS port is not served.
	shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	plain := redis.NewClient(&redis.Options{Addr: ts.RESP, Password: dataplane.RESPPassword, MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	if err := plain.Ping(shortCtx).Err(); err == nil {
		t.Error("PING in plain text on the TLS port answered")
	}
}

// A name in respDisabledCommands that is no command of the port stops the data plane at start:
// a misspelt name would leave on what the operator meant to turn off.
func TestRESPDisabledCommandsRefused(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.InMemory, cfg.RESPPort, cfg.RESPDisabledCommands = true, 6379, []string{"FLUSHALL", "flushal"}
	_, err := run.New(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `respDisabledCommands: "flushal" is not a command`) {
		t.Errorf("New = %v, want the error naming respDisabledCommands and \"flushal\"", err)
	}
}
