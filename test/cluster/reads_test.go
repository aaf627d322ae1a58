package cluster_test

import (
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/cluster"
)

// Quorum and all reads ask the peers for the values absent here, succeed while enough pods answer
// and fail with 503 code 9, naming who failed, when too few do; reads are not repaired.
func TestQuorumAndAllReadsNeedEnoughPods(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	a, b, d := c.Pod(0), c.Pod(1), c.Pod(2)
	create(t, a, "users", client.CreateOptions{})
	if err := a.With(wire.ConsistencyAll).Set(t.Context(), "users", "everywhere"); err != nil {
		t.Fatal(err)
	}
	// "elsewhere" is held by b and d, not a: written through b while a refuses its peers. It
	// goes on refusing them: b's sender may still be trying a with that write when Set returns
	// (d's acknowledgement made the quorum), and would deliver it once a took connections again.
	c.Proxy(b, a).Set(cluster.Refuse())
	c.Proxy(d, a).Set(cluster.Refuse())
	if err := b.Client.Set(t.Context(), "users", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if a.HoldsAll(t, "users", "elsewhere") || !b.HoldsAll(t, "users", "elsewhere") || !d.HoldsAll(t, "users", "elsewhere") {
		t.Fatal(`"elsewhere" should be on b and d only`)
	}

	read := func(level wire.Consistency, value string) (bool, error) {
		t.Helper()
		return a.With(level).Check(t.Context(), "users", value)
	}
	wantRead := func(level wire.Consistency, value string, want bool) {
		t.Helper()
		if got, err := read(level, value); err != nil || got != want {
			t.Errorf("%s read of %q on %s = %v, %v; want %v", level, value, a.Name, got, err, want)
		}
	}
	forwarded := a.Metric(t, forwardedTotal)
	wantRead(wire.ConsistencyOne, "elsewhere", false)
	wantRead(wire.ConsistencyQuorum, "everywhere", true) // held here: no peer is asked
	if got := a.Metric(t, forwardedTotal); got != forwarded {
		t.Errorf("reads answered from %s's own copy were sent to %v peers", a.Name, got-forwarded)
	}
	wantRead(wire.ConsistencyQuorum, "elsewhere", true)
	wantRead(wire.ConsistencyAll, "elsewhere", true)
	wantRead(wire.ConsistencyAll, "nowhere", false)
	// Each asks both peers; a quorum read may have its answer before its check to the second
	// left this pod, which is then not sent.
	if got := a.Metric(t, forwardedTotal) - forwarded; got < 5 || got > 6 {
		t.Errorf("three widened reads on %s were sent to %v peers, want 6, or 5 when the quorum read's second was not needed", a.Name, got)
	}
	if a.HoldsAll(t, "users", "elsewhere") {
		t.Error("a quorum read copied the value it found elsewhere: reads are not repaired")
	}

	// One peer refuses: a quorum still answers, all cannot.
	c.Proxy(a, d).Set(cluster.Refuse())
	wantRead(wire.ConsistencyQuorum, "elsewhere", true)
	_, err := read(wire.ConsistencyAll, "elsewhere")
	msg := cluster.WantError(t, err, 503, wire.CodeReplication)
	// The read fails as soon as the refusal makes 3 unreachable, whether or not the other peer
	// had answered by then: "only 1" or "only 2" answered.
	if !strings.HasPrefix(msg, `replication incomplete: consistency "all" needs 3 of 3 pods and only `) ||
		!strings.Contains(msg, " answered (pod-2: ") || refusals(msg) != 1 {
		t.Errorf("an all read with one peer refusing: %q", msg)
	}

	// Both peers fail, one refusing, one silent: the quorum read fails after the timeout, and
	// a read from the pod's own copy still answers.
	c.Proxy(a, b).Set(cluster.Stall())
	_, err = read(wire.ConsistencyQuorum, "elsewhere")
	msg = cluster.WantError(t, err, 503, wire.CodeReplication)
	if !strings.HasPrefix(msg, `replication incomplete: consistency "quorum" needs 2 of 3 pods and only 1 answered (`) ||
		!strings.Contains(msg, "pod-1: ") || !strings.Contains(msg, "pod-2: ") {
		t.Errorf("a quorum read with both peers failing: %q", msg)
	}
	wantRead(wire.ConsistencyOne, "elsewhere", false)
	multi, err := a.With(wire.ConsistencyQuorum).MultiCheck(t.Context(), "users", []string{"everywhere"})
	if err != nil || !multi[0] {
		t.Errorf("a quorum multi-check of a value held here, with no peer reachable = %v, %v; want [true]", multi, err)
	}

	c.AwaitDown(a, 2) // the stalled peer's checks failed: the heal cuts none
	c.Heal()
	multi, err = a.With(wire.ConsistencyAll).MultiCheck(t.Context(), "users", []string{"everywhere", "elsewhere", "nowhere"})
	if err != nil || !multi[0] || !multi[1] || multi[2] {
		t.Errorf("an all multi-check once healed = %v, %v; want [true true false]", multi, err)
	}
}
