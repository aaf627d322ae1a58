package resp_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// With a password, a connection answers NOAUTH to everything but AUTH, HELLO and QUIT until it
// authenticates; a wrong password answers WRONGPASS, and is counted.
func TestRESPAuth(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(cfg *config.Config) { dataplane.WithRESPPassword(t, cfg) })
	ctx := t.Context()

	// Without a password go-redis's HELLO 3 is refused (NOAUTH), it goes on in RESP2, and its
	// commands answer NOAUTH.
	anon := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1, PoolSize: 4})
	t.Cleanup(func() { _ = anon.Close() })
	for _, args := range [][]any{{"PING"}, {"BF.ADD", "k", "a"}, {"BF.EXISTS", "k", "a"}, {"KEYS", "*"}, {"SELECT", "0"}, {"CLIENT", "GETNAME"}, {"ECHO", "x"}} {
		dataplane.WantRedisError(t, "unauthenticated "+args[0].(string), anon.Do(ctx, args...).Err(), "NOAUTH Authentication required.")
	}
	// Redis checks that a command exists and its arity before authentication.
	dataplane.WantRedisError(t, "unauthenticated unknown command", anon.Do(ctx, "NOSUCH").Err(), "ERR unknown command 'NOSUCH', with args beginning with: ")
	dataplane.WantRedisError(t, "unauthenticated HELLO 2", anon.Do(ctx, "HELLO", "2").Err(),
		"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")

	conn := anon.Conn()
	defer func() { _ = conn.Close() }()
	dataplane.WantRedisError(t, "AUTH wrong", conn.Do(ctx, "AUTH", "not-the-password").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	dataplane.WantRedisError(t, "AUTH default wrong", conn.Do(ctx, "AUTH", "default", "not-the-password").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	dataplane.WantRedisError(t, "AUTH another user", conn.Do(ctx, "AUTH", "bob", dataplane.RESPPassword).Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	dataplane.WantRedisError(t, "AUTH a b c", conn.Do(ctx, "AUTH", "a", "b", "c").Err(), "ERR syntax error")
	dataplane.WantRedisError(t, "PING after a failed AUTH", conn.Ping(ctx).Err(), "NOAUTH Authentication required.")
	dataplane.Expect(t, "AUTH password", "OK")(conn.Do(ctx, "AUTH", dataplane.RESPPassword).Text())
	dataplane.Expect(t, "PING once authenticated", "PONG")(conn.Ping(ctx).Result())
	dataplane.Expect(t, "BF.ADD once authenticated", true)(conn.BFAdd(ctx, "k", "a").Result())
	// A failed AUTH leaves an authenticated connection so, as Redis's does.
	dataplane.WantRedisError(t, "AUTH wrong when authenticated", conn.Do(ctx, "AUTH", "nope-nope").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
	dataplane.Expect(t, "BF.EXISTS after a failed AUTH", true)(conn.BFExists(ctx, "k", "a").Result())

	// AUTH default password, on another connection: authentication is the connection's.
	other := anon.Conn()
	defer func() { _ = other.Close() }()
	dataplane.WantRedisError(t, "another connection", other.Ping(ctx).Err(), "NOAUTH Authentication required.")
	dataplane.Expect(t, "AUTH default password", "OK")(other.Do(ctx, "AUTH", "default", dataplane.RESPPassword).Text())
	dataplane.Expect(t, "BF.EXISTS after AUTH default", true)(other.BFExists(ctx, "k", "a").Result())

	// QUIT needs no authentication.
	q := anon.Conn()
	defer func() { _ = q.Close() }()
	dataplane.Expect(t, "QUIT unauthenticated", "OK")(q.Do(ctx, "QUIT").Text())

	// go-redis with the password authenticates with its HELLO 3 AUTH, and speaks RESP3.
	rdb := redis.NewClient(&redis.Options{Addr: ts.RESP, Password: dataplane.RESPPassword, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	dataplane.Expect(t, "BF.EXISTS with go-redis's Password", true)(rdb.BFExists(ctx, "k", "a").Result())
	// And a wrong one fails every command with WRONGPASS.
	bad := redis.NewClient(&redis.Options{Addr: ts.RESP, Password: "not-the-password", MaxRetries: -1})
	t.Cleanup(func() { _ = bad.Close() })
	dataplane.WantRedisError(t, "go-redis with a wrong password", bad.Ping(ctx).Err(), "WRONGPASS invalid username-password pair or user is disabled.")

	fs := dataplane.Scrape(t, &http.Client{}, ts.Ops, "")
	if n := dataplane.Value(t, fs, "bloomery_resp_auth_failures_total"); n < 5 {
		t.Errorf("bloomery_resp_auth_failures_total = %v, want at least the 5 refusals", n)
	}
	if n := dataplane.Value(t, fs, "bloomery_resp_command_errors_total", "command", "ping"); n < 3 {
		t.Errorf(`bloomery_resp_command_errors_total{command="ping"} = %v, want the NOAUTH answers counted`, n)
	}
}

// HELLO 2 AUTH default password authenticates and answers the server's map, and HELLO 3 AUTH in
// RESP3; with a wrong password it answers WRONGPASS and leaves the options unapplied.
func TestRESPHelloAuth(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(cfg *config.Config) { dataplane.WithRESPPassword(t, cfg) })
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	conn := rdb.Conn()
	defer func() { _ = conn.Close() }()

	dataplane.WantRedisError(t, "HELLO 2 AUTH wrong", conn.Do(ctx, "HELLO", "2", "AUTH", "default", "wrong-password", "SETNAME", "early").Err(),
		"WRONGPASS invalid username-password pair or user is disabled.")
	dataplane.WantRedisError(t, "HELLO 2 AUTH without a password", conn.Do(ctx, "HELLO", "2", "AUTH", "default").Err(), "ERR Syntax error in HELLO option 'AUTH'")
	dataplane.WantRedisError(t, "HELLO 4 AUTH", conn.Do(ctx, "HELLO", "4", "AUTH", "default", dataplane.RESPPassword).Err(), "NOPROTO unsupported protocol version")
	dataplane.WantRedisError(t, "BF.ADD after the refused HELLOs", conn.BFAdd(ctx, "h", "x").Err(), "NOAUTH Authentication required.")
	hello, err := conn.Do(ctx, "HELLO", "2", "AUTH", "default", dataplane.RESPPassword, "SETNAME", "named").Slice()
	if err != nil || len(hello) != 14 || hello[0] != "server" {
		t.Fatalf("HELLO 2 AUTH default password = %v, %v; want the server's map", hello, err)
	}
	// HELLO 3 AUTH authenticates as well, and answers RESP3's map.
	other := rdb.Conn()
	defer func() { _ = other.Close() }()
	m, err := other.Do(ctx, "HELLO", "3", "AUTH", "default", dataplane.RESPPassword).Result()
	if hm, ok := m.(map[any]any); err != nil || !ok || hm["proto"] != int64(3) || hm["server"] != "bloomery" {
		t.Errorf("HELLO 3 AUTH default password = %#v, %v; want RESP3's map of the server, proto 3", m, err)
	}
	dataplane.Expect(t, "CLIENT GETNAME after HELLO AUTH SETNAME", "named")(conn.ClientGetName(ctx).Result())
	dataplane.Expect(t, "BF.ADD after HELLO AUTH", true)(conn.BFAdd(ctx, "h", "x").Result())
}

// Without a password, AUTH password answers Redis's hint that none is configured, and AUTH
// default anything succeeds, as Redis's default user without a password does.
func TestRESPAuthWithoutPassword(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	dataplane.WantRedisError(t, "AUTH without a password configured", rdb.Do(ctx, "AUTH", "whatever").Err(),
		"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	dataplane.Expect(t, "AUTH default x", "OK")(rdb.Do(ctx, "AUTH", "default", "x").Text())
	dataplane.WantRedisError(t, "AUTH bob x", rdb.Do(ctx, "AUTH", "bob", "x").Err(), "WRONGPASS invalid username-password pair or user is disabled.")
}

// Each command has its series: count, errors and latency by its lower-case name, every unknown
// name as other; the connections are counted as they open and close.
func TestRESPMetricsPerCommand(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1, PoolSize: 2})
	for range 3 {
		if err := rdb.BFAdd(ctx, "m", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = rdb.Do(ctx, "bf.exists", "m").Err() // wrong arity: an error of bf.exists
	_ = rdb.Do(ctx, "NoSuchThing", "a").Err()
	_ = rdb.Do(ctx, "another-unknown").Err()

	fs := dataplane.Scrape(t, &http.Client{}, ts.Ops, "")
	dataplane.WantValue(t, fs, 3, "bloomery_resp_commands_total", "command", "bf.add")
	dataplane.WantValue(t, fs, 0, "bloomery_resp_command_errors_total", "command", "bf.add")
	dataplane.WantValue(t, fs, 3, "bloomery_resp_command_duration_seconds", "command", "bf.add")
	dataplane.WantValue(t, fs, 1, "bloomery_resp_command_errors_total", "command", "bf.exists")
	dataplane.WantValue(t, fs, 2, "bloomery_resp_commands_total", "command", "other")
	dataplane.WantValue(t, fs, 2, "bloomery_resp_command_errors_total", "command", "other")
	for _, label := range fs.LabelValues("bloomery_resp_commands_total", "command") {
		if label != strings.ToLower(label) || strings.Contains(label, "thing") || strings.Contains(label, "unknown") {
			t.Errorf("command label %q: want the known names in lower case and other", label)
		}
	}
	opened := dataplane.Value(t, fs, "bloomery_resp_connections_total")
	if open := dataplane.Value(t, fs, "bloomery_resp_connections"); open < 1 || opened < open {
		t.Errorf("bloomery_resp_connections = %v, _total = %v; want at least the client's connection open", open, opened)
	}
	_ = rdb.Close()
	await.True(t, 10*time.Second, "the connections closed", func() bool {
		return dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_resp_connections") == 0
	})
}

// Pipelined BF.ADDs, which are answered as one batch once the connection has authenticated,
// answer NOAUTH each before, and add nothing; then AUTH in the same pipeline lets the next run in.
func TestRESPPipelinedAddsNeedAuth(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(cfg *config.Config) { dataplane.WithRESPPassword(t, cfg) })
	ctx := t.Context()
	anon := redis.NewClient(&redis.Options{Addr: ts.RESP, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = anon.Close() })
	conn := anon.Conn()
	defer func() { _ = conn.Close() }()
	pipe := conn.Pipeline()
	var before, after []*redis.BoolCmd
	for i := range 100 {
		before = append(before, pipe.BFAdd(ctx, "guarded", fmt.Sprintf("v-%d", i)))
	}
	pipe.Do(ctx, "AUTH", dataplane.RESPPassword)
	for i := range 100 {
		after = append(after, pipe.BFAdd(ctx, "guarded", fmt.Sprintf("w-%d", i)))
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range before {
		dataplane.WantRedisError(t, fmt.Sprintf("pipelined BF.ADD %d before AUTH", i), cmd.Err(), "NOAUTH Authentication required.")
	}
	for i, cmd := range after {
		dataplane.Expect(t, fmt.Sprintf("pipelined BF.ADD %d after AUTH", i), true)(cmd.Result())
	}
	dataplane.Expect(t, "a value sent before AUTH", false)(conn.BFExists(ctx, "guarded", "v-0").Result())
}
