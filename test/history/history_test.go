package history

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The checker finds each broken promise, and only those: the tests that use it prove nothing if
// it cannot fail.
func TestViolations(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := func(k Kind, value, pod string, level wire.Consistency, from, to int, present bool, err error) Op {
		return Op{Kind: k, Value: value, Pod: pod, Level: level, Invoked: at.Add(time.Duration(from) * time.Second),
			Done: at.Add(time.Duration(to) * time.Second), Outcome: Classify(err), Present: present, Err: err}
	}
	lapsed := &client.Error{Status: 503, Code: wire.CodeLeaseLapsed}
	one, quorum, all := wire.ConsistencyOne, wire.ConsistencyQuorum, wire.ConsistencyAll
	for _, tc := range []struct {
		name string
		ops  []Op
		want []string // a substring of each violation, in order
	}{
		{"one false, the others true or refused", []Op{
			op(CheckAndSet, "a", "p0", one, 0, 1, false, nil),
			op(CheckAndSet, "a", "p1", all, 0, 1, true, nil),
			op(CheckAndSet, "a", "p2", quorum, 0, 9, false, lapsed),
		}, nil},
		{"two falses", []Op{
			op(CheckAndSet, "a", "p0", one, 0, 1, false, nil),
			op(CheckAndSet, "a", "p1", all, 0, 1, false, nil),
		}, []string{"check-and-set of a answered false 2 times"}},
		{"a check at one after a set at all misses it", []Op{
			op(Set, "b", "p0", all, 0, 1, false, nil),
			op(Check, "b", "p1", one, 2, 3, false, nil),
		}, []string{"false negative: b through p1 at one"}},
		{"a check at quorum after a check-and-set's false misses it", []Op{
			op(CheckAndSet, "c", "p0", one, 0, 1, false, nil),
			op(Check, "c", "p1", quorum, 2, 3, false, nil),
		}, []string{"false negative: c through p1 at quorum"}},
		{"no promise: levels that need not overlap, or a check begun before the write's answer", []Op{
			op(Set, "d", "p0", quorum, 0, 1, false, nil),
			op(Check, "d", "p1", one, 2, 3, false, nil),
			op(Set, "e", "p0", all, 0, 5, false, nil),
			op(Check, "e", "p1", one, 2, 3, false, nil),
			op(Set, "f", "p0", all, 0, 1, false, errors.New("no answer")),
			op(Check, "f", "p1", all, 2, 3, false, nil),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Violations(tc.ops, 3)
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %d of them: %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %q, want one saying %q", got[i], w)
				}
			}
		})
	}
}

func TestCounts(t *testing.T) {
	ops := []Op{
		{Kind: CheckAndSet, Present: false},
		{Kind: CheckAndSet, Present: true},
		{Kind: CheckAndSet, Err: &client.Error{Status: 503, Code: wire.CodeHomeUnavailable}, Outcome: Indeterminate},
		{Kind: Set},
		{Kind: Check, Err: errors.New("connection refused"), Outcome: Indeterminate},
	}
	got := Counts(ops)
	for key, n := range map[string]int{"check-and-set false": 1, "check-and-set true": 1, "check-and-set 503 code 13": 1, "set ok": 1, "check no answer": 1} {
		if got[key] != n {
			t.Errorf("Counts[%q] = %d, want %d (all: %v)", key, got[key], n, got)
		}
	}
	if n := Served(ops, CheckAndSet); n != 2 {
		t.Errorf("Served(check-and-set) = %d, want 2", n)
	}
}
