package replication

import (
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A dump of a partition that arrives after the membership stopped placing it here (a repair or a
// move's pull that started under the older one) leaves the partition released: the merge holds
// it, and the pod arranges the filter again under the membership it holds now.
func TestAMergeAfterAPartitionLeftDoesNotHoldItAgain(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	n := NewNode(Options{Store: store, PodName: "a", Timeout: time.Second})
	defer n.Close()
	members := membersNamed("a", "b")
	if err := n.SetMembership(wire.Membership{Epoch: 1, Self: "a", Members: members, Placement: wire.Placement{ReplicationFactor: 1}}); err != nil {
		t.Fatal(err)
	}
	f, _, err := store.Create("f", filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.8, Partitions: 8}, false)
	if err != nil {
		t.Fatal(err)
	}
	n.arrangeFilter(f)
	held := -1
	for p := range f.Partitions() {
		if f.Holds(p) {
			held = p
			break
		}
	}
	if held < 0 {
		t.Fatal("a holds none of the 8 partitions placed on a and b at R = 1")
	}
	st, release, err := f.CopyState(func(p int) bool { return p == held })
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	if err := n.SetMembership(wire.Membership{Epoch: 2, Self: "a", Members: members, Placement: wire.Placement{Owners: []string{"b"}, ReplicationFactor: 1}}); err != nil {
		t.Fatal(err)
	}
	if f.Holds(held) {
		t.Fatalf("partition %d still held after the membership placed everything on b", held)
	}
	if _, err := n.merge(st); err != nil {
		t.Fatal(err)
	}
	if f.Holds(held) || f.HeldPartitions() != 0 {
		t.Errorf("after the late dump a holds %d partitions (partition %d: %v), want none", f.HeldPartitions(), held, f.Holds(held))
	}
}
