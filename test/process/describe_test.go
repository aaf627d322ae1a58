package process

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
)

// describeRounds is how many rounds TestDescribeOfALargeFilterStallsNoWrite measures, and
// describeRound how long each lasts.
// Short rounds, many of them: a round's slowest write is then seldom one that waited for the
// machine's other work, while a GET that stalled writers would stall some write of every round.
const (
	describeRounds = 15
	describeRound  = 500 * time.Millisecond
)

// A GET of a large filter answers from counts the engine keeps: it costs milliseconds, and a
// write to the filter beside a client GETting it in a loop waits no more than 50 ms longer than without them
// (issue 33). Counting a filter of 1 GiB took about 150 ms, under the filter's lock for all of it
// at first, then a chunk at a time. On a shared machine any request may wait for the CPU now and
// then, GETs or not: rounds of writes alone alternate with rounds beside GETs, each round's
// slowest write and median GET are kept, and the bounds apply to the median round, which one
// stalled GET per round, the old count's behaviour, would exceed.
func TestDescribeOfALargeFilterStallsNoWrite(t *testing.T) {
	// logSync: no keeps the disk's fdatasync, which may take longer than the bound on its own,
	// out of what the writes wait for.
	dp := startPlainDataPlane(t, nil, t.TempDir(), "--log-sync", "no")
	ctx := t.Context()
	insertions, fpp := uint64(900_000_000), 0.01
	big, _, err := dp.client.Create(ctx, "big", client.CreateOptions{ExpectedInsertions: &insertions, FPP: &fpp, ValidPeriodAfterCreate: new(int64(0))})
	if err != nil {
		t.Fatal(err)
	}
	if big.SizeBytes < 1<<30 {
		t.Fatalf("the filter takes %d bytes, want 1 GiB", big.SizeBytes)
	}
	var alone, beside, gets []time.Duration
	for round := range describeRounds {
		w, _ := writeRound(t, dp, fmt.Sprint("alone-", round, "-"), 0)
		alone = append(alone, w)
		w, g := writeRound(t, dp, fmt.Sprint("beside-", round, "-"), 1)
		beside, gets = append(beside, w), append(gets, g)
	}
	t.Logf("%d rounds of %v of writes to a %d MiB filter: slowest write per round alone %v, beside GETs %v; median GET per round %v",
		describeRounds, describeRound, big.SizeBytes>>20, alone, beside, gets)
	if w, base := median(beside), median(alone); w > base+50*time.Millisecond {
		t.Errorf("in the median round a write waited %v beside GETs, %v alone: GETs delayed it more than 50ms", w, base)
	}
	if g := median(gets); g > 50*time.Millisecond {
		t.Errorf("the median GET of the filter took %v, want milliseconds", g)
	}
	if f, err := dp.client.Get(ctx, "big"); err != nil || f.Items == 0 {
		t.Errorf("the filter after the writes: %+v, %v", f, err)
	}
}

// writeRound sets values one at a time for describeRound while getters clients GET the filter in
// a loop, and answers the slowest write and the median GET (0 without getters).
func writeRound(t *testing.T, dp *dataPlane, prefix string, getters int) (slowestWrite, medianGet time.Duration) {
	t.Helper()
	ctx := t.Context()
	stop := make(chan struct{})
	var mu sync.Mutex
	var gets []time.Duration
	var wg sync.WaitGroup
	for range getters {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := dp.client.Get(ctx, "big"); err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				mu.Lock()
				gets = append(gets, time.Since(start))
				mu.Unlock()
			}
		})
	}
	for i, end := 0, time.Now().Add(describeRound); time.Now().Before(end); i++ {
		start := time.Now()
		if err := dp.client.Set(ctx, "big", fmt.Sprint(prefix, i)); err != nil {
			t.Fatal(err)
		}
		slowestWrite = max(slowestWrite, time.Since(start))
	}
	close(stop)
	wg.Wait()
	if getters == 0 {
		return slowestWrite, 0
	}
	if len(gets) == 0 {
		t.Fatal("no GET was answered in the round")
	}
	return slowestWrite, median(gets)
}

// median is the middle of ds.
func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}
