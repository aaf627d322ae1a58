package cluster

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/bloomery/bloomery/dataplane/client"
)

// History records the outcomes of check-and-sets made concurrently through the pods, for a
// checker to judge once the run is over: a check-and-set that answered false says that the value
// was new, and of all those of one value exactly one may say so.
type History struct {
	mu  sync.Mutex
	ops []CheckAndSet
}

// CheckAndSet is one check-and-set of a history: its value, the pod it went through, the phase of
// the run it was made in, and its outcome (Present when Err is nil).
type CheckAndSet struct {
	Value, Pod, Phase string
	Present           bool
	Err               error
}

// Outcome names the outcome: "false", "true", or the error's HTTP status and code ("503 code 13"),
// "no answer" when none came.
func (op CheckAndSet) Outcome() string {
	if op.Err == nil {
		return fmt.Sprint(op.Present)
	}
	if e, ok := errors.AsType[*client.Error](op.Err); ok {
		return fmt.Sprintf("%d code %d", e.Status, e.Code)
	}
	return "no answer"
}

// Record adds a check-and-set to the history; it may be called from many goroutines.
func (h *History) Record(op CheckAndSet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Ops is the history so far.
func (h *History) Ops() []CheckAndSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Falses counts, per value, the check-and-sets that answered false.
func (h *History) Falses() map[string]int {
	falses := map[string]int{}
	for _, op := range h.Ops() {
		if op.Err == nil && !op.Present {
			falses[op.Value]++
		}
	}
	return falses
}

// SecondFalses lists the values answered false more than once, with the pods and phases that said
// so: each breaks the promise of check-and-set.
func (h *History) SecondFalses() []string {
	byValue := map[string][]string{}
	for _, op := range h.Ops() {
		if op.Err == nil && !op.Present {
			byValue[op.Value] = append(byValue[op.Value], op.Pod+" in "+op.Phase)
		}
	}
	var out []string
	for _, v := range slices.Sorted(maps.Keys(byValue)) {
		if len(byValue[v]) > 1 {
			out = append(out, fmt.Sprintf("%s answered false %d times (%s)", v, len(byValue[v]), strings.Join(byValue[v], ", ")))
		}
	}
	return out
}

// MissingFalses lists the values of values that no check-and-set answered false although none
// ended without an answer that says whether it applied the value (an error, which may have): the
// first check-and-set of a new value that a home applies answers false, or fails.
func (h *History) MissingFalses(values []string) []string {
	falses, indeterminate := map[string]int{}, map[string]bool{}
	for _, op := range h.Ops() {
		switch {
		case op.Err != nil:
			indeterminate[op.Value] = true
		case !op.Present:
			falses[op.Value]++
		}
	}
	var out []string
	for _, v := range values {
		if falses[v] == 0 && !indeterminate[v] {
			out = append(out, v+" was answered true by every check-and-set, none of which could have added it")
		}
	}
	return out
}

// Counts counts the outcomes per phase, as "phase: outcome" keys.
func (h *History) Counts() map[string]int {
	counts := map[string]int{}
	for _, op := range h.Ops() {
		counts[op.Phase+": "+op.Outcome()]++
	}
	return counts
}
