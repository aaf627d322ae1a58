package replication

import (
	"context"
	"slices"
	"strings"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// PlacedKeys are keys added to a filter whose partitions live on Writers: this pod among them
// when it applied the keys (Applied). Counted, when not nil, are the groups of Writers that a
// consistency level counts each on its own (Route.Counted); nil counts Writers as one.
type PlacedKeys struct {
	Writers []string
	Counted [][]string
	Keys    []string
	Applied bool
}

// AddPlaced is Replicate for keys added to a filter whose partitions are placed on some pods
// (generation names its incarnation): each peer gets one write of all the keys it is a writer
// of, all peers at once, and level counts each set's writers (each of its Counted groups). A
// create, when given, goes to those peers ahead of the keys, and its outcome is not waited for.
// homeEpoch, when not 0, is the epoch under which this pod served the keys as their home
// (ServeAsHome): the peers fence them. It waits until every set has its acknowledgements, at
// most the replication timeout, and errs for the first set that falls short.
func (n *Node) AddPlaced(ctx context.Context, level wire.Consistency, name string, generation int64, sets []PlacedKeys, create *peer.Op, homeEpoch uint64) error {
	self := n.members.Self()
	tallies, groups, talliesOf := placedTallies(level, self, sets)
	var targets []*peer.Sender
	var keys [][]string // each target's
	var tallied [][]int // the tallies each target counts toward
	for _, s := range n.currentSenders() {
		var of, counts []int
		count := 0
		for i, set := range sets {
			if slices.Contains(set.Writers, s.Name()) {
				of = append(of, i)
				count += len(set.Keys)
				for _, j := range talliesOf[i] {
					if slices.Contains(groups[j], s.Name()) {
						tallies[j].sent++
						counts = append(counts, j)
					}
				}
			}
		}
		if len(of) == 0 {
			continue
		}
		ks := make([]string, 0, count)
		for _, i := range of {
			ks = append(ks, sets[i].Keys...)
		}
		targets, keys, tallied = append(targets, s), append(keys, ks), append(tallied, counts)
	}
	acks := make(chan peer.Ack, len(targets))
	ignored := make(chan peer.Ack, len(targets))
	for i, s := range targets {
		if create != nil {
			s.Enqueue(*create, peer.AckTo{Ch: ignored, Peer: i})
		}
		n.stats.ReplicatedOps.Add(1)
		op := peer.Op{Kind: peer.OpAdd, Name: name, Generation: generation, Keys: keys[i]}
		if homeEpoch != 0 {
			op.HomeEpoch, op.Home = homeEpoch, self
		}
		s.Enqueue(op, peer.AckTo{Ch: acks, Peer: i})
	}

	short := n.awaitTallies(ctx, acks, tallies, func(target int) []int { return tallied[target] })
	if short < 0 {
		return nil
	}
	t := tallies[short]
	return t.shortfall("consistency %q needs %d of the %d pods that hold the keys' partitions (%s) and %d acknowledged (%s)",
		level, t.need, len(groups[short]), strings.Join(groups[short], ", "), t.acked, strings.Join(t.failures, "; "))
}

// placedTallies are the tallies of sets at level, self's acknowledgement counted where it applied
// them: one for each group a set counts, which groups[i] lists for tallies[i]; talliesOf[i] are
// set i's.
func placedTallies(level wire.Consistency, self string, sets []PlacedKeys) (tallies []tally, groups [][]string, talliesOf [][]int) {
	talliesOf = make([][]int, len(sets))
	for i, set := range sets {
		counted := set.Counted
		if counted == nil {
			counted = [][]string{set.Writers}
		}
		for _, g := range counted {
			t := tally{need: level.Count(len(g))}
			if set.Applied && slices.Contains(g, self) {
				t.mine, t.acked = 1, 1
			}
			talliesOf[i] = append(talliesOf[i], len(tallies))
			tallies, groups = append(tallies, t), append(groups, g)
		}
	}
	return tallies, groups, talliesOf
}
