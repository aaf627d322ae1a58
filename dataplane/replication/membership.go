package replication

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Membership is what a pod was last told about its cluster. Until it is told, it is a cluster of
// one: itself, with no peers, behaving exactly as a single server.
type Membership struct {
	mu      sync.RWMutex
	current wire.Membership
	// told is whether current was told (Set), not restored from before a restart (Restore).
	told  bool
	peers []wire.Member
	// changed is closed and replaced at every change, so that waiters wake up.
	changed chan struct{}
}

// NewMembership is the membership of a pod that has not been told any.
func NewMembership() *Membership { return &Membership{changed: make(chan struct{})} }

// MaxMembers bounds the pods of one cluster: every pod sends every write to every other.
const MaxMembers = 256

// Validate checks a membership on its own: an epoch between 1 (0 means never told) and MaxEpoch,
// at most MaxMembers members, Self among them, names unique, each URL a scheme, a host and a port.
func Validate(m wire.Membership) error {
	if m.Epoch == 0 {
		return errors.New("epoch: must be greater than 0")
	}
	if m.Epoch > wire.MaxEpoch {
		return fmt.Errorf("epoch: must be at most %d, got %d", uint64(wire.MaxEpoch), m.Epoch)
	}
	if len(m.Members) > MaxMembers {
		return fmt.Errorf("members: at most %d, got %d", MaxMembers, len(m.Members))
	}
	seen := make(map[string]bool, len(m.Members))
	self := false
	for i, member := range m.Members {
		if member.Name == "" {
			return fmt.Errorf("members[%d].name: must not be empty", i)
		}
		if seen[member.Name] {
			return fmt.Errorf("members[%d].name: %q appears twice", i, member.Name)
		}
		seen[member.Name] = true
		if err := checkMemberURL(member.URL); err != nil {
			return fmt.Errorf("members[%d].url: %q %w", i, member.URL, err)
		}
		self = self || member.Name == m.Self
	}
	if len(m.Members) > 0 && !self {
		return fmt.Errorf("self: %q is not one of the members", m.Self)
	}
	return validatePlacement(m)
}

// checkMemberURL accepts the base URL of a pod's API: http or https, a host and a port, nothing
// else. Peers call paths under it, so a path, a query or credentials in it would be sent along.
func checkMemberURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("is not an http(s) URL with a host")
	case u.Port() == "":
		return errors.New("has no port")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return errors.New("must be a scheme, a host and a port only")
	}
	return nil
}

// Set replaces the membership unless its epoch is lower than the one held. The same epoch is
// accepted again (the operator repeats a push it is unsure of).
func (ms *Membership) Set(m wire.Membership) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if err := ms.accepts(m); err != nil {
		return err
	}
	ms.install(m)
	ms.told = true
	return nil
}

// Accepts reports why Set would refuse m, nil when it would take it.
func (ms *Membership) Accepts(m wire.Membership) error {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.accepts(m)
}

func (ms *Membership) accepts(m wire.Membership) error {
	if err := Validate(m); err != nil {
		return err
	}
	if m.Epoch < ms.current.Epoch {
		return fmt.Errorf("%w: this pod holds epoch %d, got %d", peer.ErrStaleEpoch, ms.current.Epoch, m.Epoch)
	}
	if m.Epoch == ms.current.Epoch && !Same(m, ms.current) {
		return fmt.Errorf("%w: epoch %d already names another membership; a change needs a higher epoch", peer.ErrStaleEpoch, m.Epoch)
	}
	return nil
}

// Restore installs the membership the pod held before it restarted, as long as it was told none
// since: its peers are counted and sent writes again, but Known stays false until it is told.
func (ms *Membership) Restore(m wire.Membership) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if err := Validate(m); err != nil {
		return err
	}
	if ms.current.Epoch != 0 {
		return fmt.Errorf("%w: this pod was told epoch %d since it started", peer.ErrStaleEpoch, ms.current.Epoch)
	}
	ms.install(m)
	return nil
}

// install makes m the membership held; ms.mu is held.
func (ms *Membership) install(m wire.Membership) {
	m.Members = slices.Clone(m.Members)
	ms.current = m
	ms.peers = ms.peers[:0:0]
	for _, member := range m.Members {
		if member.Name != m.Self {
			ms.peers = append(ms.peers, member)
		}
	}
	close(ms.changed)
	ms.changed = make(chan struct{})
}

// Same reports whether two memberships name the same pods and placements, whatever their order
// and epoch.
func Same(a, b wire.Membership) bool {
	samePlacement := func(a, b *wire.Placement) bool {
		if a == nil || b == nil {
			return a == b
		}
		return a.ReplicationFactor == b.ReplicationFactor && slices.Equal(slices.Sorted(slices.Values(a.Owners)), slices.Sorted(slices.Values(b.Owners)))
	}
	return a.Self == b.Self && slices.Equal(sorted(a.Members), sorted(b.Members)) &&
		samePlacement(&a.Placement, &b.Placement) && samePlacement(a.Previous, b.Previous)
}

func sorted(members []wire.Member) []wire.Member {
	return slices.SortedFunc(slices.Values(members), func(a, b wire.Member) int { return strings.Compare(a.Name, b.Name) })
}

// Get answers the current membership.
func (ms *Membership) Get() wire.Membership {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	m := ms.current
	m.Members = slices.Clone(m.Members)
	m.Owners = slices.Clone(m.Owners)
	if m.Members == nil {
		m.Members = []wire.Member{}
	}
	return m
}

// Epoch is the epoch of the membership held (0 before the first).
func (ms *Membership) Epoch() uint64 {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.current.Epoch
}

// Self is this pod's name in the membership ("" before the first).
func (ms *Membership) Self() string {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.current.Self
}

// Peers are the members other than this pod.
func (ms *Membership) Peers() []wire.Member {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.peers
}

// Known reports whether the pod was told its membership since it started, and a channel closed at
// the next change.
func (ms *Membership) Known() (bool, <-chan struct{}) {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.told, ms.changed
}

// Size is the number of pods in the cluster, this one included.
func (ms *Membership) Size() int {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return len(ms.peers) + 1
}

// HomeOrder lists the members in the rendezvous order of a filter name: the first is the
// filter's home, the next takes over when it is down. An empty list means no membership.
func (ms *Membership) HomeOrder(name string) (order []wire.Member, self string) {
	ms.mu.RLock()
	members, self := ms.current.Members, ms.current.Self
	ms.mu.RUnlock()
	return rendezvous(name, members), self
}

// rendezvous orders members by the highest random weight of (name, member): every pod computes
// the same order from the same members, and removing a member only moves the filters it was home
// of.
func rendezvous(name string, members []wire.Member) []wire.Member {
	type weighted struct {
		m wire.Member
		w uint64
	}
	ws := make([]weighted, len(members))
	for i, m := range members {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(m.Name))
		ws[i] = weighted{m, filter.Mix(h.Sum64())}
	}
	slices.SortFunc(ws, func(a, b weighted) int {
		if a.w != b.w {
			if a.w > b.w {
				return -1
			}
			return 1
		}
		return strings.Compare(a.m.Name, b.m.Name)
	})
	out := make([]wire.Member, len(ws))
	for i, w := range ws {
		out[i] = w.m
	}
	return out
}
