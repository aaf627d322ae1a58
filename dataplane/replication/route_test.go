package replication

import (
	"slices"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/wire"
)

func membersNamed(names ...string) []wire.Member {
	out := make([]wire.Member, len(names))
	for i, n := range names {
		out[i] = wire.Member{Name: n, URL: "http://127.0.0.1:" + string(rune('1'+i)) + "000"}
	}
	return out
}

// A route places each partition on R owners, the same whatever the members' order; during a move
// reads go to the previous owners, writes to both, and a pod keeps what it owns or owned.
func TestRouteOfAMove(t *testing.T) {
	members := membersNamed("a", "b", "c", "d", "e", "f")
	old := wire.Placement{Owners: []string{"a", "b", "c", "d"}, ReplicationFactor: 2}
	m := wire.Membership{Epoch: 2, Self: "e", Members: members, Placement: wire.Placement{ReplicationFactor: 2}, Previous: &old}
	rt := newRoute(m, "f", 16, nil)
	shuffled := m
	shuffled.Members = slices.Clone(members)
	slices.Reverse(shuffled.Members)
	again := newRoute(shuffled, "f", 16, nil)
	moving := 0
	for p := range 16 {
		if !slices.Equal(rt.owners[p], again.owners[p]) {
			t.Fatalf("partition %d: owners %v and %v for the same members in another order", p, rt.owners[p], again.owners[p])
		}
		if len(rt.owners[p]) != 2 || len(rt.previous[p]) != 2 || slices.ContainsFunc(rt.previous[p], func(o string) bool { return o > "d" }) {
			t.Fatalf("partition %d: owners %v, previous %v", p, rt.owners[p], rt.previous[p])
		}
		if !slices.Equal(rt.Readers(p), rt.previous[p]) {
			t.Errorf("partition %d: readers %v during the move, want the previous owners %v", p, rt.Readers(p), rt.previous[p])
		}
		writers := rt.Writers(p)
		for _, o := range slices.Concat(rt.owners[p], rt.previous[p]) {
			if !slices.Contains(writers, o) {
				t.Errorf("partition %d: writers %v lack %s", p, writers, o)
			}
		}
		if rt.Moving(p) != rt.Owns(p) || rt.Keeps(p) != rt.Owns(p) { // e owned nothing before
			t.Errorf("partition %d: owns %v, moving %v, keeps %v", p, rt.Owns(p), rt.Moving(p), rt.Keeps(p))
		}
		if rt.Moving(p) {
			moving++
		}
	}
	if moving == 0 {
		t.Error("a new pod owns no partition after the move")
	}
}

// An owner that is not a member (a pod away) is counted by writes and skipped by reads, unless
// no owner is a member.
func TestRouteSkipsOwnersAway(t *testing.T) {
	m := wire.Membership{Epoch: 1, Self: "a", Members: membersNamed("a", "b", "c"),
		Placement: wire.Placement{Owners: []string{"a", "b", "c", "d"}, ReplicationFactor: 2}}
	if err := Validate(m); err != nil {
		t.Fatalf("an owner away is refused: %v", err)
	}
	rt := newRoute(m, "f", 32, nil)
	away := 0
	for p := range 32 {
		if slices.Contains(rt.owners[p], "d") {
			away++
			if slices.Contains(rt.Readers(p), "d") || len(rt.Readers(p)) != 1 || !slices.Contains(rt.Writers(p), "d") || !rt.ownerAway(p) {
				t.Errorf("partition %d owned by %v: readers %v, writers %v", p, rt.owners[p], rt.Readers(p), rt.Writers(p))
			}
		}
	}
	if away == 0 {
		t.Fatal("the owner away owns nothing; the test proves nothing")
	}
}

func TestMembershipPlacementValidation(t *testing.T) {
	members := membersNamed("a", "b", "c")
	for _, tc := range []struct {
		p, previous *wire.Placement
		want        string
	}{
		{&wire.Placement{ReplicationFactor: 4}, nil, "replicationFactor: must be between 1 and the 3 owners, got 4"},
		{&wire.Placement{Owners: []string{"a", "a"}}, nil, `owners[1]: "a" appears twice`},
		{&wire.Placement{ReplicationFactor: -1}, nil, "replicationFactor"},
		{&wire.Placement{}, &wire.Placement{Owners: []string{"a"}, ReplicationFactor: 2}, "previous.replicationFactor: must be between 1 and the 1 owners, got 2"},
	} {
		m := wire.Membership{Epoch: 1, Self: "a", Members: members, Placement: *tc.p, Previous: tc.previous}
		if err := Validate(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v / %+v: %v, want an error saying %q", tc.p, tc.previous, err, tc.want)
		}
	}
}

// A cluster of full replicas that grows, and so moves from every partition on its old members to
// every partition on all, is served as full replicas; any other placement or move is routed.
func TestPlacedMemberships(t *testing.T) {
	members := membersNamed("a", "b", "c")
	for _, tc := range []struct {
		p, previous *wire.Placement
		placed      bool
	}{
		{&wire.Placement{}, nil, false},
		{&wire.Placement{ReplicationFactor: 3}, nil, false},
		{&wire.Placement{ReplicationFactor: 3}, &wire.Placement{Owners: []string{"a", "b"}, ReplicationFactor: 2}, false},
		{&wire.Placement{ReplicationFactor: 2}, nil, true},
		{&wire.Placement{Owners: []string{"a", "b"}, ReplicationFactor: 2}, nil, true},
		{&wire.Placement{ReplicationFactor: 3}, &wire.Placement{ReplicationFactor: 2}, true},
	} {
		m := wire.Membership{Epoch: 1, Self: "a", Members: members, Placement: *tc.p, Previous: tc.previous}
		if got := placedMembership(m); got != tc.placed {
			t.Errorf("%+v / %+v: placed %v, want %v", tc.p, tc.previous, got, tc.placed)
		}
	}
	if placedMembership(wire.Membership{}) {
		t.Error("a pod never told is placed")
	}
}
