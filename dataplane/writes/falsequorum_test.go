package writes_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	dppeer "github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
	"github.com/bloomery/bloomery/internal/await"
)

// memPodsWith are write services of three pods, a, b and c, and their nodes, that reach each
// other through a network in memory, all holding a filter whose home is a (the one answered,
// a's); each node's options are changed by configure, when not nil.
func memPodsWith(t *testing.T, configure func(name string, o *replication.Options)) (*dppeer.Network, map[string]*writes.Service, map[string]*replication.Node, *filter.Filter) {
	t.Helper()
	net := dppeer.NewNetwork()
	names := []string{"a", "b", "c"}
	members := make([]wire.Member, len(names))
	for i, n := range names {
		members[i] = wire.Member{Name: n, URL: "http://" + n + ":8090"}
	}
	home := replication.NewMembership()
	if err := home.Set(wire.Membership{Epoch: 1, Self: "a", Members: members}); err != nil {
		t.Fatal(err)
	}
	name := "f"
	for i := 0; ; i++ {
		if order, _ := home.HomeOrder(name); order[0].Name == "a" {
			break
		}
		name = "f" + strconv.Itoa(i)
	}
	services, nodes := map[string]*writes.Service{}, map[string]*replication.Node{}
	var fa *filter.Filter
	for _, pod := range names {
		store := filter.NewStore(filter.Limits{}, nil)
		opts := replication.Options{Store: store, PodName: pod, Timeout: time.Second, Transport: net.From(pod)}
		if configure != nil {
			configure(pod, &opts)
		}
		node := replication.NewNode(opts)
		t.Cleanup(node.Close)
		net.Join(pod, dppeer.NewServer(dppeer.ServerOptions{Host: node, Store: store, MaxRequestBytes: 1 << 20}), checkHandler(store))
		if err := node.SetMembership(wire.Membership{Epoch: 1, Self: pod, Members: members}); err != nil {
			t.Fatal(err)
		}
		nodes[pod] = node
		services[pod] = writes.New(store, node, slog.New(slog.DiscardHandler))
		f, _, err := store.Create(name, filter.Options{Capacity: 1000, FPP: 0.01}, false)
		if err != nil {
			t.Fatal(err)
		}
		if pod == "a" {
			fa = f
		}
	}
	return net, services, nodes, fa
}

// checkHandler serves a peer's multi-checks from store, as the internal API does.
func checkHandler(store *filter.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rest, isCheck := strings.CutSuffix(r.URL.Path, "/"+string(wire.OpMultiCheck))
		_, name, _ := strings.Cut(rest, "/bloomfilter/")
		f, held := store.Lookup(name)
		var body struct {
			Values []string `json:"values"`
		}
		if !isCheck || !held || json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "not a multi-check of a filter held here", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(f.CheckMany(body.Values))
	}
}

// A check-and-set that answers false waits for a quorum of the pods whatever the level it asks,
// so that no later check-and-set of the value, on any pod, answers false again; one that answers
// true, and a set, wait for no more than they ask.
func TestAFalseIsAnsweredOnlyOnceAQuorumHoldsIt(t *testing.T) {
	net, pods, nodes, f := memPodsWith(t, nil)
	net.Cut("a", "b")
	net.Cut("a", "c")
	a := pods["a"]
	present, err := a.CheckAndSet(t.Context(), wire.ConsistencyOne, f, "new")
	if present || !errors.Is(err, writes.ErrReplication) {
		t.Fatalf("a check-and-set of a new value at one, cut off from every peer = %v, %v; want false with ErrReplication", present, err)
	}
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyOne, f, "new"); !present || err != nil {
		t.Errorf("a check-and-set of a value present at one = %v, %v; want true, needing no peer", present, err)
	}
	if err := a.Set(t.Context(), wire.ConsistencyOne, f, "set"); err != nil {
		t.Errorf("a set at one, cut off: %v; want it answered alone", err)
	}
	if got, err := a.CheckAndSetMany(t.Context(), wire.ConsistencyOne, f, []string{"new", "other"}); !errors.Is(err, writes.ErrReplication) || len(got) != 2 || !got[0] || got[1] {
		t.Errorf("a multi-check-and-set with a new value at one, cut off = %v, %v; want [true false] with ErrReplication", got, err)
	}

	net.Heal()
	// a holds b and c down until a probe finds them: it does not call them meanwhile.
	await.True(t, 10*time.Second, "a to call its peers again", func() bool { return len(nodes["a"].PeersDown()) == 0 })
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyOne, f, "newer"); present || err != nil {
		t.Errorf("a check-and-set of a new value at one, healed = %v, %v; want false", present, err)
	}
}

func TestCheckAndSetLevel(t *testing.T) {
	for _, tc := range []struct {
		level   wire.Consistency
		present []bool
		want    wire.Consistency
	}{
		{wire.ConsistencyOne, []bool{false}, wire.ConsistencyQuorum},
		{wire.ConsistencyOne, []bool{true, false}, wire.ConsistencyQuorum},
		{wire.ConsistencyOne, []bool{true}, wire.ConsistencyOne},
		{wire.ConsistencyOne, nil, wire.ConsistencyOne},
		{wire.ConsistencyQuorum, []bool{false}, wire.ConsistencyQuorum},
		{wire.ConsistencyAll, []bool{false}, wire.ConsistencyAll},
	} {
		if got := writes.CheckAndSetLevel(tc.level, tc.present...); got != tc.want {
			t.Errorf("CheckAndSetLevel(%s, %v) = %s, want %s", tc.level, tc.present, got, tc.want)
		}
	}
}
