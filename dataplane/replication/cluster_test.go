package replication

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

func members(names ...string) []wire.Member {
	out := make([]wire.Member, len(names))
	for i, n := range names {
		out[i] = wire.Member{Name: n, URL: "http://" + n + ":8080"}
	}
	return out
}

func TestMembershipEpochOnlyGrows(t *testing.T) {
	ms := NewMembership()
	if known, _ := ms.Known(); known || ms.Size() != 1 {
		t.Fatalf("a new membership: known=%t size=%d, want a cluster of one", known, ms.Size())
	}
	_, changed := ms.Known()
	if err := ms.Set(wire.Membership{Epoch: 2, Self: "a", Members: members("a", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a change did not wake the waiters")
	}
	if ms.Size() != 3 || len(ms.Peers()) != 2 {
		t.Fatalf("size %d, peers %v", ms.Size(), ms.Peers())
	}
	if err := ms.Set(wire.Membership{Epoch: 1, Self: "a", Members: members("a")}); !errors.Is(err, peer.ErrStaleEpoch) {
		t.Fatalf("an older epoch: %v, want peer.ErrStaleEpoch", err)
	}
	if err := ms.Set(wire.Membership{Epoch: 2, Self: "a", Members: members("c", "b", "a")}); err != nil {
		t.Fatalf("the same epoch again: %v", err)
	}
	if err := ms.Set(wire.Membership{Epoch: 2, Self: "a", Members: members("a", "b")}); !errors.Is(err, peer.ErrStaleEpoch) {
		t.Fatalf("the same epoch for another set: %v, want peer.ErrStaleEpoch", err)
	}
	if got := ms.Get(); got.Epoch != 2 || len(got.Members) != 3 {
		t.Fatalf("Get = %+v", got)
	}
}

func TestMembershipValidation(t *testing.T) {
	for _, tc := range []struct {
		m    wire.Membership
		want string
	}{
		{wire.Membership{Epoch: 0, Self: "a", Members: members("a")}, `epoch: must be greater than 0`},
		{wire.Membership{Epoch: 1, Self: "x", Members: members("a", "b")}, `self: "x" is not one of the members`},
		{wire.Membership{Epoch: 1, Self: "a", Members: members("a", "a")}, `members[1].name: "a" appears twice`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{Name: "a", URL: "10.0.0.1:8080"}}}, `members[0].url: "10.0.0.1:8080" is not an http(s) URL with a host`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{URL: "http://a"}}}, `members[0].name: must not be empty`},
		{wire.Membership{Epoch: wire.MaxEpoch + 1, Self: "a", Members: members("a")}, `epoch: must be at most 9007199254740991, got 9007199254740992`},
		{wire.Membership{Epoch: 1<<64 - 1, Self: "a", Members: members("a")}, `epoch: must be at most 9007199254740991, got 18446744073709551615`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{Name: "a", URL: "http://a"}}}, `members[0].url: "http://a" has no port`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{Name: "a", URL: "http://a:1/x"}}}, `members[0].url: "http://a:1/x" must be a scheme, a host and a port only`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{Name: "a", URL: "http://a:1?to=b"}}}, `members[0].url: "http://a:1?to=b" must be a scheme, a host and a port only`},
		{wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{{Name: "a", URL: "http://u:p@a:1"}}}, `members[0].url: "http://u:p@a:1" must be a scheme, a host and a port only`},
		{wire.Membership{Epoch: 1, Self: "a", Members: members(numbered(MaxMembers + 1)...)}, `members: at most 256, got 257`},
	} {
		if err := Validate(tc.m); err == nil || err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v, want %q", tc.m, err, tc.want)
		}
	}
}

func numbered(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("pod-", i)
	}
	return names
}

// Replicated creates and deletes far ahead of the pod's clock are refused: their generation would
// outlive every later create of the name.
func TestGenerationsAheadOfTheClockAreRefused(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	n := NewNode(Options{Store: store})
	defer n.Close()
	opts := filter.Options{Capacity: 100, FPP: 0.01}
	if _, _, err := store.Create("f", opts, false); err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(MaxGenerationSkew + time.Minute).UnixNano()
	for _, op := range []peer.Op{
		{Kind: peer.OpDelete, Name: "f", Generation: math.MaxInt64},
		{Kind: peer.OpDelete, Name: "f", Generation: ahead},
		{Kind: peer.OpCreate, Name: "f", Generation: ahead, Options: &opts},
	} {
		if _, err := n.Apply([]peer.Op{op}); !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), "ahead of this pod's clock") {
			t.Errorf("%s at generation %d: %v, want ErrBadOp naming the clock", op.Kind, op.Generation, err)
		}
	}
	if _, err := store.Get("f"); err != nil {
		t.Errorf("the filter after refused ops: %v", err)
	}
	if len(store.Tombstones()) != 0 {
		t.Errorf("tombstones after refused deletes: %v", store.Tombstones())
	}
	within := time.Now().Add(time.Minute).UnixNano()
	if applied, err := n.Apply([]peer.Op{{Kind: peer.OpDelete, Name: "f", Generation: within}}); err != nil || applied[0] != peer.Holds {
		t.Errorf("a delete a minute ahead (clocks drift): %v, %v", applied, err)
	}
}

// Every pod computes the same home order; removing a member moves only the filters it was home
// of; homes spread evenly.
func TestRendezvousOrder(t *testing.T) {
	all := members("pod-0", "pod-1", "pod-2", "pod-3")
	homes := map[string]int{}
	moved := 0
	const filters = 4000
	for i := range filters {
		name := fmt.Sprintf("filter-%d", i)
		order := rendezvous(name, all)
		reversed := rendezvous(name, []wire.Member{all[3], all[2], all[1], all[0]})
		for j := range order {
			if order[j] != reversed[j] {
				t.Fatalf("the order of %s depends on the order of the members", name)
			}
		}
		homes[order[0].Name]++
		without := rendezvous(name, all[:3])
		if order[0].Name != "pod-3" && without[0] != order[0] {
			moved++
		}
		if order[0].Name == "pod-3" && without[0] != order[1] {
			t.Fatalf("%s: without its home, the next in order must take over", name)
		}
	}
	if moved != 0 {
		t.Errorf("removing pod-3 moved %d filters homed elsewhere", moved)
	}
	for name, n := range homes {
		if n < filters/4*8/10 || n > filters/4*12/10 {
			t.Errorf("%s is home of %d of %d filters, want about %d", name, n, filters, filters/4)
		}
	}
}

func TestApplyFollowsGenerations(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	n := NewNode(Options{Store: store})
	opts := filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5}
	gen := time.Now().UnixNano()
	applied, err := n.Apply([]peer.Op{
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"early"}}, // before its create: missed
		{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"a"}},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"b", "c"}},
		{Kind: peer.OpAdd, Name: "f", Generation: gen - 1, Keys: []string{"older"}}, // an incarnation replaced since
		{Kind: peer.OpCreate, Name: "g", Generation: gen, Options: &opts},
		{Kind: peer.OpDelete, Name: "g", Generation: gen},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []peer.Outcome{peer.Lacks, peer.Holds, peer.Holds, peer.Holds, peer.Holds, peer.Holds, peer.Holds}; !slices.Equal(applied, want) {
		t.Fatalf("applied = %v, want %v", applied, want)
	}
	f, err := store.Get("f")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if !f.Check(k) {
			t.Errorf("f lacks %q", k)
		}
	}
	if f.Check("older") || f.Generation() != gen {
		t.Errorf("a write to an older incarnation reached the filter")
	}
	if _, err := store.Get("g"); err == nil {
		t.Error("g survived its replicated delete")
	}
	if _, err := n.Apply([]peer.Op{{Kind: "merge", Name: "f", Generation: gen}}); !errors.Is(err, ErrBadOp) {
		t.Errorf("an unknown op: %v, want ErrBadOp", err)
	}
	if _, err := n.Apply([]peer.Op{{Kind: peer.OpCreate, Name: "h", Generation: gen}}); !errors.Is(err, ErrBadOp) {
		t.Errorf("a create without options: %v, want ErrBadOp", err)
	}
}

// A change of expiry applies to the incarnation it names, the newest stamp winning whatever the
// order the changes arrive in; one for an incarnation this pod lacks is not applied.
func TestApplyExpiryTakesTheNewest(t *testing.T) {
	store := filter.NewStore(filter.Limits{}, nil)
	n := NewNode(Options{Store: store})
	opts := filter.Options{Capacity: 1000, FPP: 0.01}
	gen := time.Now().UnixNano()
	deadline := time.Unix(0, gen).Add(time.Hour)
	newer := &filter.Expiry{Mode: filter.ExpiryAt, At: deadline, Stamp: gen + 2, Origin: "a"}
	older := &filter.Expiry{Mode: filter.ExpiryNever, Stamp: gen + 1, Origin: "b"}
	applied, err := n.Apply([]peer.Op{
		{Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: older}, // before the create: missed
		{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: newer},
		{Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: older},     // arrives late, loses
		{Kind: peer.OpExpire, Name: "f", Generation: gen + 5, Expiry: older}, // an incarnation not held
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []peer.Outcome{peer.Lacks, peer.Holds, peer.Holds, peer.Holds, peer.Lacks}; !slices.Equal(applied, want) {
		t.Errorf("applied = %v, want %v", applied, want)
	}
	if f, _ := store.Get("f"); f == nil || !f.ExpiryOverride().Equal(*newer) {
		t.Errorf("f's override = %+v, want the newest, %+v", f.ExpiryOverride(), *newer)
	}
	for name, op := range map[string]peer.Op{
		"no expiry":       {Kind: peer.OpExpire, Name: "f", Generation: gen},
		"no mode":         {Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: &filter.Expiry{Stamp: gen}},
		"stamp 0":         {Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: &filter.Expiry{Mode: filter.ExpiryNever}},
		"stamp far ahead": {Kind: peer.OpExpire, Name: "f", Generation: gen, Expiry: &filter.Expiry{Mode: filter.ExpiryNever, Stamp: gen + int64(time.Hour)}},
	} {
		if _, err := n.Apply([]peer.Op{op}); !errors.Is(err, ErrBadOp) {
			t.Errorf("%s: %v, want ErrBadOp", name, err)
		}
	}
}

func TestMembershipNamingAnotherPodIsRefused(t *testing.T) {
	n := NewNode(Options{Store: filter.NewStore(filter.Limits{}, nil), PodName: "pod-1"})
	err := n.SetMembership(wire.Membership{Epoch: 1, Self: "pod-0", Members: members("pod-0", "pod-1")})
	if err == nil || !strings.Contains(err.Error(), `this pod is "pod-1", not "pod-0"`) {
		t.Fatalf("a membership for another pod: %v", err)
	}
	if err := n.SetMembership(wire.Membership{Epoch: 1, Self: "pod-1", Members: members("pod-0", "pod-1")}); err != nil {
		t.Fatal(err)
	}
	n.Close()
}

// A home that did the write but could not replicate it answered for it; a home that did not serve
// the request did not, and the caller answers code 13 for it.
func TestForwardKeepsAHomesReplicationFailure(t *testing.T) {
	net := peer.NewNetwork()
	n := newNode(t, net, "self", Options{})
	answer := func(code int) wire.Member {
		return joinFake(net, "home-"+strconv.Itoa(code), &fakePeer{}, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Error: "x", Code: code})
		})
	}
	a, err := n.Forward(t.Context(), answer(wire.CodeReplication), http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`))
	if err != nil || a.Status != http.StatusServiceUnavailable {
		t.Fatalf("a home's replication failure: %+v, %v; want its answer", a, err)
	}
	if _, err := n.Forward(t.Context(), answer(wire.CodeUnavailable), http.MethodPost, "/v1/bloomfilter/f/check-and-set", "application/json", []byte(`{}`)); err == nil {
		t.Fatal("an unavailable home: no error, want one, which the caller answers with code 13")
	}
}

// Batches stay within the peer's limit however the keys encode.
func TestBatchesStayWithinTheirBudget(t *testing.T) {
	const budget = 64 << 10
	var mu sync.Mutex
	var sizes []int
	net := peer.NewNetwork()
	b := joinFake(net, "b", &fakePeer{apply: func(ops []peer.Op) ([]peer.Outcome, error) {
		mu.Lock()
		sizes = append(sizes, len(peer.AppendOps(nil, ops))) // the encoding is the batch's, byte for byte
		mu.Unlock()
		return make([]peer.Outcome, len(ops)), nil
	}}, nil)
	n := nodeIn(t, net, "self", Options{MaxBatchBytes: budget}, 1, b)
	// Every byte of these keys encodes as six.
	key := strings.Repeat("<>&\x01", 256)
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			_ = n.Replicate(t.Context(), peer.Op{Kind: peer.OpAdd, Name: "f", Generation: 1, Keys: []string{key, key}}, wire.ConsistencyAll)
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) < 2 {
		t.Fatalf("%d batches for 200 writes of 12 KiB each, want several", len(sizes))
	}
	for _, size := range sizes {
		if size > budget {
			t.Errorf("a batch of %d bytes, over the budget of %d", size, budget)
		}
	}
}

// Repair takes a peer's newer override of an incarnation it holds with the same bits, refuses
// one stamped far ahead of its clock, and keeps its own when the peer's is older.
func TestRepairConvergesExpiry(t *testing.T) {
	opts := filter.Options{Capacity: 100, FPP: 0.01}
	gen := time.Now().UnixNano()
	now := time.Now()
	var inv wire.Inventory
	net := peer.NewNetwork()
	b := joinFake(net, "b", &fakePeer{inventory: func() wire.Inventory { return inv }}, nil)
	store := filter.NewStore(filter.Limits{}, nil)
	n := newNode(t, net, "self", Options{Store: store, Timeout: time.Second, Log: slog.New(slog.DiscardHandler)})
	if _, err := store.CreateReplica("f", opts, time.Unix(0, gen), filter.All); err != nil {
		t.Fatal(err)
	}
	f, _ := store.Lookup("f")
	digest := func(e *wire.ExpiryOverride) wire.Inventory {
		d := f.Digest()
		return wire.Inventory{Filters: []wire.Digest{{Name: "f", Generation: d.Generation, Layers: d.Layers(), Expiry: e}}}
	}
	newer := &wire.ExpiryOverride{Mode: "at", At: now.Add(time.Hour).UTC(), Stamp: now.UnixNano(), Origin: "b"}
	inv = digest(newer)
	if rep, err := n.Repair(t.Context(), b, 0); err != nil || rep.Differences != 1 {
		t.Fatalf("Repair = %+v, %v; want one difference", rep, err)
	}
	if got := f.ExpiryOverride(); got.Mode != filter.ExpiryAt || !got.At.Equal(newer.At) || got.Stamp != newer.Stamp {
		t.Errorf("override after repair %+v, want the peer's %+v", got, newer)
	}
	inv = digest(&wire.ExpiryOverride{Mode: "never", Stamp: now.UnixNano() - 1, Origin: "c"})
	if rep, err := n.Repair(t.Context(), b, 0); err != nil || rep.Differences != 0 || f.ExpiryOverride().Mode != filter.ExpiryAt {
		t.Errorf("an older override: %+v, %v, override %+v; want it ignored", rep, err, f.ExpiryOverride())
	}
	inv = digest(&wire.ExpiryOverride{Mode: "never", Stamp: now.Add(time.Hour).UnixNano(), Origin: "c"})
	if _, err := n.Repair(t.Context(), b, 0); err == nil || f.ExpiryOverride().Mode != filter.ExpiryAt {
		t.Errorf("an override stamped an hour ahead: %v, override %+v; want it refused", err, f.ExpiryOverride())
	}
}
