package writes_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
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
