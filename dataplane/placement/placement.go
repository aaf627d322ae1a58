// Package placement decides which pods hold each partition of a filter (a value's partition is
// the engine's filter.PartitionOf). Every pod computes it alike from the filter's name, its
// number of partitions and the membership alone, so no table of owners is ever exchanged.
//
// A partition's owners are chosen by rendezvous hashing: every member gets a score for the pair
// (filter, partition), and the partition goes to the highest scores. A member joining or leaving
// then moves only the partitions it wins or held, about 1/N of them. Rendezvous alone can pile
// several of one filter's partitions on one pod, so the loads are bounded: taken in order, each
// partition goes to the highest-scoring members that hold fewer than Bound of that filter's
// partitions.
package placement

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// LoadFactor is how far above an even share of a filter's partitions one pod may hold: the bound
// of Bound.
const LoadFactor = 1.25

// Bound is the most partitions of one filter, each held by r of n members, that one member
// holds: ⌈LoadFactor · partitions · r / n⌉.
func Bound(partitions, r, n int) int {
	if n <= 0 {
		return 0
	}
	// In integers: ⌈5·P·R / 4N⌉.
	return (5*partitions*r + 4*n - 1) / (4 * n)
}

// Owners answers, for each of a filter's partitions, the r members that hold it, in the order a
// request tries them: the first is the partition's home. r is clamped to [1, len(members)]; the
// members' order does not matter.
//
// Each partition first goes to the r members of highest score. Then every member above Bound,
// taken by name, gives up the partitions it scores lowest for, each to the next member of that
// partition's ranking that is below the bound: only what the bound requires moves, so a change
// of membership moves little more than rendezvous alone does.
func Owners(filter string, partitions int, members []string, r int) [][]string {
	n := len(members)
	if n == 0 || partitions <= 0 {
		return make([][]string, max(partitions, 0))
	}
	r = min(max(r, 1), n)
	bound := Bound(partitions, r, n)
	ranked := make([][]string, partitions) // per partition, every member by score, highest first
	owners := make([][]string, partitions)
	load := make(map[string]int, n)
	scores := make(map[string]uint64, n)
	for p := range owners {
		for _, m := range members {
			scores[m] = score(filter, p, m)
		}
		ranked[p] = slices.SortedFunc(slices.Values(members), func(a, b string) int {
			return cmp.Or(cmp.Compare(scores[b], scores[a]), cmp.Compare(a, b))
		})
		owners[p] = slices.Clone(ranked[p][:r])
		for _, m := range owners[p] {
			load[m]++
		}
	}
	for _, m := range slices.Sorted(slices.Values(members)) {
		for load[m] > bound {
			p, i := weakestHold(ranked, owners, m)
			next := nextBelow(ranked[p], owners[p], load, bound)
			if next == "" {
				break // the bound leaves room; only a membership of duplicate names gets here
			}
			owners[p][i] = next
			load[m]--
			load[next]++
		}
	}
	return owners
}

// weakestHold is the partition member holds with the lowest rank, and member's index among its
// owners.
func weakestHold(ranked, owners [][]string, member string) (partition, index int) {
	worst := -1
	for p := range owners {
		if i := slices.Index(owners[p], member); i >= 0 {
			if rank := slices.Index(ranked[p], member); rank > worst {
				worst, partition, index = rank, p, i
			}
		}
	}
	return partition, index
}

// nextBelow is the first member of ranking that is not among owners and holds fewer than bound.
func nextBelow(ranking, owners []string, load map[string]int, bound int) string {
	for _, m := range ranking {
		if load[m] < bound && !slices.Contains(owners, m) {
			return m
		}
	}
	return ""
}

// score is member's rendezvous score for (the filter name, partition).
func score(name string, partition int, member string) uint64 {
	h := fnv.New64a()
	var buf [binary.MaxVarintLen64]byte
	_, _ = h.Write([]byte(name))
	_, _ = h.Write(buf[:binary.PutUvarint(buf[:], uint64(partition)+1)])
	_, _ = h.Write([]byte(member))
	return filter.Mix(h.Sum64())
}
