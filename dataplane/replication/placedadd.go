package replication

import (
	"context"
	"slices"
	"strings"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// PlacedKeys are keys added to a filter whose partitions live on Writers: this pod among them
// when it applied the keys (Applied).
type PlacedKeys struct {
	Writers []string
	Keys    []string
	Applied bool
}

// AddPlaced is Replicate for keys added to a filter whose partitions are placed on some pods
// (generation names its incarnation): each peer gets one write of all the keys it is a writer
// of, all peers at once, and level counts each set's writers. A create, when given, goes to
// those peers ahead of the keys, and its outcome is not waited for. homeEpoch, when not 0, is the
// epoch under which this pod served the keys as their home (ServeAsHome): the peers fence them. It waits until every set has
// its acknowledgements, at most the replication timeout, and errs for the first set that falls
// short.
func (n *Node) AddPlaced(ctx context.Context, level wire.Consistency, name string, generation int64, sets []PlacedKeys, create *peer.Op, homeEpoch uint64) error {
	self := n.members.Self()
	tallies := make([]tally, len(sets))
	for i, set := range sets {
		tallies[i].need = level.Count(len(set.Writers))
		if set.Applied && slices.Contains(set.Writers, self) {
			tallies[i].mine, tallies[i].acked = 1, 1
		}
	}
	var targets []*peer.Sender
	var keys [][]string // each target's
	var setsOf [][]int  // the sets each target is a writer of
	for _, s := range n.currentSenders() {
		var of []int
		count := 0
		for i, set := range sets {
			if slices.Contains(set.Writers, s.Name()) {
				of = append(of, i)
				count += len(set.Keys)
				tallies[i].sent++
			}
		}
		if len(of) == 0 {
			continue
		}
		ks := make([]string, 0, count)
		for _, i := range of {
			ks = append(ks, sets[i].Keys...)
		}
		targets, keys, setsOf = append(targets, s), append(keys, ks), append(setsOf, of)
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

	short := n.awaitTallies(ctx, acks, tallies, func(target int) []int { return setsOf[target] })
	if short < 0 {
		return nil
	}
	t := tallies[short]
	return t.shortfall("consistency %q needs %d of the %d pods that hold the keys' partitions (%s) and %d acknowledged (%s)",
		level, t.need, len(sets[short].Writers), strings.Join(sets[short].Writers, ", "), t.acked, strings.Join(t.failures, "; "))
}
