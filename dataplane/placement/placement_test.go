package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "bloomery-" + strconv.Itoa(i)
	}
	return out
}

// TestOwnersAreBoundedAndDistinct places filters of random names over memberships of every size:
// each partition has r distinct owners, and no member holds more than Bound of one filter's
// partitions.
func TestOwnersAreBoundedAndDistinct(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, partitions := range []int{1, 2, 3, 4, 8, 16, 64, 256} {
		for n := 1; n <= 20; n++ {
			for r := 1; r <= min(n, 4); r++ {
				name := fmt.Sprintf("filter-%x", rng.Uint64())
				owners := Owners(name, partitions, members(n), r)
				if len(owners) != partitions {
					t.Fatalf("%d partitions got %d owner lists", partitions, len(owners))
				}
				load := map[string]int{}
				for p, o := range owners {
					if len(o) != r || len(slices.Compact(slices.Sorted(slices.Values(o)))) != r {
						t.Fatalf("P=%d N=%d R=%d: partition %d has owners %v, want %d distinct", partitions, n, r, p, o, r)
					}
					for _, m := range o {
						load[m]++
					}
				}
				for m, l := range load {
					if bound := Bound(partitions, r, n); l > bound {
						t.Errorf("P=%d N=%d R=%d: %s holds %d partitions of %q, more than the bound %d", partitions, n, r, m, l, name, bound)
					}
				}
			}
		}
	}
}

// TestOwnersDoNotDependOnTheMembersOrder: every pod computes the same placement, whatever order
// its membership lists the pods in.
func TestOwnersDoNotDependOnTheMembersOrder(t *testing.T) {
	m := members(7)
	want := Owners("users", 16, m, 3)
	for range 20 {
		shuffled := slices.Clone(m)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Owners("users", 16, shuffled, 3); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("members %v give %v, want %v", shuffled, got, want)
		}
	}
}

// moved is the share of owner places that change from before to after.
func moved(before, after [][]string) (changed, total int) {
	for p := range before {
		for _, m := range before[p] {
			total++
			if !slices.Contains(after[p], m) {
				changed++
			}
		}
	}
	return changed, total
}

// TestMembershipChangesMoveLittle adds a pod to ten and removes one, for filters of 8 and of 64
// partitions: the places that change are the new pod's share or the removed pod's, plus what the
// bound, which follows the number of pods, moves back or away; never most of them.
func TestMembershipChangesMoveLittle(t *testing.T) {
	ten, eleven, nine := members(10), members(11), members(9)
	for _, partitions := range []int{8, 64} {
		var grow, shrink, total int
		for i := range 500 {
			name := "filter-" + strconv.Itoa(i)
			before := Owners(name, partitions, ten, 2)
			c, n := moved(before, Owners(name, partitions, eleven, 2))
			grow += c
			total += n
			c, _ = moved(before, Owners(name, partitions, nine, 2))
			shrink += c
		}
		for _, step := range []struct {
			what    string
			changed int
			ideal   float64
		}{
			{"adding an 11th pod", grow, 1.0 / 11},
			{"removing the 10th pod", shrink, 1.0 / 10},
		} {
			share := float64(step.changed) / float64(total)
			t.Logf("P=%d: %s moved %.3f of the owner places (rendezvous alone: %.3f)", partitions, step.what, share, step.ideal)
			if share > 2.5*step.ideal {
				t.Errorf("P=%d: %s moved %.3f of the owner places, more than 2.5 times the %.3f of rendezvous alone", partitions, step.what, share, step.ideal)
			}
		}
	}
}
