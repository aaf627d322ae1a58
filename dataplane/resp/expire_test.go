package resp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// doInt runs a command and expects an integer reply.
func doInt(t *testing.T, rdb *redis.Client, want int64, args ...any) {
	t.Helper()
	got, err := rdb.Do(context.Background(), args...).Int64()
	if err != nil || got != want {
		t.Errorf("%v = %d, %v; want %d", args, got, err, want)
	}
}

// doError runs a command and expects an error reply of exactly want.
func doError(t *testing.T, rdb *redis.Client, want string, args ...any) {
	t.Helper()
	err := rdb.Do(context.Background(), args...).Err()
	if err == nil || err.Error() != want {
		t.Errorf("%v = %v; want the error %q", args, err, want)
	}
}

// EXPIRE, PEXPIRE, TTL, PTTL and PERSIST answer as Redis 7 does, on the test's clock, and the
// HTTP API shows the same expiry.
func TestRESPExpiry(t *testing.T) {
	t.Parallel()
	tm := dataplane.NewTime()
	ts := dataplane.StartAt(t, tm, nil) // filters expire 24 h after their creation by default
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	for _, name := range []string{"f", "g"} {
		if err := rdb.BFReserve(ctx, name, 0.01, 100).Err(); err != nil {
			t.Fatal(err)
		}
	}

	doInt(t, rdb, 86400, "TTL", "f")
	doInt(t, rdb, 86400_000, "PTTL", "f")
	doInt(t, rdb, -2, "TTL", "missing")
	doInt(t, rdb, -2, "PTTL", "missing")
	doInt(t, rdb, 0, "EXPIRE", "missing", 10)
	doInt(t, rdb, 0, "PERSIST", "missing")

	// go-redis's own methods.
	dataplane.Expect(t, "EXPIRE f 100", true)(rdb.Expire(ctx, "f", 100*time.Second).Result())
	dataplane.Expect(t, "TTL f", 100*time.Second)(rdb.TTL(ctx, "f").Result())
	dataplane.Expect(t, "PEXPIRE f 100500", true)(rdb.PExpire(ctx, "f", 100500*time.Millisecond).Result())
	dataplane.Expect(t, "PTTL f", 100500*time.Millisecond)(rdb.PTTL(ctx, "f").Result())
	deadline := tm.Clock.Now().Add(100500 * time.Millisecond)
	if got := dataplane.Get(t, ts, "f"); got.Expiration != deadline.UTC().Format(wire.TimeFormat) {
		t.Errorf("GET f after PEXPIRE: expiration %q, want %v", got.Expiration, deadline)
	}

	// TTL rounds to the nearest second, half up, as Redis does.
	tm.Clock.Advance(1000 * time.Millisecond) // 99.5 s left
	doInt(t, rdb, 100, "TTL", "f")
	doInt(t, rdb, 99500, "PTTL", "f")
	tm.Clock.Advance(time.Millisecond) // 99.499 s left
	doInt(t, rdb, 99, "TTL", "f")

	dataplane.Expect(t, "PERSIST f", true)(rdb.Persist(ctx, "f").Result())
	dataplane.Expect(t, "TTL f after PERSIST", time.Duration(-1))(rdb.TTL(ctx, "f").Result())
	doInt(t, rdb, -1, "PTTL", "f")
	dataplane.Expect(t, "PERSIST f again", false)(rdb.Persist(ctx, "f").Result())
	if got := dataplane.Get(t, ts, "f"); got.Expiration != "" {
		t.Errorf("GET f after PERSIST: expiration %q, want none", got.Expiration)
	}

	// NX, XX, GT, LT, in any case; a filter without expiry counts as an infinite TTL.
	doInt(t, rdb, 0, "EXPIRE", "f", 50, "XX")
	doInt(t, rdb, 0, "EXPIRE", "f", 50, "GT")
	doInt(t, rdb, 1, "EXPIRE", "f", 50, "nx")
	doInt(t, rdb, 0, "EXPIRE", "f", 60, "NX")
	doInt(t, rdb, 1, "EXPIRE", "f", 70, "xx")
	doInt(t, rdb, 0, "EXPIRE", "f", 60, "GT")
	doInt(t, rdb, 0, "EXPIRE", "f", 70, "GT") // not greater
	doInt(t, rdb, 1, "EXPIRE", "f", 80, "GT", "XX")
	doInt(t, rdb, 0, "EXPIRE", "f", 90, "LT")
	doInt(t, rdb, 1, "PEXPIRE", "f", 40000, "Lt")
	doInt(t, rdb, 40, "TTL", "f")
	dataplane.Expect(t, "PERSIST g", true)(rdb.Persist(ctx, "g").Result())
	doInt(t, rdb, 1, "EXPIRE", "g", 30, "LT")
	doInt(t, rdb, 30, "TTL", "g")
	dataplane.Expect(t, "EXPIRE NX of go-redis", false)(rdb.ExpireNX(ctx, "g", time.Minute).Result())
	dataplane.Expect(t, "EXPIRE GT of go-redis", true)(rdb.ExpireGT(ctx, "g", time.Minute).Result())

	// Errors, in Redis's order: options, then the integer, then its range, then the key.
	doError(t, rdb, "ERR NX and XX, GT or LT options at the same time are not compatible", "EXPIRE", "f", 10, "NX", "XX")
	doError(t, rdb, "ERR NX and XX, GT or LT options at the same time are not compatible", "EXPIRE", "f", 10, "gt", "nx")
	doError(t, rdb, "ERR NX and XX, GT or LT options at the same time are not compatible", "PEXPIRE", "f", 10, "NX", "LT")
	doError(t, rdb, "ERR GT and LT options at the same time are not compatible", "EXPIRE", "f", 10, "GT", "LT")
	doError(t, rdb, "ERR Unsupported option FOO", "EXPIRE", "f", 10, "FOO")
	doError(t, rdb, "ERR Unsupported option bar", "EXPIRE", "missing", "abc", "bar")
	doError(t, rdb, "ERR value is not an integer or out of range", "EXPIRE", "f", "abc")
	doError(t, rdb, "ERR value is not an integer or out of range", "PEXPIRE", "missing", "1.5")
	doError(t, rdb, "ERR value is not an integer or out of range", "EXPIRE", "f", "99999999999999999999")
	doError(t, rdb, "ERR invalid expire time in 'expire' command", "EXPIRE", "f", "9223372036854776")
	doError(t, rdb, "ERR invalid expire time in 'expire' command", "EXPIRE", "missing", "-9223372036854776")
	doError(t, rdb, "ERR invalid expire time in 'expire' command", "EXPIRE", "f", "9223372036854775")
	doError(t, rdb, "ERR invalid expire time in 'pexpire' command", "PEXPIRE", "f", "9223372036854775807")
	doError(t, rdb, "ERR invalid expire time in 'pexpire' command", "PEXPIRE", "f", "9000000000000000") // Redis takes it: past the year 2262
	doError(t, rdb, "ERR wrong number of arguments for 'expire' command", "EXPIRE", "f")
	doError(t, rdb, "ERR wrong number of arguments for 'ttl' command", "TTL", "f", "g")
	doError(t, rdb, "ERR wrong number of arguments for 'pttl' command", "PTTL")
	doError(t, rdb, "ERR wrong number of arguments for 'persist' command", "PERSIST")
	doInt(t, rdb, 40, "TTL", "f") // no error changed anything

	// A time in the past deletes the filter, as Redis deletes the key, and says 1.
	doInt(t, rdb, 1, "EXPIRE", "g", -1)
	doInt(t, rdb, -2, "TTL", "g")
	doInt(t, rdb, 0, "EXISTS", "g")
	if _, err := ts.Client.Get(ctx, "g"); !client.IsNotFound(err) {
		t.Errorf("GET of a filter given a time in the past: %v, want not found", err)
	}
	if err := rdb.BFAdd(ctx, "zero", "x").Err(); err != nil {
		t.Fatal(err)
	}
	doInt(t, rdb, 1, "PEXPIRE", "zero", 0)
	doInt(t, rdb, 0, "EXISTS", "zero")
}

// A filter whose time to live runs out is gone at once, for every command and for the HTTP API,
// and the purge removes it; one made to live forever outlives its create options.
func TestRESPExpiryRunsOut(t *testing.T) {
	t.Parallel()
	const purgeInterval = 10 * time.Second
	tm := dataplane.NewTime()
	ts := dataplane.StartAt(t, tm, func(cfg *config.Config) {
		cfg.PurgeInterval = purgeInterval
		cfg.DefaultValidAfterCreate = 20 * time.Second
	})
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	for _, name := range []string{"short", "kept"} {
		if err := rdb.BFAdd(ctx, name, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	dataplane.Create(t, ts, "sliding", client.CreateOptions{ExpectedInsertions: new(uint64(100)), FPP: new(0.01), ValidPeriodAfterAccess: new(int64(30))})
	doInt(t, rdb, 1, "EXPIRE", "short", 5)
	doInt(t, rdb, 1, "PERSIST", "kept")

	// Sliding expiry: TTL is what is left since the last access, until EXPIRE replaces it.
	tm.Clock.Advance(time.Second)
	doInt(t, rdb, 29, "TTL", "sliding")
	dataplane.Expect(t, "BF.EXISTS sliding", false)(rdb.BFExists(ctx, "sliding", "x").Result()) // an access
	doInt(t, rdb, 30, "TTL", "sliding")
	doInt(t, rdb, 1, "EXPIRE", "sliding", 3)
	tm.Clock.Advance(time.Second)
	dataplane.Expect(t, "BF.EXISTS sliding", false)(rdb.BFExists(ctx, "sliding", "x").Result())
	doInt(t, rdb, 2, "TTL", "sliding")

	tm.Clock.Advance(3 * time.Second) // short's 5 s are over, and sliding's 3
	for _, name := range []string{"short", "sliding"} {
		doInt(t, rdb, -2, "TTL", name)
		doInt(t, rdb, 0, "EXISTS", name)
		doInt(t, rdb, 0, "BF.CARD", name)
		dataplane.Expect(t, "TYPE "+name, "none")(rdb.Type(ctx, name).Result())
		if _, err := ts.Client.Get(ctx, name); !client.IsNotFound(err) {
			t.Errorf("GET %s after its TTL ran out: %v, want not found", name, err)
		}
	}
	tm.Clock.Advance(time.Minute) // kept's create options would have expired it
	tm.Ticker.Tick(t, purgeInterval)
	if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || !slices.Equal(keys, []string{"kept"}) {
		t.Errorf("KEYS * after the purge = %v, %v; want [kept]", keys, err)
	}
	if f, err := ts.Client.Get(ctx, "kept"); err != nil || f.Expiration != "" {
		t.Errorf("GET kept = %+v, %v; want a filter that never expires", f, err)
	}
	resp := ts.Send(t, http.MethodGet, "/v1/bloomfilter/short", "")
	if resp.Status != http.StatusNotFound {
		t.Errorf("GET short after the purge: %d, want 404", resp.Status)
	}
}

// A change of expiry is kept by the log and by the final snapshot of a graceful stop.
func TestRESPExpirySurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tm := dataplane.NewTime()
	start := func() (*dataplane.Server, func() error) {
		ts, stop := dataplane.Run(t, dataplane.NewAt(t, tm, func(cfg *config.Config) { cfg.DataDir = dir }))
		dataplane.WaitUntilReady(t, ts)
		return ts, stop
	}
	ts, stop := start()
	rdb := dataplane.RedisClient(t, ts)
	for _, name := range []string{"deadline", "forever"} {
		if err := rdb.BFAdd(t.Context(), name, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	doInt(t, rdb, 1, "EXPIRE", "deadline", 100)
	doInt(t, rdb, 1, "PERSIST", "forever")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ts, stop = start()
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	rdb = dataplane.RedisClient(t, ts)
	tm.Clock.Advance(25 * time.Hour) // past the default expiry after create
	doInt(t, rdb, -2, "TTL", "deadline")
	doInt(t, rdb, -1, "TTL", "forever")
}

// threePods runs three data planes that know each other, with anti-entropy at that interval (0:
// none), once all three are ready.
func threePods(t *testing.T, antiEntropy time.Duration) []*dataplane.Server {
	t.Helper()
	pods := make([]*dataplane.Server, 3)
	var members []wire.Member
	for i := range pods {
		pods[i] = dataplane.Start(t, func(cfg *config.Config) { cfg.AntiEntropyInterval = antiEntropy })
		members = append(members, wire.Member{Name: string(rune('a' + i)), URL: pods[i].Internal.URL})
	}
	for i, ts := range pods {
		if err := ts.Internal.Client.SetMembership(t.Context(), wire.Membership{Epoch: 1, Self: members[i].Name, Members: members}); err != nil {
			t.Fatal(err)
		}
	}
	// A pod that knows peers catches up from them before it takes a create.
	for _, ts := range pods {
		dataplane.WaitUntilReady(t, ts)
	}
	return pods
}

// expirations are the filter's expiration on every pod, as GET answers it ("" for never,
// "missing" when the pod lacks it).
func expirations(t *testing.T, pods []*dataplane.Server, name string) []string {
	t.Helper()
	out := make([]string, len(pods))
	for i, ts := range pods {
		f, err := ts.Client.Get(t.Context(), name)
		switch {
		case client.IsNotFound(err):
			out[i] = "missing"
		case err != nil:
			t.Fatalf("GET %s on pod %d: %v", name, i, err)
		default:
			out[i] = f.Expiration
		}
	}
	return out
}

func allEqual(s []string) bool {
	return !slices.Contains(s, "missing") && slices.Equal(s, []string{s[0], s[0], s[0]})
}

// reserveEverywhere makes the filter through pod 0 and waits until every pod holds it.
func reserveEverywhere(t *testing.T, pods []*dataplane.Server, name string) []*redis.Client {
	t.Helper()
	rdbs := make([]*redis.Client, len(pods))
	for i, ts := range pods {
		rdbs[i] = dataplane.RedisClient(t, ts)
	}
	if err := rdbs[0].BFReserve(t.Context(), name, 0.01, 100).Err(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the filter on every pod", func() bool {
		return allEqual(expirations(t, pods, name))
	})
	return rdbs
}

// On three pods, without anti-entropy, a change of expiry made on one is seen by TTL on the
// others, and changes made concurrently on two pods, which each applies in its own order, end
// the same on all three.
func TestRESPExpiryReplicates(t *testing.T) {
	t.Parallel()
	pods := threePods(t, 0)
	ctx := t.Context()
	rdbs := reserveEverywhere(t, pods, "f")

	doInt(t, rdbs[0], 1, "EXPIRE", "f", 1000)
	await.True(t, 10*time.Second, "TTL 1000 on every pod", func() bool {
		for _, rdb := range rdbs {
			if ttl, err := rdb.Do(ctx, "TTL", "f").Int64(); err != nil || ttl < 990 || ttl > 1000 {
				return false
			}
		}
		return true
	})
	doInt(t, rdbs[1], 1, "PERSIST", "f")
	await.True(t, 10*time.Second, "PERSIST on every pod", func() bool {
		for _, rdb := range rdbs {
			if ttl, err := rdb.Do(ctx, "TTL", "f").Int64(); err != nil || ttl != -1 {
				return false
			}
		}
		return true
	})

	// Concurrent changes through two pods: each applies its own first and the other's after,
	// and the newer stamp wins on both.
	for round := range 5 {
		done := make(chan error, 2)
		for i, seconds := range []int{2000 + round, 3000 + round} {
			go func() { done <- rdbs[i+1].Do(ctx, "EXPIRE", "f", seconds).Err() }()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		await.True(t, 10*time.Second, "one expiry on every pod", func() bool {
			return allEqual(expirations(t, pods, "f"))
		})
	}
}

// A change of expiry that only one pod received (a peer's write the others missed) reaches them
// through anti-entropy, which compares the overrides in the inventories.
func TestExpiryConvergesByAntiEntropy(t *testing.T) {
	t.Parallel()
	pods := threePods(t, time.Second)
	ctx := t.Context()
	reserveEverywhere(t, pods, "f")
	var inv wire.Inventory
	err := pods[2].Internal.Client.Call(ctx, http.MethodGet, wire.InventoryPath, "", nil, &inv)
	if err != nil {
		t.Fatal(err)
	}
	var generation int64
	for _, d := range inv.Filters {
		if d.Name == "f" {
			generation = d.Generation
		}
	}
	op := peer.Op{Kind: peer.OpExpire, Name: "f", Generation: generation,
		Expiry: &filter.Expiry{Mode: filter.ExpiryNever, Stamp: time.Now().UnixNano(), Origin: "elsewhere"}}
	body, err := json.Marshal(wire.ApplyRequest[peer.Op]{Ops: []peer.Op{op}})
	if err != nil {
		t.Fatal(err)
	}
	if r := pods[2].Internal.Send(t, http.MethodPost, wire.ApplyPath, string(body)); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "true") {
		t.Fatalf("apply on pod c: %d %s", r.Status, r.Body)
	}
	await.True(t, 20*time.Second, "anti-entropy to bring pod c's change to a and b", func() bool {
		got := expirations(t, pods, "f")
		return allEqual(got) && got[0] == ""
	})
}

// PUT and DELETE of a filter's expiration change its expiry over HTTP, as EXPIRE and PERSIST do
// over RESP: one set of filters, one expiry.
func TestRESTExpiration(t *testing.T) {
	t.Parallel()
	tm := dataplane.NewTime()
	ts := dataplane.StartAt(t, tm, nil)
	rdb := dataplane.RedisClient(t, ts)
	dataplane.Create(t, ts, "f", client.CreateOptions{})
	path := wire.FilterOpPath("f", wire.OpExpiration)

	deadline := tm.Clock.Now().Add(90 * time.Second).UTC().Format(wire.TimeFormat)
	r := ts.Send(t, http.MethodPut, path, `{"expiration": "`+deadline+`"}`)
	var f wire.Filter
	if err := json.Unmarshal(r.Body, &f); r.Status != http.StatusOK || err != nil || f.Expiration != deadline {
		t.Fatalf("PUT expiration = %d %s; want 200 and the filter expiring at %s", r.Status, r.Body, deadline)
	}
	doInt(t, rdb, 90, "TTL", "f")
	if got := dataplane.Get(t, ts, "f"); got.Expiration != deadline {
		t.Errorf("GET after PUT expiration: %q, want %q", got.Expiration, deadline)
	}

	for body, want := range map[string]string{
		`{"expiration": "` + tm.Clock.Now().UTC().Format(wire.TimeFormat) + `"}`: "is not in the future",
		`{"expiration": "tomorrow"}`:             "is not an RFC 3339 time",
		`{"expiration": "2300-01-01T00:00:00Z"}`: "the last time a filter can expire at",
		`{"expiration": 90}`:                     "expect string type",
		`{"expiry": "2030-01-01T00:00:00Z"}`:     "unknown parameter",
		`{}`:                                     "expiration",
	} {
		if msg := ts.Send(t, http.MethodPut, path, body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, want) {
			t.Errorf("PUT expiration %s: %q, want it to contain %q", body, msg, want)
		}
	}
	if r := ts.Send(t, http.MethodPut, wire.FilterOpPath("missing", wire.OpExpiration), `{"expiration": "`+deadline+`"}`); r.Status != http.StatusNotFound {
		t.Errorf("PUT expiration of a missing filter: %d, want 404", r.Status)
	}
	doInt(t, rdb, 90, "TTL", "f") // no refusal changed anything

	r = ts.Send(t, http.MethodDelete, path, "")
	f = wire.Filter{}
	if err := json.Unmarshal(r.Body, &f); r.Status != http.StatusOK || err != nil || f.Expiration != "" {
		t.Fatalf("DELETE expiration = %d %s; want 200 and a filter without expiration", r.Status, r.Body)
	}
	doInt(t, rdb, -1, "TTL", "f")
	tm.Clock.Advance(48 * time.Hour) // past the default expiry after create
	dataplane.Get(t, ts, "f")
}
