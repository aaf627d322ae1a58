package cluster_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/test/cluster"
)

// casEverywhere makes, for each value in turn, two concurrent check-and-sets through each pod, and
// records them in h under phase. The values go one after the other: the promise is per value, and
// a burst of every value at once would only measure the machine against the replication timeout.
func casEverywhere(t *testing.T, h *cluster.History, phase, filter string, values []string, pods ...*cluster.Pod) {
	t.Helper()
	for _, v := range values {
		var wg sync.WaitGroup
		for _, p := range pods {
			for range 2 {
				wg.Go(func() {
					present, err := p.Client.CheckAndSet(t.Context(), filter, v)
					h.Record(cluster.CheckAndSet{Value: v, Pod: p.Name, Phase: phase, Present: present, Err: err})
				})
			}
		}
		wg.Wait()
	}
}

func valuesOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Of the check-and-sets of one value, made concurrently through every pod while the home is cut
// off, then moved by a membership that it is not told, then reachable again, exactly one answers
// false. Phase by phase: while the home is cut off and not moved, no false at all (the home has
// no quorum; the others cannot reach it); once it is moved, the new home answers, and the old
// one, which still takes its clients' requests, is fenced. A checker reads the whole history.
func TestExactlyOneFalseThroughAMoveOfTheHome(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	name := c.NameHomedAt("dedup", c.Pod(0))
	order := c.HomeOrder(name)
	home, next, last := order[0], order[1], order[2]
	create(t, home, name, client.CreateOptions{})
	var h cluster.History
	const n = 12
	healthy, cut, moved, healed := valuesOf("healthy", n), valuesOf("cut", n), valuesOf("moved", n), valuesOf("healed", n)

	casEverywhere(t, &h, "healthy", name, healthy, order...)
	c.Partition(home)
	casEverywhere(t, &h, "cut off", name, slices.Concat(healthy, cut), order...)
	c.Push(next, last)
	c.AwaitHomes(next)
	casEverywhere(t, &h, "moved", name, slices.Concat(healthy, cut, moved), order...)
	c.Heal()
	casEverywhere(t, &h, "healed", name, slices.Concat(healthy, cut, moved, healed), order...)

	counts := h.Counts()
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		t.Logf("%s: %d", k, counts[k])
	}
	for _, line := range h.SecondFalses() {
		t.Error(line)
	}
	for _, line := range h.MissingFalses(slices.Concat(healthy, cut, moved, healed)) {
		t.Error(line)
	}
	for _, op := range h.Ops() {
		if op.Phase == "cut off" && op.Err == nil && !op.Present {
			t.Errorf("%s answered false through %s while the home was cut off and not moved", op.Value, op.Pod)
		}
		if op.Phase == "healed" && op.Pod == home.Name && op.Outcome() != "503 code 13" {
			t.Errorf("%s through the old home once healed: %s, want 503 code 13 (fenced)", op.Value, op.Outcome())
		}
		if strings.HasPrefix(op.Value, "healthy") && op.Phase != "healthy" && op.Err == nil && !op.Present {
			t.Errorf("%s, answered in the healthy phase, answered false again through %s in phase %s", op.Value, op.Pod, op.Phase)
		}
	}
}
