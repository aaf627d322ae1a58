package resp_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/test/dataplane"
)

// go-redis's TxPipelined sends MULTI, the commands and EXEC, and reads each command's reply
// from EXEC's array: a run-time error comes back on its own command, the others succeed.
func TestRESPTxPipelined(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)

	var reserve, again *redis.StatusCmd
	var add *redis.BoolCmd
	var mexists *redis.BoolSliceCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		reserve = p.BFReserve(ctx, "tx", 0.01, 1000)
		again = p.BFReserve(ctx, "tx", 0.01, 1000)
		add = p.BFAdd(ctx, "tx", "a")
		mexists = p.BFMExists(ctx, "tx", "a", "b")
		return nil
	})
	if err == nil || err.Error() != "ERR item exists" {
		t.Errorf("TxPipelined = %v, want the first command error, ERR item exists", err)
	}
	dataplane.Expect(t, "BF.RESERVE", "OK")(reserve.Result())
	if again.Err() == nil || again.Err().Error() != "ERR item exists" {
		t.Errorf("BF.RESERVE again = %v, want ERR item exists in its place", again.Err())
	}
	dataplane.Expect(t, "BF.ADD", true)(add.Result())
	got, err := mexists.Result()
	dataplane.WantBools(t, "BF.MEXISTS", got, err, true, false)

	// A command refused at queue time discards the whole transaction.
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.BFAdd(ctx, "tx", "c")
		p.Do(ctx, "BF.ADD", "tx")
		return nil
	})
	if err == nil || err.Error() != "EXECABORT Transaction discarded because of previous errors." {
		t.Errorf("TxPipelined with a wrong arity = %v, want EXECABORT", err)
	}
	dataplane.Expect(t, "BF.EXISTS of the discarded add", false)(rdb.BFExists(ctx, "tx", "c").Result())
}

// No other RESP client's command on the filter runs between a transaction's commands: a
// transaction that deletes a filter, adds one item and counts sees one item, every time, while
// another client adds other items to the same filter as fast as it can.
func TestRESPTransactionIsNotInterleaved(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	rdb := dataplane.RedisClient(t, ts)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for w := range 2 {
		other := dataplane.RedisClient(t, ts)
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if err := other.BFAdd(ctx, "shared", []byte{byte(w), byte(i), byte(i >> 8)}).Err(); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("the other client's BF.ADD: %v", err)
					return
				}
			}
		})
	}
	for i := range 300 {
		var card *redis.IntCmd
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, "shared")
			p.BFAdd(ctx, "shared", "mine")
			card = p.BFCard(ctx, "shared")
			return nil
		})
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if n := card.Val(); n != 1 {
			t.Fatalf("transaction %d counted %d items after deleting the filter and adding one: another client's add ran between its commands", i, n)
		}
	}
}
