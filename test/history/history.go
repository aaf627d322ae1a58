// Package history is the workload and the checker of the tests that prove check-and-set's
// promises under faults (test/faults, and the end-to-end suite's fenced home): clients record
// what each operation asked, through which pod, at which level, when it was invoked and answered,
// and what the answer was; the checker then reads only that history.
package history

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Outcome is how an operation ended, as its client saw it.
type Outcome int

// The outcomes.
const (
	OK            Outcome = iota // answered 200
	Failed                       // answered an error that says nothing was done (4xx)
	Indeterminate                // no answer, or one that leaves open whether it was applied
)

func (o Outcome) String() string { return [...]string{"ok", "fail", "indeterminate"}[o] }

// Kind is what an operation did.
type Kind int

// The kinds of operations.
const (
	CheckAndSet Kind = iota
	Set
	Check
)

func (k Kind) String() string { return [...]string{"check-and-set", "set", "check"}[k] }

// Op is one operation of a history.
type Op struct {
	Kind          Kind
	Value         string
	Pod           string
	Level         wire.Consistency
	Invoked, Done time.Time
	Outcome       Outcome
	Present       bool // the answer of an ok check or check-and-set
	Err           error
}

// Answer names what the client got: "true" or "false" for an ok check or check-and-set, "ok"
// for an ok set, the error's HTTP status and code ("503 code 14"), or "no answer".
func (o Op) Answer() string {
	switch {
	case o.Err == nil && o.Kind == Set:
		return "ok"
	case o.Err == nil:
		return fmt.Sprint(o.Present)
	}
	if e, ok := errors.AsType[*client.Error](o.Err); ok {
		return fmt.Sprintf("%d code %d", e.Status, e.Code)
	}
	return "no answer"
}

// History collects the operations of a run; its methods may be called from many goroutines.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records o.
func (h *History) Add(o Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, o)
}

// All is the history so far.
func (h *History) All() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Classify turns a client's error into an outcome: a 4xx did nothing; anything else may have.
func Classify(err error) Outcome {
	var apiErr *client.Error
	switch {
	case err == nil:
		return OK
	case errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500:
		return Failed
	}
	return Indeterminate
}

// Counts counts the operations by kind and answer ("check-and-set false", "check 503 code 9").
func Counts(ops []Op) map[string]int {
	counts := map[string]int{}
	for _, o := range ops {
		counts[o.Kind.String()+" "+o.Answer()]++
	}
	return counts
}

// Served counts the operations of kind k that were answered 200.
func Served(ops []Op, k Kind) int {
	n := 0
	for _, o := range ops {
		if o.Kind == k && o.Outcome == OK {
			n++
		}
	}
	return n
}

// Violations checks the history's properties, over a placement of owners copies of each value:
//   - of the check-and-sets of one value, at most one answers false (the value was new);
//   - a value whose check-and-set answered false, or that was set at a level, is then checked
//     present at any level whose count with the write's exceeds the owners (no false negative).
//     A check-and-set's false counts as a write at quorum: it is answered once a quorum holds it.
func Violations(ops []Op, owners int) []string {
	var found []string
	falses := map[string][]Op{}
	// written holds, for each value, the acknowledged writes that make later checks answer true.
	written := map[string][]Op{}
	for _, o := range ops {
		if o.Outcome != OK {
			continue
		}
		switch {
		case o.Kind == CheckAndSet && !o.Present:
			falses[o.Value] = append(falses[o.Value], o)
			written[o.Value] = append(written[o.Value], Op{Level: wire.ConsistencyQuorum, Done: o.Done, Pod: o.Pod})
		case o.Kind == Set:
			written[o.Value] = append(written[o.Value], o)
		}
	}
	for value, fs := range falses {
		if len(fs) > 1 {
			found = append(found, fmt.Sprintf("check-and-set of %s answered false %d times: %s", value, len(fs), describe(fs)))
		}
	}
	for _, o := range ops {
		if o.Kind != Check || o.Outcome != OK || o.Present {
			continue
		}
		for _, w := range written[o.Value] {
			if w.Done.Before(o.Invoked) && w.Level.Count(owners)+o.Level.Count(owners) > owners {
				found = append(found, fmt.Sprintf("false negative: %s through %s at %s [%s, %s] answered absent after a write at %s through %s acknowledged at %s",
					o.Value, o.Pod, o.Level, stamp(o.Invoked), stamp(o.Done), w.Level, w.Pod, stamp(w.Done)))
			}
		}
	}
	slices.Sort(found)
	return found
}

func describe(ops []Op) string {
	var s []string
	for _, o := range ops {
		s = append(s, fmt.Sprintf("%s at %s [%s, %s]", o.Pod, o.Level, stamp(o.Invoked), stamp(o.Done)))
	}
	return fmt.Sprint(s)
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }

// Latencies summarizes the check-and-sets invoked within [from, to): at each level, how many
// there were, the share answered (ok), and the median and 99th percentile of the time to an
// answer, whatever it was. It is what a test prints of a fault, not a property it checks.
func Latencies(ops []Op, from, to time.Time) string {
	byLevel := map[wire.Consistency][]Op{}
	for _, o := range ops {
		if o.Kind == CheckAndSet && !o.Invoked.Before(from) && o.Invoked.Before(to) {
			byLevel[o.Level] = append(byLevel[o.Level], o)
		}
	}
	var out []string
	for _, level := range levels {
		leveled := byLevel[level]
		if len(leveled) == 0 {
			continue
		}
		took := make([]time.Duration, len(leveled))
		answered := 0
		for i, o := range leveled {
			took[i] = o.Done.Sub(o.Invoked)
			if o.Outcome == OK {
				answered++
			}
		}
		slices.Sort(took)
		pct := func(p float64) time.Duration {
			return took[min(len(took)-1, int(p*float64(len(took))))].Round(time.Millisecond)
		}
		out = append(out, fmt.Sprintf("%s: %d, %.0f%% answered, p50 %v, p99 %v", level, len(leveled), 100*float64(answered)/float64(len(leveled)), pct(0.5), pct(0.99)))
	}
	return fmt.Sprint(out)
}
