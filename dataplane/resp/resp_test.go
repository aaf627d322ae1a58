package resp_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// Every command answers as RedisBloom and Redis do, through go-redis's own methods.
func TestRESPCommands(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)

	// Connection.
	dataplane.Expect(t, "PING", "PONG")(rdb.Ping(ctx).Result())
	dataplane.Expect(t, "PING msg", "hi")(rdb.Do(ctx, "PING", "hi").Text())
	dataplane.Expect(t, "ECHO", "hello")(rdb.Echo(ctx, "hello").Result())
	dataplane.Expect(t, "SELECT 0", "OK")(rdb.Do(ctx, "SELECT", 0).Text())
	hello, err := rdb.Do(ctx, "HELLO", 2).Slice()
	if err != nil || len(hello) != 14 || hello[0] != "server" || hello[5] != int64(2) {
		t.Errorf("HELLO 2 = %v, %v; want RESP2's key-value array with proto 2", hello, err)
	}
	cmd, err := rdb.Do(ctx, "COMMAND").Slice()
	if err != nil || len(cmd) != 0 {
		t.Errorf("COMMAND = %v, %v; want an empty array", cmd, err)
	}
	conn := rdb.Conn()
	defer func() { _ = conn.Close() }()
	dataplane.Expect(t, "CLIENT SETNAME", true)(conn.ClientSetName(ctx, "tester").Result())
	dataplane.Expect(t, "CLIENT GETNAME", "tester")(conn.ClientGetName(ctx).Result())
	dataplane.Expect(t, "CLIENT SETINFO", "OK")(conn.Do(ctx, "CLIENT", "SETINFO", "LIB-NAME", "x").Text())

	// Bloom filters.
	dataplane.Expect(t, "BF.RESERVE", "OK")(rdb.BFReserve(ctx, "reserved", 0.01, 1000).Result())
	dataplane.Expect(t, "BF.ADD new", true)(rdb.BFAdd(ctx, "reserved", "a").Result())
	dataplane.Expect(t, "BF.ADD again", false)(rdb.BFAdd(ctx, "reserved", "a").Result())
	got, err := rdb.BFMAdd(ctx, "reserved", "a", "b", "b").Result()
	dataplane.WantBools(t, "BF.MADD", got, err, false, true, false)
	dataplane.Expect(t, "BF.EXISTS", true)(rdb.BFExists(ctx, "reserved", "b").Result())
	dataplane.Expect(t, "BF.EXISTS absent", false)(rdb.BFExists(ctx, "reserved", "zzz").Result())
	dataplane.Expect(t, "BF.EXISTS missing key", false)(rdb.BFExists(ctx, "missing", "a").Result())
	got, err = rdb.BFMExists(ctx, "reserved", "a", "zzz", "b").Result()
	dataplane.WantBools(t, "BF.MEXISTS", got, err, true, false, true)
	got, err = rdb.BFMExists(ctx, "missing", "a").Result()
	dataplane.WantBools(t, "BF.MEXISTS missing key", got, err, false)
	dataplane.Expect(t, "BF.CARD", int64(2))(rdb.BFCard(ctx, "reserved").Result())
	dataplane.Expect(t, "BF.CARD missing key", int64(0))(rdb.BFCard(ctx, "missing").Result())
	info, err := rdb.BFInfo(ctx, "reserved").Result()
	if err != nil || info.Capacity != 1000 || info.Filters != 1 || info.ItemsInserted != 2 || info.ExpansionRate != 2 || info.Size <= 0 {
		t.Errorf("BF.INFO = %+v, %v; want capacity 1000, 1 filter, 2 items, expansion 2", info, err)
	}
	capInfo, err := rdb.BFInfoCapacity(ctx, "reserved").Result()
	if err != nil || capInfo.Capacity != 1000 {
		t.Errorf("BF.INFO CAPACITY = %+v, %v; want 1000", capInfo, err)
	}

	// BF.ADD and BF.MADD create a missing filter with RedisBloom's defaults, as configured.
	dataplane.Expect(t, "BF.ADD creating", true)(rdb.BFAdd(ctx, "auto", "x").Result())
	info, err = rdb.BFInfo(ctx, "auto").Result()
	if err != nil || uint64(info.Capacity) != config.Default().RESPInitialSize || info.ItemsInserted != 1 {
		t.Errorf("BF.INFO of a filter BF.ADD created = %+v, %v; want the default capacity and 1 item", info, err)
	}
	got, err = rdb.BFMAdd(ctx, "auto2", "x", "y").Result()
	dataplane.WantBools(t, "BF.MADD creating", got, err, true, true)

	// BF.INSERT creates with its options, and NOCREATE refuses a missing key.
	got, err = rdb.BFInsert(ctx, "inserted", &redis.BFInsertOptions{Capacity: 50, Error: 0.001, Expansion: 4}, "p", "q").Result()
	dataplane.WantBools(t, "BF.INSERT", got, err, true, true)
	info, err = rdb.BFInfo(ctx, "inserted").Result()
	if err != nil || info.Capacity != 50 || info.ExpansionRate != 4 || info.ItemsInserted != 2 {
		t.Errorf("BF.INFO of an inserted filter = %+v, %v; want capacity 50, expansion 4, 2 items", info, err)
	}
	got, err = rdb.BFInsert(ctx, "inserted", &redis.BFInsertOptions{NoCreate: true}, "p", "r").Result()
	dataplane.WantBools(t, "BF.INSERT NOCREATE existing", got, err, false, true)
	if err := rdb.BFInsert(ctx, "nowhere", &redis.BFInsertOptions{NoCreate: true}, "p").Err(); err == nil || err.Error() != "ERR not found" {
		t.Errorf("BF.INSERT NOCREATE missing = %v, want ERR not found", err)
	}
	if rdb.Exists(ctx, "nowhere").Val() != 0 {
		t.Error("BF.INSERT NOCREATE created its filter")
	}

	// Key space.
	dataplane.Expect(t, "EXISTS", int64(3))(rdb.Exists(ctx, "reserved", "missing", "auto", "reserved").Result())
	dataplane.Expect(t, "TYPE filter", "MBbloom--")(rdb.Type(ctx, "reserved").Result())
	dataplane.Expect(t, "TYPE missing", "none")(rdb.Type(ctx, "missing").Result())
	keys, err := rdb.Keys(ctx, "auto*").Result()
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"auto", "auto2"}) {
		t.Errorf("KEYS auto* = %v, %v; want [auto auto2]", keys, err)
	}
	dataplane.Expect(t, "DEL", int64(2))(rdb.Del(ctx, "auto", "auto2", "missing").Result())
	dataplane.Expect(t, "EXISTS after DEL", int64(0))(rdb.Exists(ctx, "auto").Result())
	if r := ts.Send(t, http.MethodGet, "/v1/bloomfilter/auto", ""); r.Status != http.StatusNotFound {
		t.Errorf("GET of a filter DEL deleted = %d, want 404", r.Status)
	}

	// QUIT answers OK and closes the connection.
	q := dataplane.RedisClient(t, ts).Conn()
	defer func() { _ = q.Close() }()
	dataplane.Expect(t, "QUIT", "OK")(q.Do(ctx, "QUIT").Text())
	if err := q.Ping(ctx).Err(); err == nil {
		t.Error("PING after QUIT answered")
	}
}

// Bad input answers Redis's and RedisBloom's error texts, and applies nothing.
func TestRESPErrors(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	if err := rdb.BFReserve(ctx, "exists", 0.01, 100).Err(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []any
		want string
	}{
		{[]any{"NOSUCH", "a", "b"}, "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' "},
		{[]any{"nosuch"}, "ERR unknown command 'nosuch', with args beginning with: "},
		{[]any{"BF.ADD", "k"}, "ERR wrong number of arguments for 'bf.add' command"},
		{[]any{"bf.exists", "k", "a", "b"}, "ERR wrong number of arguments for 'bf.exists' command"},
		{[]any{"BF.MADD", "k"}, "ERR wrong number of arguments for 'bf.madd' command"},
		{[]any{"BF.RESERVE", "k", "0.01"}, "ERR wrong number of arguments for 'bf.reserve' command"},
		{[]any{"BF.RESERVE", "k", "0.01", "many"}, "ERR bad capacity"},
		{[]any{"BF.RESERVE", "k", "0.01", "0"}, "ERR (capacity should be larger than 0)"},
		{[]any{"BF.RESERVE", "k", "lots", "100"}, "ERR bad error rate"},
		{[]any{"BF.RESERVE", "k", "1", "100"}, "ERR (0 < error rate range < 1) "},
		{[]any{"BF.RESERVE", "k", "0", "100"}, "ERR (0 < error rate range < 1) "},
		{[]any{"BF.RESERVE", "k", "nan", "100"}, "ERR (0 < error rate range < 1) "},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "EXPANSION"}, "ERR no expansion"},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "EXPANSION", "x"}, "ERR bad expansion"},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "EXPANSION", "0"}, "ERR bad expansion"},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "EXPANSION", "32769"}, "ERR bad expansion"},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "NONSCALING", "EXPANSION", "2"}, "Nonscaling filters cannot expand"},
		{[]any{"BF.RESERVE", "k", "0.01", "100", "FAST"}, "ERR unknown argument received"},
		{[]any{"BF.RESERVE", "exists", "0.01", "100"}, "ERR item exists"},
		{[]any{"BF.INSERT", "k", "CAPACITY", "x", "ITEMS", "a"}, "Bad capacity"},
		{[]any{"BF.INSERT", "k", "ERROR", "2", "ITEMS", "a"}, "Bad argument received"},
		{[]any{"BF.INSERT", "k", "ERROR", "big", "ITEMS", "a"}, "Bad error rate"},
		{[]any{"BF.INSERT", "k", "CAPACITY", "0", "ITEMS", "a"}, "Bad argument received"},
		{[]any{"BF.INSERT", "k", "EXPANSION", "0", "ITEMS", "a"}, "Bad argument received"},
		{[]any{"BF.INSERT", "k", "EXPANSION", "32769", "ITEMS", "a"}, "Bad argument received"},
		{[]any{"BF.INSERT", "k", "EXPANSION", "big"}, "Bad expansion"},
		{[]any{"BF.INSERT", "k", "EXPANSION", "0"}, "ERR wrong number of arguments for 'bf.insert' command"},
		{[]any{"BF.INSERT", "k", "FAST", "ITEMS", "a"}, "Unknown argument received"},
		{[]any{"BF.INSERT", "k", "CAPACITY", "10", "ITEMS"}, "ERR wrong number of arguments for 'bf.insert' command"},
		{[]any{"BF.INSERT", "k", "NOCREATE", "ITEMS", "a"}, "ERR not found"},
		{[]any{"BF.INFO", "k"}, "ERR not found"},
		{[]any{"BF.INFO", "exists", "COLOUR"}, "Invalid information value"},
		{[]any{"BF.DEBUG", "k"}, "ERR not found"},
		{[]any{"BF.DEBUG", "k", "x"}, "ERR wrong number of arguments for 'bf.debug' command"},
		{[]any{"BF.ADD", "bad name", "a"}, `ERR invalid filter name: "bad name" may only contain letters, digits, '.', '_', ':' and '-'`},
		{[]any{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]any{"SELECT", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"HELLO", "4"}, "NOPROTO unsupported protocol version"},
		{[]any{"CLIENT", "KILL"}, "ERR unknown subcommand 'KILL'. Try CLIENT HELP."},
		{[]any{"SCAN", "x"}, "ERR invalid cursor"},
	}
	errorCases := len(cases)
	for _, tt := range cases {
		err := rdb.Do(ctx, tt.args...).Err()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%v = %v, want %q", tt.args, err, tt.want)
		}
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || !slices.Equal(keys, []string{"exists"}) {
		t.Errorf("filters after the errors: %v, %v; want [exists] alone", keys, err)
	}
	if n := rdb.BFCard(ctx, "exists").Val(); n != 0 {
		t.Errorf("BF.CARD exists = %d after errors, want 0", n)
	}
	fs := dataplane.Scrape(t, &http.Client{}, ts.Ops, "")
	if n := dataplane.Sum(fs, "bloomery_resp_command_errors_total"); n < float64(errorCases) {
		t.Errorf("bloomery_resp_command_errors_total = %v, want at least the %d errors answered", n, errorCases)
	}
	if n := dataplane.Sum(fs, "bloomery_resp_commands_total"); n <= dataplane.Sum(fs, "bloomery_resp_command_errors_total") {
		t.Errorf("bloomery_resp_commands_total = %v, want more than the errors", n)
	}
}

// A NONSCALING filter refuses new items once it holds its capacity, as RedisBloom's does: BF.ADD
// answers the error, BF.MADD answers it in place of the first item that did not fit and adds
// nothing after it. Items already present still answer 0. Both protocols answer so, with 1 and 0
// as RESP3's booleans.
func TestRESPNonScalingFull(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	for _, proto := range []int{2, 3} {
		rdb := dataplane.RedisClientProtocol(t, ts, proto)
		name := fmt.Sprintf("small%d", proto)
		if err := rdb.BFReserveNonScaling(ctx, name, 0.01, 3).Err(); err != nil {
			t.Fatal(err)
		}
		var one any = int64(1)
		if proto == 3 {
			one = true
		}
		res, err := rdb.Do(ctx, "BF.MADD", name, "a", "b", "c", "d", "e").Slice()
		if err != nil || len(res) != 4 || res[0] != one || res[2] != one {
			t.Fatalf("RESP%d: BF.MADD past the capacity = %v, %v; want 1 1 1 and an error", proto, res, err)
		}
		if e, ok := res[3].(error); !ok || e.Error() != "ERR non scaling filter is full" {
			t.Errorf("RESP%d: BF.MADD's fourth answer = %v, want ERR non scaling filter is full", proto, res[3])
		}
		if err := rdb.BFAdd(ctx, name, "f").Err(); err == nil || err.Error() != "ERR non scaling filter is full" {
			t.Errorf("RESP%d: BF.ADD to a full filter = %v, want ERR non scaling filter is full", proto, err)
		}
		dataplane.Expect(t, "BF.ADD of an item present", false)(rdb.BFAdd(ctx, name, "a").Result())
		dataplane.Expect(t, "BF.CARD of the full filter", int64(3))(rdb.BFCard(ctx, name).Result())
		var expansion any
		if proto == 2 {
			expansion, err = rdb.Do(ctx, "BF.INFO", name, "EXPANSION").Slice()
			if want := []any{nil}; err != nil || !reflect.DeepEqual(expansion, want) {
				t.Errorf("RESP2: BF.INFO EXPANSION of a non-scaling filter = %v, %v; want %v", expansion, err, want)
			}
		} else {
			expansion, err = rdb.Do(ctx, "BF.INFO", name, "EXPANSION").Result()
			if want := map[any]any{"Expansion rate": nil}; err != nil || !reflect.DeepEqual(expansion, want) {
				t.Errorf("RESP3: BF.INFO EXPANSION of a non-scaling filter = %v, %v; want %v", expansion, err, want)
			}
		}
	}
}

// RESP and REST serve the same filters.
func TestRESPAndRESTShareFilters(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)

	if err := rdb.BFReserve(ctx, "from-resp", 0.001, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.BFMAdd(ctx, "from-resp", "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	f := dataplane.Get(t, ts, "from-resp")
	if f.ExpectedInsertions != 5000 || f.FPP != 0.001 || f.Items != 2 || !f.Scalable {
		t.Errorf("GET of a filter made over RESP = %+v; want 5000 insertions, fpp 0.001, 2 items, scalable", f)
	}
	if present, err := ts.Client.Check(ctx, "from-resp", "a"); err != nil || !present {
		t.Errorf("REST check of an item added over RESP = %v, %v", present, err)
	}

	dataplane.Create(t, ts, "from-rest", client.CreateOptions{})
	if err := ts.Client.Set(ctx, "from-rest", "v"); err != nil {
		t.Fatal(err)
	}
	dataplane.Expect(t, "BF.EXISTS of an item set over REST", true)(rdb.BFExists(ctx, "from-rest", "v").Result())
	dataplane.Expect(t, "BF.ADD of an item set over REST", false)(rdb.BFAdd(ctx, "from-rest", "v").Result())
	dataplane.Expect(t, "TYPE of a filter made over REST", "MBbloom--")(rdb.Type(ctx, "from-rest").Result())
}

// SCAN walks every name once over pages of COUNT, and MATCH filters them.
func TestRESPScanPages(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("scan-%02d", i)
		want = append(want, name)
		if err := rdb.BFAdd(ctx, name, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	var cursor uint64
	pages := 0
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "", 10).Result()
		if err != nil {
			t.Fatal(err)
		}
		pages++
		seen = append(seen, keys...)
		if cursor = next; cursor == 0 {
			break
		}
		if pages > 10 {
			t.Fatal("SCAN does not end")
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, want) || pages < 3 {
		t.Errorf("SCAN COUNT 10 walked %d pages: %v; want the 25 names once over at least 3 pages", pages, seen)
	}
	var matched []string
	iter := rdb.Scan(ctx, 0, "scan-1*", 7).Iterator()
	for iter.Next(ctx) {
		matched = append(matched, iter.Val())
	}
	slices.Sort(matched)
	if iter.Err() != nil || len(matched) != 10 || matched[0] != "scan-10" {
		t.Errorf("SCAN MATCH scan-1* = %v, %v; want scan-10 to scan-19", matched, iter.Err())
	}
}

// In a cluster, RESP's creates and adds are served by each filter's home: a pod forwards those
// of the filters another pod is home of, and both pods hold every filter and item afterwards.
func TestRESPWritesGoToTheHome(t *testing.T) {
	t.Parallel()
	a, b := dataplane.Start(t, nil), dataplane.Start(t, nil)
	ctx := t.Context()
	members := []wire.Member{{Name: "a", URL: a.Internal.URL}, {Name: "b", URL: b.Internal.URL}}
	for self, ts := range map[string]*dataplane.Server{"a": a, "b": b} {
		if err := ts.Internal.Client.SetMembership(ctx, wire.Membership{Epoch: 1, Self: self, Members: members}); err != nil {
			t.Fatal(err)
		}
	}
	dataplane.WaitUntilReady(t, a) // caught up from b, so that a takes creates
	dataplane.WaitUntilReady(t, b)
	rdb := dataplane.RedisClient(t, a)
	for i := range 12 {
		name := fmt.Sprintf("homed-%d", i)
		dataplane.Expect(t, "BF.ADD "+name, true)(rdb.BFAdd(ctx, name, "x").Result())
		dataplane.Expect(t, "BF.ADD "+name+" again, over b", false)(dataplane.RedisClient(t, b).BFAdd(ctx, name, "x").Result())
		if name == "homed-0" {
			if err := rdb.BFReserve(ctx, name, 0.01, 10).Err(); err == nil || err.Error() != "ERR item exists" {
				t.Errorf("BF.RESERVE of an existing filter in a cluster = %v, want ERR item exists", err)
			}
		}
		for pod, ts := range map[string]*dataplane.Server{"a": a, "b": b} {
			if present, err := ts.Client.Check(ctx, name, "x"); err != nil || !present {
				t.Errorf("pod %s: check %s x = %v, %v; want true", pod, name, present, err)
			}
		}
	}
	if n := dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, a.Ops, ""), "bloomery_replication_forwarded_requests_total"); n == 0 {
		t.Error("pod a forwarded no RESP write to pod b, the home of some of the filters")
	}
}

// A write that too few pods acknowledge in time answers an error that says so; it is applied
// here, as over HTTP.
func TestRESPWriteBelowItsConsistency(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(cfg *config.Config) { cfg.ReplicationTimeout = 200 * time.Millisecond })
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	if err := rdb.BFReserve(ctx, "lonely", 0.01, 100).Err(); err != nil {
		t.Fatal(err)
	}
	gone := []wire.Member{{Name: "a", URL: ts.Internal.URL}, {Name: "b", URL: "http://127.0.0.1:1"}}
	if err := ts.Internal.Client.SetMembership(ctx, wire.Membership{Epoch: 1, Self: "a", Members: gone}); err != nil {
		t.Fatal(err)
	}
	dataplane.WaitUntilReady(t, ts) // told peers, the pod answers LOADING until it has caught up
	for _, args := range [][]any{{"BF.ADD", "lonely", "x"}, {"BF.MADD", "lonely", "y", "z"}} {
		err := rdb.Do(ctx, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR replication incomplete: ") || !strings.Contains(err.Error(), `consistency "quorum"`) {
			t.Errorf("%v with the only peer down = %v, want ERR replication incomplete naming the consistency", args, err)
		}
	}
	dataplane.Expect(t, "BF.EXISTS of the item applied here", true)(rdb.BFExists(ctx, "lonely", "x").Result())
}

// exactDefaults sizes the filters BF.ADD creates for tests that count on each new item answering
// 1: a million items at 1e-4, where RedisBloom's 100 at 0.01 would answer a false 0 now and then
// to thousands of adds.
func exactDefaults(c *config.Config) {
	c.RESPInitialSize, c.RESPErrorRate = 1_000_000, 0.0001
}

// Pipelined BF.ADDs to one filter go to the engine and the log together: 10,000 of them under
// logSync always, an item added twice among them, answer in order (1, then 0 for the repeat),
// with other commands between them answered in their place, and take far fewer log records than
// commands.
func TestRESPPipelinedAddsShareCommits(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(c *config.Config) { c.LogSync = config.LogSyncAlways; exactDefaults(c) })
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	const adds = 10_000
	pipe := rdb.Pipeline()
	var added []*redis.BoolCmd
	for i := range adds {
		added = append(added, pipe.BFAdd(ctx, "piped", fmt.Sprintf("v-%d", i%(adds-1))))
		if i == adds/2 {
			pipe.Ping(ctx)
			pipe.BFAdd(ctx, "other", "x")
		}
	}
	exists := pipe.BFExists(ctx, "piped", "v-1")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range added {
		want := i < adds-1 // v-0 comes again last
		if got, err := cmd.Result(); err != nil || got != want {
			t.Fatalf("pipelined BF.ADD %d = %v, %v; want %v", i, got, err, want)
		}
	}
	dataplane.Expect(t, "BF.EXISTS after the pipeline", true)(exists.Result())
	dataplane.Expect(t, "BF.EXISTS other", true)(rdb.BFExists(ctx, "other", "x").Result())
	records := dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_log_appended_records_total")
	t.Logf("%d pipelined adds took %v log records", adds, records)
	if records > adds/5 {
		t.Errorf("%d pipelined adds took %v log records, want at most one for five", adds, records)
	}
}

// Pipelined BF.EXISTS of one filter are answered as one batch of checks, each in its place: 1 for
// an item added, 0 for one not, 0 for every item of a filter that does not exist.
func TestRESPPipelinedExists(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	if err := rdb.BFMAdd(ctx, "seen", "a", "c", "e").Err(); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	items := []string{"a", "b", "c", "d", "e", "f"}
	var seen, missing []*redis.BoolCmd
	for _, item := range items {
		seen = append(seen, pipe.BFExists(ctx, "seen", item))
	}
	for _, item := range items {
		missing = append(missing, pipe.BFExists(ctx, "never-made", item))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range seen {
		dataplane.Expect(t, "pipelined BF.EXISTS seen "+items[i], i%2 == 0)(cmd.Result())
	}
	for i, cmd := range missing {
		dataplane.Expect(t, "pipelined BF.EXISTS never-made "+items[i], false)(cmd.Result())
	}
	fs := dataplane.Scrape(t, &http.Client{}, ts.Ops, "")
	if n := dataplane.Value(t, fs, "bloomery_resp_commands_total", "command", "bf.exists"); n != 12 {
		t.Errorf(`bloomery_resp_commands_total{command="bf.exists"} = %v, want the 12 pipelined`, n)
	}
}

// A pipelined run of BF.MADDs and BF.ADDs to one filter is one batch, as a run of BF.ADDs is: each
// command answers in its place and form (an array, or one integer), an item repeated across
// commands answers 0 the second time, a BF.ADD of the wrong arity in the middle answers its own
// error, and the run takes far fewer log records than commands under logSync always. A run of
// BF.MEXISTS and BF.EXISTS then answers each item.
func TestRESPPipelinedMixedRuns(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(c *config.Config) { c.LogSync = config.LogSyncAlways; exactDefaults(c) })
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	const rounds = 500
	pipe := rdb.Pipeline()
	var madds []*redis.BoolSliceCmd
	var adds []*redis.BoolCmd
	for i := range rounds {
		madds = append(madds, pipe.BFMAdd(ctx, "mixed", fmt.Sprintf("m-%d", i), fmt.Sprintf("m-%d", i+1), fmt.Sprintf("a-%d", i)))
		adds = append(adds, pipe.BFAdd(ctx, "mixed", fmt.Sprintf("a-%d", i)))
	}
	wrong := pipe.Do(ctx, "BF.ADD", "mixed", "x", "y")
	last := pipe.BFMAdd(ctx, "mixed", "m-0", "new")
	if _, err := pipe.Exec(ctx); err != nil && !strings.Contains(err.Error(), "wrong number of arguments") {
		t.Fatal(err)
	}
	for i, cmd := range madds {
		// m-i was added by the MADD before (as its second item), except for the first.
		got, err := cmd.Result()
		dataplane.WantBools(t, fmt.Sprintf("pipelined BF.MADD %d", i), got, err, i == 0, true, true)
	}
	for i, cmd := range adds {
		dataplane.Expect(t, fmt.Sprintf("pipelined BF.ADD a-%d after the BF.MADD that added it", i), false)(cmd.Result())
	}
	dataplane.WantRedisError(t, "BF.ADD of three arguments in the run", wrong.Err(), "ERR wrong number of arguments for 'bf.add' command")
	got, err := last.Result()
	dataplane.WantBools(t, "the BF.MADD after it", got, err, false, true)
	records := dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, ts.Ops, ""), "bloomery_log_appended_records_total")
	t.Logf("%d pipelined BF.MADDs and BF.ADDs took %v log records", 2*rounds+1, records)
	if records > rounds/5 {
		t.Errorf("%d pipelined BF.MADDs and BF.ADDs took %v log records, want at most one for ten", 2*rounds+1, records)
	}

	check := rdb.Pipeline()
	mexists := check.BFMExists(ctx, "mixed", "m-3", "nothing", "a-4")
	exists := check.BFExists(ctx, "mixed", "new")
	absent := check.BFExists(ctx, "mixed", "absent")
	if _, err := check.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = mexists.Result()
	dataplane.WantBools(t, "pipelined BF.MEXISTS", got, err, true, false, true)
	dataplane.Expect(t, "pipelined BF.EXISTS new", true)(exists.Result())
	dataplane.Expect(t, "pipelined BF.EXISTS absent", false)(absent.Result())
	fs := dataplane.Scrape(t, &http.Client{}, ts.Ops, "")
	for command, want := range map[string]float64{"bf.madd": rounds + 1, "bf.add": rounds + 1, "bf.mexists": 1, "bf.exists": 2} {
		if n := dataplane.Value(t, fs, "bloomery_resp_commands_total", "command", command); n != want {
			t.Errorf(`bloomery_resp_commands_total{command=%q} = %v, want %v`, command, n, want)
		}
	}
}

// A client that sends commands and never reads their replies is no longer read once the replies it
// leaves unread fill the connection's buffers: the server holds the replies of one read of
// commands, not of everything sent, so its heap does not grow with what the client sends. Not
// parallel, so that the heap it measures is this test's.
func TestRESPClientThatDoesNotReadIsNotBuffered(t *testing.T) {
	ts := dataplane.Start(t, nil)
	if err := dataplane.RedisClient(t, ts).BFMAdd(t.Context(), "unread", "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	// BF.MEXISTS of 1,000 one-byte items: 7 KB sent for 4 KB of reply.
	var cmd bytes.Buffer
	fmt.Fprintf(&cmd, "*1002\r\n$10\r\nBF.MEXISTS\r\n$6\r\nunread\r\n")
	for range 1000 {
		cmd.WriteString("$1\r\nx\r\n")
	}
	chunk := bytes.Repeat(cmd.Bytes(), 16)
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", ts.RESP)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const limit = 1 << 30
	written := 0
	for written < limit {
		if err := conn.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Write(chunk)
		written += n
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("writing commands after %d bytes: %v", written, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("the server stopped reading after %.1f MB of commands whose replies went unread; the heap grew %.1f MB",
		float64(written)/1e6, float64(grown)/1e6)
	if written >= limit {
		t.Fatalf("the server read %d bytes of commands from a client that reads no reply", written)
	}
	if grown > 32<<20 {
		t.Errorf("the heap grew %d bytes while a client left its replies unread, want at most 32 MiB", grown)
	}
}

// INFO answers the server, clients and keyspace sections in Redis's format, which go-redis
// parses; a section Bloomery does not keep answers nothing.
func TestRESPInfo(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	empty, err := rdb.InfoMap(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := empty["Server"]["redis_version"]; got != "7.0.0" {
		t.Errorf("INFO Server redis_version = %q, want 7.0.0", got)
	}
	if got := empty["Clients"]["connected_clients"]; got == "" || got == "0" {
		t.Errorf("INFO Clients connected_clients = %q, want this connection counted", got)
	}
	if ks, ok := empty["Keyspace"]; !ok || len(ks) != 0 {
		t.Errorf("INFO Keyspace of no filters = %v (present %t), want an empty section", ks, ok)
	}
	if err := rdb.BFReserve(ctx, "a", 0.01, 100).Err(); err != nil {
		t.Fatal(err)
	}
	dataplane.Create(t, ts, "b", client.CreateOptions{ValidPeriodAfterCreate: new(int64(0))})
	ks, err := rdb.InfoMap(ctx, "keyspace").Result()
	if err != nil {
		t.Fatal(err)
	}
	// "a" takes the configured default expiry; "b" never expires.
	if got := ks["Keyspace"]["db0"]; got != "keys=2,expires=1,avg_ttl=0" || len(ks) != 1 {
		t.Errorf("INFO keyspace = %v, want only db0:keys=2,expires=1,avg_ttl=0", ks)
	}
	dataplane.Expect(t, "INFO memory", "")(rdb.Info(ctx, "memory").Result())
}

// Items are bytes, as in Redis: an item that is not UTF-8 keeps its bytes when a pod sends it to
// another (a filter's home, a partition's owner), and is found through every pod; the item as
// JSON would have mangled it is not.
func TestRESPBinaryItemsKeepTheirBytesBetweenPods(t *testing.T) {
	t.Parallel()
	items := []string{"\xff\xfe", "caf\xe9", "ok\x00\x01", "\xed\xa0\x80"}
	var mangled []string // of the items that are not UTF-8
	for _, item := range items {
		if m := strings.ToValidUTF8(item, "\uFFFD"); m != item {
			mangled = append(mangled, m)
		}
	}
	everywhere := func(t *testing.T, pods []*dataplane.Server, name string) {
		t.Helper()
		for i, ts := range pods {
			rdb := dataplane.RedisClient(t, ts)
			dataplane.WantBools(t, fmt.Sprintf("BF.MEXISTS %s of the items through pod %d", name, i), rdb.BFMExists(t.Context(), name, dataplane.ToAny(items)...).Val(), nil, true, true, true, true)
			for _, item := range items {
				dataplane.Expect(t, fmt.Sprintf("BF.EXISTS %s %q through pod %d", name, item, i), true)(rdb.BFExists(t.Context(), name, item).Result())
			}
			dataplane.WantBools(t, fmt.Sprintf("BF.MEXISTS %s of the mangled items through pod %d", name, i), rdb.BFMExists(t.Context(), name, dataplane.ToAny(mangled)...).Val(), nil, false, false, false)
		}
	}

	t.Run("to the home", func(t *testing.T) {
		t.Parallel()
		a, b := dataplane.Start(t, nil), dataplane.Start(t, nil)
		members := []wire.Member{{Name: "a", URL: a.Internal.URL}, {Name: "b", URL: b.Internal.URL}}
		for self, ts := range map[string]*dataplane.Server{"a": a, "b": b} {
			if err := ts.Internal.Client.SetMembership(t.Context(), wire.Membership{Epoch: 1, Self: self, Members: members}); err != nil {
				t.Fatal(err)
			}
		}
		dataplane.WaitUntilReady(t, a)
		dataplane.WaitUntilReady(t, b)
		for i := range 6 { // some homed at a, some at b
			name := fmt.Sprintf("binary-%d", i)
			if err := dataplane.RedisClient(t, a).BFReserve(t.Context(), name, 0.0001, 1000).Err(); err != nil {
				t.Fatal(err)
			}
			dataplane.WantBools(t, "BF.MADD "+name, dataplane.RedisClient(t, a).BFMAdd(t.Context(), name, dataplane.ToAny(items[:2])...).Val(), nil, true, true)
			for _, item := range items[2:] {
				dataplane.Expect(t, "BF.ADD "+name, true)(dataplane.RedisClient(t, a).BFAdd(t.Context(), name, item).Result())
			}
			everywhere(t, []*dataplane.Server{a, b}, name)
		}
	})

	t.Run("to the partitions' owners", func(t *testing.T) {
		t.Parallel()
		c := dataplane.NewCluster(t, 4, nil)
		c.Push(wire.Placement{ReplicationFactor: 1}, nil)
		opts := client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.0001), Partitions: new(8)}
		if _, _, err := c.Pods[0].Client.At(wire.ConsistencyAll).Create(t.Context(), "binary", opts); err != nil {
			t.Fatal(err)
		}
		dataplane.WantBools(t, "BF.MADD through pod 1", dataplane.RedisClient(t, c.Pods[1]).BFMAdd(t.Context(), "binary", dataplane.ToAny(items[:2])...).Val(), nil, true, true)
		for _, item := range items[2:] {
			dataplane.Expect(t, "BF.ADD through pod 2", true)(dataplane.RedisClient(t, c.Pods[2]).BFAdd(t.Context(), "binary", item).Result())
		}
		everywhere(t, c.Pods, "binary")
	})
}
