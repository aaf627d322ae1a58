package run_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

// With R = 2 of 4 pods, a filter of 8 partitions larger than any pod's memory limit is created
// and written through any pod, and every value is found through every pod; each pod holds the
// partitions placement gives it, no more than the bound, and new values are absent everywhere.
// Concurrent check-and-sets of one new value through different pods answer false once.
func TestPlacedClusterServesEveryValueThroughEveryPod(t *testing.T) {
	t.Parallel()
	const partitions = 8
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(400_000)), FPP: new(0.01), Partitions: new(partitions)}
	whole := dataplane.Create(t, dataplane.Start(t, nil), "probe", opts).SizeBytes // what one pod holding all of it takes
	c := dataplane.NewCluster(t, 4, func(cfg *config.Config) {
		cfg.MaxTotalBytes = whole * 3 / 4
		// No pod fails here: an acknowledgement late on a busy machine (2 s, the default, was
		// once too short under make test) must not fail a write; one never sent still does.
		cfg.ReplicationTimeout = 30 * time.Second
	})
	c.Push(wire.Placement{ReplicationFactor: 2}, nil)

	// Created at consistency=all, so that every pod holds the filter when values are routed to it.
	f, _, err := c.Pods[1].Client.At(wire.ConsistencyAll).Create(t.Context(), "big", opts)
	if err != nil {
		t.Fatal(err)
	}
	if f.Partitions != partitions {
		t.Fatalf("created with %d partitions, want %d", f.Partitions, partitions)
	}
	vals := dataplane.Values("v", 20_000)
	for i, ts := range c.Pods { // each pod writes a quarter, in batches and one by one
		share := vals[i*5000 : (i+1)*5000]
		if err := ts.Client.MultiSet(t.Context(), "big", share[:4000]); err != nil {
			t.Fatalf("multi-set through %s: %v", c.Names[i], err)
		}
		for _, v := range share[4000:] {
			if err := ts.Client.Set(t.Context(), "big", v); err != nil {
				t.Fatalf("set through %s: %v", c.Names[i], err)
			}
		}
	}
	c.EveryValueEverywhere("big", vals)
	for i, ts := range c.Pods {
		got, err := ts.Client.MultiCheck(t.Context(), "big", dataplane.Values("absent", 1000))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(slices.DeleteFunc(got, func(b bool) bool { return !b })); n > 30 {
			t.Errorf("through %s, %d of 1000 values never added are present", c.Names[i], n)
		}
	}

	// GET sums the partitions, whichever pods hold them.
	for i, ts := range c.Pods {
		got, err := ts.Client.Get(t.Context(), "big")
		if err != nil || got.Partitions != partitions || got.SizeBytes != whole || got.Items < 19_800 || got.Items > 20_000 ||
			got.Bits > whole*8 || got.Bits < whole*8-partitions*64 || got.FillRatio <= 0 || got.EstimatedFPP <= 0 || got.EstimatedFPP > 0.01 {
			t.Errorf("GET through %s: %+v, %v; want 8 partitions of %d bytes holding about 20,000 values", c.Names[i], got, err, whole)
		}
	}

	bound := placement.Bound(partitions, 2, 4)
	total := 0
	for i, st := range c.Status() {
		if st.PartitionsOwned > bound || st.PartitionsHeld != st.PartitionsOwned || !st.CaughtUp {
			t.Errorf("%s: %+v; want at most %d partitions owned, all held, caught up", c.Names[i], st, bound)
		}
		if st.Bytes > whole*3/4 {
			t.Errorf("%s holds %d bytes, more than its limit", c.Names[i], st.Bytes)
		}
		total += st.PartitionsOwned
	}
	if total != partitions*2 {
		t.Errorf("the pods own %d partitions in all, want %d × 2", total, partitions)
	}

	// RESP routes as HTTP does: a filter of one partition, reserved through a pod, is held by two
	// pods and written and answered through all four.
	items := dataplane.Values("item", 500)
	if err := dataplane.RedisClient(t, c.Pods[0]).BFReserve(t.Context(), "r", 0.001, 1000).Err(); err != nil {
		t.Fatalf("BF.RESERVE: %v", err)
	}
	// The create was acknowledged by a quorum: until it reaches the partition's home, that home
	// does not serve its values, and the port answers TRYAGAIN.
	for i, ts := range c.Pods {
		await.True(t, 10*time.Second, "r reaching "+c.Names[i], func() bool {
			_, err := ts.Internal.Client.FilterStatus(t.Context(), "r")
			return err == nil
		})
	}
	args := append([]any{"BF.MADD", "r"}, dataplane.ToAny(items[:300])...)
	if err := dataplane.RedisClient(t, c.Pods[2]).Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("BF.MADD: %v", err)
	}
	pipe := dataplane.RedisClient(t, c.Pods[3]).Pipeline()
	for _, item := range items[300:] {
		pipe.BFAdd(t.Context(), "r", item)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatalf("pipelined BF.ADD: %v", err)
	}
	holders, owners := 0, 0
	for i, ts := range c.Pods {
		got, err := dataplane.RedisClient(t, ts).BFMExists(t.Context(), "r", dataplane.ToAny(items)...).Result()
		if err != nil || slices.Contains(got, false) {
			t.Fatalf("BF.MEXISTS through %s: %v, %v", c.Names[i], got, err)
		}
		if f, err := ts.Client.Get(t.Context(), "r"); err != nil || f.Partitions != 1 || f.Items != 500 {
			t.Fatalf("GET r through %s: %+v, %v; want 1 partition of 500 items", c.Names[i], f, err)
		}
		local, err := ts.Internal.Client.FilterStatus(t.Context(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if local.SizeBytes > 0 {
			holders++
		}
		if local.PartitionsOwned != local.PartitionsHeld {
			t.Errorf("%s owns %d partitions of r and holds %d; with no move under way, want the same", c.Names[i], local.PartitionsOwned, local.PartitionsHeld)
		}
		owners += local.PartitionsOwned
		if listed, err := ts.Client.ListDetails(t.Context()); err != nil || len(listed) != 2 || listed[1].Name != "r" || listed[1].PartitionsHeld != local.PartitionsHeld {
			t.Errorf("the list's details through %s: %+v, %v; want r with the %d partitions it holds", c.Names[i], listed, err, local.PartitionsHeld)
		}
	}
	if holders != 2 || owners != 2 {
		t.Errorf("%d pods hold the bits of r and %d own it, want 2", holders, owners)
	}

	// A second filter as large does not fit: the create is refused, naming the pods that cannot
	// hold their partitions, and leaves nothing behind.
	_, _, err = c.Pods[2].Client.Create(t.Context(), "another", opts)
	var refusal *client.Error
	if !errors.As(err, &refusal) || refusal.Status != http.StatusInsufficientStorage || !strings.Contains(err.Error(), "pod p") {
		t.Errorf("create of a filter the pods cannot hold: %v; want 507 naming the pods", err)
	} else {
		t.Logf("refused: %v", err)
	}
	for i, ts := range c.Pods {
		if names, err := ts.Client.List(t.Context()); err != nil || slices.Contains(names, "another") {
			t.Errorf("%s lists %v, %v after the refused create", c.Names[i], names, err)
		}
	}

	// A multi-check-and-set sends the values of each pod's partitions in one request, not one per
	// set of owners: at most one to each of the three peers.
	forwarded := func() float64 {
		return dataplane.Value(t, dataplane.Scrape(t, &http.Client{}, c.Pods[0].Ops, ""), "bloomery_replication_forwarded_requests_total")
	}
	before := forwarded()
	news, err := c.Pods[0].Client.MultiCheckAndSet(t.Context(), "big", dataplane.Values("mcas", 400))
	if err != nil || slices.Contains(news, true) {
		t.Fatalf("a multi-check-and-set of 400 new values: %v, %v; want every one false", news, err)
	}
	if n := forwarded() - before; n < 1 || n > 3 {
		t.Errorf("a multi-check-and-set of values of all 8 partitions made %v forwarded requests, want one to each peer that is home of some", n)
	}
	again, err := c.Pods[3].Client.MultiCheckAndSet(t.Context(), "big", dataplane.Values("mcas", 400))
	if err != nil || slices.Contains(again, false) {
		t.Fatalf("the same values again through another pod: %v, %v; want every one true", again, err)
	}

	for round := range 20 {
		value := fmt.Sprintf("race-%d", round)
		var wg sync.WaitGroup
		answers := make([]bool, len(c.Pods))
		for i, ts := range c.Pods {
			wg.Go(func() {
				present, err := ts.Client.CheckAndSet(t.Context(), "big", value)
				if err != nil {
					t.Error(err)
				}
				answers[i] = present
			})
		}
		wg.Wait()
		if news := slices.Index(answers, false); news < 0 || slices.Index(answers[news+1:], false) >= 0 {
			t.Fatalf("check-and-sets of %s through every pod answered %v, want false exactly once", value, answers)
		}
	}
}

// Adding two pods moves partitions to them: while the move is under way every value written
// before and during it is found through every pod; the new pods pull their partitions and say
// so, and once the placement is final the old copies are released and the bytes are balanced.
func TestPlacedClusterMovesPartitionsToNewPods(t *testing.T) {
	t.Parallel()
	const partitions = 16
	c := dataplane.NewCluster(t, 4, func(cfg *config.Config) { cfg.ReplicationTimeout = 2 * time.Second })
	r2 := wire.Placement{ReplicationFactor: 2}
	c.Push(r2, nil)
	if _, _, err := c.Pods[0].Client.At(wire.ConsistencyAll).Create(t.Context(), "f", client.CreateOptions{ExpectedInsertions: new(uint64(100_000)), Partitions: new(partitions)}); err != nil {
		t.Fatal(err)
	}
	before := dataplane.Values("before", 10_000)
	if err := c.Pods[2].Client.MultiSet(t.Context(), "f", before); err != nil {
		t.Fatal(err)
	}

	c.Add(func(cfg *config.Config) { cfg.ReplicationTimeout = 2 * time.Second })
	c.Add(func(cfg *config.Config) { cfg.ReplicationTimeout = 2 * time.Second })
	old := wire.Placement{Owners: c.Names[:4], ReplicationFactor: 2}
	c.Push(wire.Placement{ReplicationFactor: 2}, &old)
	during := dataplane.Values("during", 2000)
	if err := c.Pods[5].Client.MultiSet(t.Context(), "f", during); err != nil {
		t.Fatal(err)
	}
	c.EveryValueEverywhere("f", append(slices.Clone(before), during...))
	await.True(t, 30*time.Second, "every pod caught up with the move", func() bool {
		for _, st := range c.Status() {
			if !st.CaughtUp || st.Epoch != c.Epoch() {
				return false
			}
		}
		return true
	})
	moved := int64(0)
	for _, st := range c.Status()[4:] {
		if st.PartitionsOwned == 0 || st.PartitionsMoving != 0 || st.MovedBytes == 0 {
			t.Errorf("a new pod: %+v; want partitions owned, pulled", st)
		}
		moved += st.MovedBytes
	}
	t.Logf("moved %d bytes to the two new pods", moved)

	c.Push(wire.Placement{ReplicationFactor: 2}, nil)
	after := dataplane.Values("after", 2000)
	if err := c.Pods[3].Client.MultiSet(t.Context(), "f", after); err != nil {
		t.Fatal(err)
	}
	c.EveryValueEverywhere("f", slices.Concat(before, during, after))
	// A pod releases the partitions it no longer owns once every member holds the epoch that
	// ended the move, which each pod learns by asking the others.
	await.Until(t, 30*time.Second, "every pod releases the partitions it no longer owns", func() (bool, string) {
		for i, st := range c.Status() {
			if st.PartitionsHeld != st.PartitionsOwned {
				return false, fmt.Sprintf("%s: %+v", c.Names[i], st)
			}
		}
		return true, ""
	})
	bound := placement.Bound(partitions, 2, 6)
	for i, st := range c.Status() {
		if st.PartitionsOwned > bound {
			t.Errorf("%s after the move: %+v; want at most %d owned", c.Names[i], st, bound)
		}
	}
}
