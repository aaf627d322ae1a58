package process

import (
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Each Go client drives the binary's RESP port through its own RedisBloom API, as a user would:
// reserve, add, madd, insert, exists, mexists, info, a transaction and a flush, with the answers
// RedisBloom gives. A filter of 1,000 at 0.001 has one layer of 15,821 bits in 1,984 bytes, so
// BF.INFO's Size is 1,984 + 32 + 64 = 2,080, RedisBloom's figure for the same filter.
const infoSize = 2080

// go-redis v9 in RESP2 and in RESP3, each speaking its protocol to the end: HELLO answers it, and
// BF.EXISTS answers an integer in RESP2 and a boolean in RESP3.
func TestGoRedisClient(t *testing.T) {
	_, port := startWithRESP(t, t.TempDir())
	for _, proto := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Protocol: proto, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		goRedisScenario(t, proto, rdb)
	}
}

func goRedisScenario(t *testing.T, proto int, rdb *redis.Client) {
	t.Helper()
	ctx := t.Context()
	want := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("RESP%d: %s = %#v, %v; want %#v", proto, what, got, err, want)
		}
	}
	got, err := rdb.FlushAll(ctx).Result()
	want("FLUSHALL", got, "OK", err)
	got, err = rdb.BFReserve(ctx, "f", 0.001, 1000).Result()
	want("BF.RESERVE", got, "OK", err)
	added, err := rdb.BFAdd(ctx, "f", "a").Result()
	want("BF.ADD", added, true, err)
	added, err = rdb.BFAdd(ctx, "f", "a").Result()
	want("BF.ADD again", added, false, err)
	bools, err := rdb.BFMAdd(ctx, "f", "a", "b", "c").Result()
	want("BF.MADD", bools, []bool{false, true, true}, err)
	bools, err = rdb.BFInsert(ctx, "g", &redis.BFInsertOptions{Capacity: 500, Error: 0.01, Expansion: 4}, "x", "y").Result()
	want("BF.INSERT", bools, []bool{true, true}, err)
	exists, err := rdb.BFExists(ctx, "f", "b").Result()
	want("BF.EXISTS", exists, true, err)
	exists, err = rdb.BFExists(ctx, "f", "zz").Result()
	want("BF.EXISTS absent", exists, false, err)
	bools, err = rdb.BFMExists(ctx, "f", "a", "zz", "c").Result()
	want("BF.MEXISTS", bools, []bool{true, false, true}, err)
	info, err := rdb.BFInfo(ctx, "f").Result()
	want("BF.INFO", info, redis.BFInfo{Capacity: 1000, Size: infoSize, Filters: 1, ItemsInserted: 3, ExpansionRate: 2}, err)
	info, err = rdb.BFInfo(ctx, "g").Result()
	want("BF.INFO of the inserted filter", [2]int64{info.Capacity, info.ExpansionRate}, [2]int64{500, 4}, err)

	// The protocol is the one asked for, to the end.
	raw, err := rdb.Do(ctx, "BF.EXISTS", "f", "a").Result()
	if proto == 2 {
		want("BF.EXISTS, raw", raw, int64(1), err)
	} else {
		want("BF.EXISTS, raw", raw, true, err)
	}

	var add *redis.BoolCmd
	var card *redis.IntCmd
	var again *redis.StatusCmd
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		add = p.BFAdd(ctx, "f", "d")
		again = p.BFReserve(ctx, "f", 0.01, 10)
		card = p.BFCard(ctx, "f")
		return nil
	})
	want("MULTI ... EXEC's first error", errString(err), "ERR item exists", nil)
	added, err = add.Result()
	want("BF.ADD in the transaction", added, true, err)
	want("BF.RESERVE in the transaction", errString(again.Err()), "ERR item exists", nil)
	n, err := card.Result()
	want("BF.CARD in the transaction", n, int64(4), err)

	// BF.SCANDUMP and BF.LOADCHUNK go here once the port has them.

	got, err = rdb.FlushDB(ctx).Result()
	want("FLUSHDB", got, "OK", err)
	n, err = rdb.DBSize(ctx).Result()
	want("DBSIZE after FLUSHDB", n, int64(0), err)
	exists, err = rdb.BFExists(ctx, "f", "a").Result()
	want("BF.EXISTS after FLUSHDB", exists, false, err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// rueidis speaks RESP3 alone: it connects, and every answer comes in RESP3's types.
func TestRueidisClient(t *testing.T) {
	_, port := startWithRESP(t, t.TempDir())
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:" + port}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis could not connect: %v", err)
	}
	t.Cleanup(client.Close)
	ctx := t.Context()
	b := client.B
	want := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, %v; want %#v", what, got, err, want)
		}
	}
	do := func(cmd rueidis.Completed) rueidis.RedisResult { return client.Do(ctx, cmd) }

	s, err := do(b().Flushall().Build()).ToString()
	want("FLUSHALL", s, "OK", err)
	s, err = do(b().BfReserve().Key("f").ErrorRate(0.001).Capacity(1000).Build()).ToString()
	want("BF.RESERVE", s, "OK", err)
	added, err := do(b().BfAdd().Key("f").Item("a").Build()).ToBool() // a RESP3 boolean, not 1
	want("BF.ADD", added, true, err)
	added, err = do(b().BfAdd().Key("f").Item("a").Build()).ToBool()
	want("BF.ADD again", added, false, err)
	bools, err := toBools(do(b().BfMadd().Key("f").Item("a", "b", "c").Build()))
	want("BF.MADD", bools, []bool{false, true, true}, err)
	bools, err = toBools(do(b().BfInsert().Key("g").Capacity(500).Error(0.01).Expansion(4).Items().Item("x", "y").Build()))
	want("BF.INSERT", bools, []bool{true, true}, err)
	exists, err := do(b().BfExists().Key("f").Item("b").Build()).ToBool()
	want("BF.EXISTS", exists, true, err)
	exists, err = do(b().BfExists().Key("f").Item("zz").Build()).ToBool()
	want("BF.EXISTS absent", exists, false, err)
	bools, err = toBools(do(b().BfMexists().Key("f").Item("a", "zz", "c").Build()))
	want("BF.MEXISTS", bools, []bool{true, false, true}, err)
	info, err := do(b().BfInfo().Key("f").Build()).AsIntMap() // a RESP3 map
	want("BF.INFO", info, map[string]int64{"Capacity": 1000, "Size": infoSize, "Number of filters": 1, "Number of items inserted": 3, "Expansion rate": 2}, err)
	info, err = do(b().BfInfo().Key("g").Expansion().Build()).AsIntMap()
	want("BF.INFO g EXPANSION", info, map[string]int64{"Expansion rate": 4}, err)

	var replies []rueidis.RedisResult
	err = client.Dedicated(func(d rueidis.DedicatedClient) error {
		replies = d.DoMulti(ctx, d.B().Multi().Build(), d.B().BfAdd().Key("f").Item("d").Build(),
			d.B().BfReserve().Key("f").ErrorRate(0.01).Capacity(10).Build(), d.B().BfCard().Key("f").Build(), d.B().Exec().Build())
		return nil
	})
	if err != nil || len(replies) != 5 {
		t.Fatalf("MULTI ... EXEC: %d replies, %v", len(replies), err)
	}
	for i, r := range replies[1:4] {
		s, err := r.ToString()
		want("QUEUED "+string(rune('1'+i)), s, "QUEUED", err)
	}
	exec, err := replies[4].ToArray()
	if err != nil || len(exec) != 3 {
		t.Fatalf("EXEC = %v, %v; want three replies", exec, err)
	}
	added, err = exec[0].ToBool()
	want("BF.ADD in EXEC", added, true, err)
	want("BF.RESERVE in EXEC", errString(exec[1].Error()), "item exists", nil) // rueidis drops ERR
	n, err := exec[2].AsInt64()
	want("BF.CARD in EXEC", n, int64(4), err)

	// BF.SCANDUMP and BF.LOADCHUNK go here once the port has them.

	s, err = do(b().Flushdb().Build()).ToString()
	want("FLUSHDB", s, "OK", err)
	n, err = do(b().Dbsize().Build()).AsInt64()
	want("DBSIZE after FLUSHDB", n, int64(0), err)
	exists, err = do(b().BfExists().Key("f").Item("a").Build()).ToBool()
	want("BF.EXISTS after FLUSHDB", exists, false, err)
}

// toBools reads an array of RESP3 booleans.
func toBools(r rueidis.RedisResult) ([]bool, error) {
	msgs, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(msgs))
	for i, m := range msgs {
		if out[i], err = m.ToBool(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
