package replication

import (
	"fmt"
	"slices"

	"github.com/bloomery/bloomery/dataplane/placement"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A membership places each partition of each filter on some of its members (wire.Placement). A
// membership whose placement puts every partition on every member, with no move under way, is
// served as a cluster of full replicas: every pod holds everything, a write is applied where it
// arrives (a check-and-set at the filter's home) and sent to every peer. Any other placement is
// served by routing: every request for a value goes to the owners of the value's partition.

// resolved is a wire.Placement against the members: owners by name, and R.
type resolved struct {
	owners []string
	r      int
}

func resolve(p wire.Placement, members []wire.Member) resolved {
	owners := p.Owners
	if len(owners) == 0 {
		owners = make([]string, len(members))
		for i, m := range members {
			owners[i] = m.Name
		}
	}
	r := p.ReplicationFactor
	if r <= 0 || r > len(owners) {
		r = len(owners)
	}
	return resolved{owners: slices.Sorted(slices.Values(owners)), r: r}
}

// full reports whether the placement puts every partition on every member.
func (r resolved) full(members []wire.Member) bool { return r.r == len(members) }

// validatePlacement checks a membership's placements: owners are named once, and R is between 0
// and their number. An owner need not be a member: a pod away for a moment stays an owner, and
// the other owners serve its partitions meanwhile; a previous owner may be gone for good.
func validatePlacement(m wire.Membership) error {
	check := func(what string, p wire.Placement) error {
		seen := make(map[string]bool, len(p.Owners))
		for i, o := range p.Owners {
			if seen[o] {
				return fmt.Errorf("%sowners[%d]: %q appears twice", what, i, o)
			}
			seen[o] = true
		}
		owners := len(p.Owners)
		if owners == 0 {
			owners = len(m.Members)
		}
		if p.ReplicationFactor < 0 || p.ReplicationFactor > owners {
			return fmt.Errorf("%sreplicationFactor: must be between 1 and the %d owners, got %d", what, owners, p.ReplicationFactor)
		}
		return nil
	}
	if err := check("", m.Placement); err != nil {
		return err
	}
	if m.Previous != nil {
		return check("previous.", *m.Previous)
	}
	return nil
}

// Route says where the partitions of one filter live under one membership.
type Route struct {
	self    string
	members map[string]wire.Member
	// owners[p] are partition p's owners under the membership's placement, its home first;
	// previous[p] under the previous placement while a move is under way, else nil.
	owners, previous [][]string
	// ended[p] are partition p's writers under the moving membership that this one ended, while
	// a member may still hold it (Node.endMove), else nil; endedReaders[p] the owners that such
	// a member reads it from.
	ended, endedReaders [][]string
	// writerSets are the distinct Writers of the partitions, and writerSet[p] partition p's
	// index among them: a write is sent once to each set.
	writerSets [][]string
	writerSet  []int
	// counted[i] is Counted of the partitions of writerSets[i].
	counted [][][]string
}

// newRoute places a filter of partitions partitions under m. ended, when not nil, is the moving
// membership m ended, which some member may still hold: its writers stay writers.
func newRoute(m wire.Membership, name string, partitions int, ended *wire.Membership) *Route {
	rt := &Route{self: m.Self, members: make(map[string]wire.Member, len(m.Members))}
	for _, member := range m.Members {
		rt.members[member.Name] = member
	}
	cur := resolve(m.Placement, m.Members)
	rt.owners = placement.Owners(name, partitions, cur.owners, cur.r)
	if m.Previous != nil {
		prev := resolve(*m.Previous, m.Members)
		rt.previous = placement.Owners(name, partitions, prev.owners, prev.r)
	}
	if ended != nil {
		before := newRoute(*ended, name, partitions, nil)
		rt.ended, rt.endedReaders = make([][]string, partitions), make([][]string, partitions)
		for p := range partitions {
			rt.ended[p], rt.endedReaders[p] = before.Writers(p), before.owners[p]
			if before.previous != nil {
				rt.endedReaders[p] = before.previous[p]
			}
		}
	}
	rt.writerSet = make([]int, partitions)
	for p := range partitions {
		w, counted := rt.Writers(p), rt.Counted(p)
		i := slices.IndexFunc(rt.writerSets, func(set []string) bool { return slices.Equal(set, w) })
		if i >= 0 && !slices.EqualFunc(rt.counted[i], counted, slices.Equal) {
			i = -1 // the same writers, counted otherwise: a set of its own
		}
		if i < 0 {
			i = len(rt.writerSets)
			rt.writerSets, rt.counted = append(rt.writerSets, w), append(rt.counted, counted)
		}
		rt.writerSet[p] = i
	}
	return rt
}

// WriterSets are the distinct writers of the partitions; WriterSet(p) is partition p's index
// among them.
func (rt *Route) WriterSets() [][]string { return rt.writerSets }

// CountedSet is Counted of the partitions of WriterSets()[i].
func (rt *Route) CountedSet(i int) [][]string { return rt.counted[i] }

// WriterSet is partition p's index in WriterSets.
func (rt *Route) WriterSet(p int) int { return rt.writerSet[p] }

// Partitions is how many partitions the route places.
func (rt *Route) Partitions() int { return len(rt.owners) }

// Readers are the members that a read of partition p asks, in order: during a move the previous
// owners, which hold everything, else the owners. It is never empty.
func (rt *Route) Readers(p int) []string {
	if rt.previous != nil {
		if readers := rt.present(rt.previous[p]); len(readers) > 0 {
			return readers
		}
	}
	// No previous owner is left: the new ones hold what remains.
	if readers := rt.present(rt.owners[p]); len(readers) > 0 {
		return readers
	}
	return rt.owners[p] // none is a member: requests fail until one is
}

// ReadOrder is Readers with this pod first when it is one: a read it can answer needs no hop.
func (rt *Route) ReadOrder(p int) []string {
	readers := rt.Readers(p)
	i := slices.Index(readers, rt.self)
	if i <= 0 {
		return readers
	}
	return slices.Concat([]string{rt.self}, readers[:i], readers[i+1:])
}

// present is the names that are members: a previous owner may have left.
func (rt *Route) present(names []string) []string {
	out := names[:0:0]
	for _, name := range names {
		if _, ok := rt.members[name]; ok {
			out = append(out, name)
		}
	}
	return out
}

// Writers are the owners a write of partition p goes to: the previous owners during a move, then
// the owners, so that both placements hold every write; and, at the end of a move, the writers
// of the move ended too, while a member may still read from them. A consistency level counts them
// all, members or not (Counted): a write to a partition with an owner away waits for it like any
// other.
func (rt *Route) Writers(p int) []string {
	if rt.previous == nil && rt.ended == nil {
		return rt.owners[p]
	}
	var out []string
	if rt.previous != nil {
		out = slices.Clone(rt.previous[p])
	}
	if rt.ended != nil {
		for _, o := range rt.ended[p] {
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	for _, o := range rt.owners[p] {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// Counted are the groups of partition p's writers that a consistency level counts each on its
// own, or nil when it counts them as one: every set of pods that a read of p may ask, so that a
// write at level W meets a read at level R whenever R + W exceeds that set, which a level counted
// over the union of the sets would not promise. During a move a read asks the previous owners,
// and once it has ended the owners; at the end of a move, a member still holding the moving
// membership reads from the owners that membership names (Readers).
func (rt *Route) Counted(p int) [][]string {
	if rt.previous == nil && rt.ended == nil {
		return nil
	}
	groups := [][]string{rt.owners[p]}
	if rt.previous != nil {
		groups = append(groups, rt.previous[p])
	}
	if rt.ended != nil {
		groups = append(groups, rt.endedReaders[p])
	}
	return groups
}

// ownerAway reports whether one of partition p's owners is not a member.
func (rt *Route) ownerAway(p int) bool { return len(rt.present(rt.owners[p])) < len(rt.owners[p]) }

// Owns reports whether this pod owns partition p under the membership's placement.
func (rt *Route) Owns(p int) bool { return slices.Contains(rt.owners[p], rt.self) }

// Keeps reports whether this pod holds partition p: it owns it, or owned it before the move
// under way and serves its reads until the move ends, or was a writer of the move just ended
// and serves the reads of the members that still hold it.
func (rt *Route) Keeps(p int) bool {
	return rt.Owns(p) || rt.previous != nil && slices.Contains(rt.previous[p], rt.self) ||
		rt.ended != nil && slices.Contains(rt.ended[p], rt.self)
}

// Moving reports whether this pod owns partition p anew in the move under way: it pulls the
// partition from the previous owners.
func (rt *Route) Moving(p int) bool {
	return rt.previous != nil && rt.Owns(p) && !slices.Contains(rt.previous[p], rt.self)
}

// PreviousOwners are partition p's owners before the move under way that are still members
// (nil without a move).
func (rt *Route) PreviousOwners(p int) []string {
	if rt.previous == nil {
		return nil
	}
	return rt.present(rt.previous[p])
}

// Member is the member of that name.
func (rt *Route) Member(name string) wire.Member { return rt.members[name] }

// Self is this pod's name.
func (rt *Route) Self() string { return rt.self }
