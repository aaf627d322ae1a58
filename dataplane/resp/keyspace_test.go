package resp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// The key-space commands test suites and scripts start with: DBSIZE counts the filters, UNLINK
// deletes as DEL, FLUSHDB and FLUSHALL delete them all with or without ASYNC/SYNC, and RENAME,
// RENAMENX and COPY answer why they cannot.
func TestRESPFlushAndKeySpace(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	reserve := func(names ...string) {
		t.Helper()
		for _, name := range names {
			if err := rdb.BFReserve(ctx, name, 0.01, 100).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	reserve("a", "b", "c")
	dataplane.Expect(t, "DBSIZE", int64(3))(rdb.DBSize(ctx).Result())
	dataplane.Expect(t, "UNLINK", int64(2))(rdb.Unlink(ctx, "a", "b", "missing").Result())
	dataplane.Expect(t, "DBSIZE after UNLINK", int64(1))(rdb.DBSize(ctx).Result())
	dataplane.Expect(t, "FLUSHDB", "OK")(rdb.FlushDB(ctx).Result())
	dataplane.Expect(t, "DBSIZE after FLUSHDB", int64(0))(rdb.DBSize(ctx).Result())
	for _, args := range [][]any{{"FLUSHALL"}, {"FLUSHALL", "ASYNC"}, {"flushall", "sync"}, {"FLUSHDB", "SYNC"}} {
		reserve("d", "e")
		dataplane.Expect(t, strings.Join(strs(args), " "), "OK")(rdb.Do(ctx, args...).Text())
		dataplane.Expect(t, "KEYS after "+strings.Join(strs(args), " "), 0)(len(rdb.Keys(ctx, "*").Val()), nil)
	}
	doError(t, rdb, "ERR syntax error", "FLUSHALL", "LATER")
	doError(t, rdb, "ERR syntax error", "FLUSHDB", "ASYNC", "SYNC")

	reserve("kept")
	for _, args := range [][]any{{"RENAME", "kept", "new"}, {"RENAMENX", "kept", "new"}, {"COPY", "kept", "new"}} {
		err := rdb.Do(ctx, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR Bloomery cannot rename or copy a filter") {
			t.Errorf("%v = %v, want the error saying a filter cannot be renamed", args, err)
		}
	}
	dataplane.Expect(t, "EXISTS after RENAME", int64(1))(rdb.Exists(ctx, "kept").Result())
	dataplane.Expect(t, "EXISTS of RENAME's target", int64(0))(rdb.Exists(ctx, "new").Result())
}

func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a.(string)
	}
	return out
}

// FLUSHALL deletes every filter through the write service, so the deletes reach the other pods
// as DEL's do.
func TestRESPFlushAllReplicates(t *testing.T) {
	t.Parallel()
	pods := threePods(t, 0)
	ctx := t.Context()
	rdbs := reserveEverywhere(t, pods, "f")
	reserveEverywhere(t, pods, "g")
	dataplane.Expect(t, "FLUSHALL", "OK")(rdbs[0].FlushAll(ctx).Result())
	await.True(t, 10*time.Second, "no filter on any pod", func() bool {
		for _, rdb := range rdbs {
			if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
}

// Commands named in respDisabledCommands, in any case, answer as unknown, as Redis's
// rename-command to "" makes them, pipelined adds included; the others still answer.
func TestRESPDisabledCommands(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, func(cfg *config.Config) {
		cfg.RESPDisabledCommands = []string{"flushall", "KEYS", "Bf.Add"}
	})
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	dataplane.Expect(t, "BF.RESERVE", "OK")(rdb.BFReserve(ctx, "f", 0.01, 100).Result())
	doError(t, rdb, "ERR unknown command 'FLUSHALL', with args beginning with: 'ASYNC' ", "FLUSHALL", "ASYNC")
	doError(t, rdb, "ERR unknown command 'keys', with args beginning with: '*' ", "keys", "*")
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.BFAdd(ctx, "f", "a")
		p.BFAdd(ctx, "f", "b")
		return nil
	})
	for _, cmd := range cmds {
		if err := cmd.Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command 'BF.ADD'") {
			t.Errorf("pipelined %v = %v, want unknown command", cmd.Args(), err)
		}
	}
	dataplane.Expect(t, "BF.MADD, not disabled", 1)(len(rdb.BFMAdd(ctx, "f", "c").Val()), nil)
	dataplane.Expect(t, "FLUSHDB, not disabled", "OK")(rdb.FlushDB(ctx).Result())
	dataplane.Expect(t, "DBSIZE", int64(0))(rdb.DBSize(ctx).Result())
}
