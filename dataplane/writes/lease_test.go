package writes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
	"github.com/bloomery/bloomery/internal/await"
)

// fakeLease is a home's lease on a fake clock: held while the clock is before its expiry, which a
// renewal sets to the clock plus the lease's duration, as a renewer of a Kubernetes Lease holds
// it. onCheck, when set, runs at each check, before it answers.
type fakeLease struct {
	mu          sync.Mutex
	now, expiry time.Time
	onCheck     func()
}

func (l *fakeLease) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onCheck != nil {
		l.onCheck()
	}
	return l.now.Before(l.expiry)
}

func (l *fakeLease) renew(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = l.now.Add(d)
}

func (l *fakeLease) advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = l.now.Add(d)
}

// leaseCode is the code of a HomeUnavailableError, 0 for any other error.
func leaseCode(err error) int {
	if hu, ok := errors.AsType[*writes.HomeUnavailableError](err); ok {
		return hu.Code
	}
	return 0
}

// A home whose lease has lapsed answers its check-and-sets 503 code 14, never false, and answers
// again once the lease is renewed; what it applied meanwhile may be present.
func TestAHomeWhoseLeaseLapsedAnswersNoFalse(t *testing.T) {
	lease := &fakeLease{now: time.Unix(1000, 0)}
	_, pods, _, f := memPodsWith(t, func(name string, o *replication.Options) {
		if name == "a" {
			o.HomeLease = lease.held
		}
	})
	a := pods["a"]
	lease.renew(10 * time.Second)
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "x"); present || err != nil {
		t.Fatalf("a check-and-set of a new value under the lease = %v, %v; want false", present, err)
	}

	lease.advance(10 * time.Second) // the lease lapses at its expiry
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "y"); leaseCode(err) != wire.CodeLeaseLapsed {
		t.Errorf("a check-and-set of a new value once the lease lapsed = %v, %v; want code 14", present, err)
	}
	if got, err := a.CheckAndSetMany(t.Context(), wire.ConsistencyQuorum, f, []string{"z", "x"}); leaseCode(err) != wire.CodeLeaseLapsed || got != nil {
		t.Errorf("a multi-check-and-set once the lease lapsed = %v, %v; want no answers and code 14", got, err)
	}
	if err := a.Set(t.Context(), wire.ConsistencyQuorum, f, "set"); err != nil {
		t.Errorf("a set once the lease lapsed: %v; sets need no lease", err)
	}

	lease.renew(10 * time.Second)
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "y"); !present || err != nil {
		t.Errorf("a check-and-set of the value refused while the lease had lapsed = %v, %v; want true: it was applied", present, err)
	}
	if present, err := a.CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "w"); present || err != nil {
		t.Errorf("a check-and-set of a new value once renewed = %v, %v; want false", present, err)
	}
}

// The lease is consulted when the check-and-set is applied, after the filter answered, not when
// the request arrived: a request that waited (in a socket through a pause, behind a lock) meets
// the lease as it is when its answer is decided.
func TestTheLeaseIsCheckedWhenTheCheckAndSetIsApplied(t *testing.T) {
	lease := &fakeLease{now: time.Unix(1000, 0)}
	_, pods, _, f := memPodsWith(t, func(name string, o *replication.Options) {
		if name == "a" {
			o.HomeLease = lease.held
		}
	})
	lease.renew(time.Second)
	var checks int
	var appliedAtCheck bool
	lease.onCheck = func() {
		checks++
		appliedAtCheck = f.CheckMany([]string{"v"})[0]
		// The lease lapses while the check-and-set is applied: its answer is not given.
		lease.now = lease.expiry
	}
	present, err := pods["a"].CheckAndSet(t.Context(), wire.ConsistencyQuorum, f, "v")
	if leaseCode(err) != wire.CodeLeaseLapsed {
		t.Errorf("a check-and-set whose home's lease lapsed as it was applied = %v, %v; want code 14", present, err)
	}
	if checks != 1 || !appliedAtCheck {
		t.Errorf("the lease was consulted %d times, the filter holding the value then: %v; want once, after the filter applied it", checks, appliedAtCheck)
	}
}

// A pod that does not hold its home lease may have been left out of the members while it was
// away, and its copy may lack writes acknowledged without it: a value its copy lacks is asked of
// a peer before it is answered absent, at consistency one too. Under its lease, a check at one
// answers from its copy alone.
func TestAPodWithoutItsLeaseAsksAPeerBeforeAnsweringAbsent(t *testing.T) {
	lease := &fakeLease{now: time.Unix(1000, 0)}
	stores := map[string]*filter.Store{}
	_, pods, _, f := memPodsWith(t, func(name string, o *replication.Options) {
		stores[name] = o.Store
		if name == "a" {
			o.HomeLease = lease.held
		}
	})
	// Written while a was away: b and c hold the value, a does not.
	for _, name := range []string{"b", "c"} {
		peerCopy, _ := stores[name].Lookup(f.Name())
		if _, err := peerCopy.CheckAndSet("away"); err != nil {
			t.Fatal(err)
		}
	}
	check := func() bool {
		t.Helper()
		values := []string{"away"}
		present := f.CheckMany(values)
		if err := pods["a"].CheckPeers(t.Context(), wire.ConsistencyOne, f.Name(), values, present); err != nil {
			t.Fatal(err)
		}
		return present[0]
	}
	lease.renew(10 * time.Second)
	if pods["a"].AsksPeers(wire.ConsistencyOne) || check() {
		t.Error("a, under its lease, asked a peer at consistency one; its copy alone answers")
	}
	lease.advance(10 * time.Second)
	if !pods["a"].AsksPeers(wire.ConsistencyOne) || !check() {
		t.Error("a, without its lease, answered a value its peers hold absent from its own copy")
	}
}

// Under a placed membership, a pod without its lease that reads a partition it holds asks the
// partition's next reader too for a value its copy lacks.
func TestAPlacedReaderWithoutItsLeaseAsksTheNextOne(t *testing.T) {
	leases := map[string]*fakeLease{}
	stores := map[string]*filter.Store{}
	_, pods, nodes, f := memPodsWith(t, func(name string, o *replication.Options) {
		stores[name] = o.Store
		leases[name] = &fakeLease{now: time.Unix(1000, 0)}
		o.HomeLease = leases[name].held
	})
	var members []wire.Member
	for _, name := range []string{"a", "b", "c"} {
		members = append(members, wire.Member{Name: name, URL: "http://" + name + ":8090"})
		leases[name].renew(10 * time.Second)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := nodes[name].SetMembership(wire.Membership{Epoch: 2, Self: name, Members: members, Placement: wire.Placement{ReplicationFactor: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} { // serving values routed to them once caught up
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); nodes[name].Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		await.True(t, 10*time.Second, name+" to catch up", nodes[name].Ready)
	}
	readers := nodes["a"].Route(f.Name(), f.Partitions()).Readers(f.PartitionOf("away"))
	reader, next := readers[0], readers[1]
	nextCopy, _ := stores[next].Lookup(f.Name())
	if _, err := nextCopy.CheckAndSet("away"); err != nil {
		t.Fatal(err)
	}
	readerCopy, _ := stores[reader].Lookup(f.Name())
	check := func() bool {
		t.Helper()
		got, err := pods[reader].Routed(t.Context(), wire.ConsistencyOne, readerCopy, wire.OpMultiCheck, []string{"away"}, false)
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	if check() {
		t.Errorf("%s, a reader under its lease, asked %s at consistency one; its copy alone answers", reader, next)
	}
	leases[reader].advance(10 * time.Second)
	if !check() {
		t.Errorf("%s, a reader without its lease, answered a value %s holds absent from its own copy", reader, next)
	}
}
