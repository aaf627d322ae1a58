package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The workload and its history: what each client asked, through which pod, at which level, when
// it was invoked and answered, and what the answer was. The checker reads only the history.

// outcome is how an operation ended, as its client saw it.
type outcome int

const (
	ok            outcome = iota // answered 200
	failed                       // answered an error that says nothing was done (4xx)
	indeterminate                // no answer, or one that leaves open whether it was applied
)

func (o outcome) String() string { return [...]string{"ok", "fail", "indeterminate"}[o] }

// kind is what an operation did.
type kind int

const (
	checkAndSet kind = iota
	set
	check
)

func (k kind) String() string { return [...]string{"check-and-set", "set", "check"}[k] }

// op is one operation of the history.
type op struct {
	kind          kind
	value         string
	pod           string
	level         wire.Consistency
	invoked, done time.Time
	outcome       outcome
	present       bool // the answer of an ok check or check-and-set
	err           error
}

// history collects the operations of a run.
type history struct {
	mu  sync.Mutex
	ops []op
}

func (h *history) add(o op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, o)
}

func (h *history) all() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// classify turns a client's error into an outcome: a 4xx did nothing; anything else may have.
func classify(err error) outcome {
	var apiErr *client.Error
	switch {
	case err == nil:
		return ok
	case errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500:
		return failed
	}
	return indeterminate
}

var levels = []wire.Consistency{wire.ConsistencyOne, wire.ConsistencyQuorum, wire.ConsistencyAll}

// workload runs clients until ctx ends. Each new value of check-and-set is sent by three clients
// at once through three different pods at random levels; each value set at quorum or all is
// checked later through another pod at a level that, with the set's, overlaps every majority.
type workload struct {
	name    string
	pods    []*pod
	history history
	next    atomic.Int64
}

func (w *workload) run(ctx context.Context, clients int) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				if rng.IntN(2) == 0 {
					w.racingCheckAndSets(ctx, rng)
				} else {
					w.setThenCheck(ctx, rng)
				}
			}
		})
	}
	wg.Wait()
}

// racingCheckAndSets sends one new value's check-and-set through three pods at once.
func (w *workload) racingCheckAndSets(ctx context.Context, rng *rand.Rand) {
	value := fmt.Sprintf("cas-%d", w.next.Add(1))
	var wg sync.WaitGroup
	for _, i := range rng.Perm(len(w.pods))[:min(3, len(w.pods))] {
		level := levels[rng.IntN(len(levels))]
		wg.Go(func() { w.do(ctx, checkAndSet, value, w.pods[i], level) })
	}
	wg.Wait()
}

// setThenCheck sets a new value at quorum or all, then checks it through another pod at a level
// whose count with the set's exceeds the pods: all then one, or quorum then quorum.
func (w *workload) setThenCheck(ctx context.Context, rng *rand.Rand) {
	value := fmt.Sprintf("set-%d", w.next.Add(1))
	pods := rng.Perm(len(w.pods))
	writeAt, readAt := wire.ConsistencyQuorum, wire.ConsistencyQuorum
	if rng.IntN(2) == 0 {
		writeAt, readAt = wire.ConsistencyAll, wire.ConsistencyOne
	}
	if w.do(ctx, set, value, w.pods[pods[0]], writeAt) == ok {
		w.do(ctx, check, value, w.pods[pods[1]], readAt)
	}
}

func (w *workload) do(ctx context.Context, k kind, value string, p *pod, level wire.Consistency) outcome {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	o := op{kind: k, value: value, pod: p.name, level: level, invoked: time.Now()}
	api := p.api.At(level)
	var err error
	switch k {
	case checkAndSet:
		o.present, err = api.CheckAndSet(ctx, w.name, value)
	case set:
		err = api.Set(ctx, w.name, value)
	case check:
		o.present, err = api.Check(ctx, w.name, value)
	}
	o.done, o.outcome, o.err = time.Now(), classify(err), err
	if ctx.Err() != nil && o.outcome != ok {
		return o.outcome // the run ended under it: not an operation of the history
	}
	w.history.add(o)
	return o.outcome
}

// violations checks the history's properties, and counts its outcomes:
//   - of the check-and-sets of one value, at most one answers false (the value was new);
//   - a value whose check-and-set answered false, or that was set at a level, is then checked
//     present at any level whose count with the write's exceeds the pods (no false negative).
//     A check-and-set's false counts as a write at quorum: it is answered once a quorum holds it.
func violations(ops []op, pods int) (found []string, counts map[string]int) {
	counts = map[string]int{}
	falses := map[string][]op{}
	// written holds, for each value, the acknowledged writes that make later checks answer true.
	written := map[string][]op{}
	for _, o := range ops {
		counts[o.kind.String()+" "+o.outcome.String()]++
		if o.outcome != ok {
			continue
		}
		switch {
		case o.kind == checkAndSet && !o.present:
			falses[o.value] = append(falses[o.value], o)
			written[o.value] = append(written[o.value], op{level: wire.ConsistencyQuorum, done: o.done, pod: o.pod})
		case o.kind == set:
			written[o.value] = append(written[o.value], o)
		}
	}
	for value, fs := range falses {
		if len(fs) > 1 {
			found = append(found, fmt.Sprintf("check-and-set of %s answered false %d times: %s", value, len(fs), describe(fs)))
		}
	}
	for _, o := range ops {
		if o.kind != check || o.outcome != ok || o.present {
			continue
		}
		for _, w := range written[o.value] {
			if w.done.Before(o.invoked) && w.level.Count(pods)+o.level.Count(pods) > pods {
				found = append(found, fmt.Sprintf("false negative: %s through %s at %s answered absent after a write at %s through %s acknowledged %v before",
					o.value, o.pod, o.level, w.level, w.pod, o.invoked.Sub(w.done).Round(time.Millisecond)))
			}
		}
	}
	slices.Sort(found)
	return found, counts
}

func describe(ops []op) string {
	var s []string
	for _, o := range ops {
		s = append(s, fmt.Sprintf("%s at %s [%s, %s]", o.pod, o.level, o.invoked.Format("15:04:05.000"), o.done.Format("15:04:05.000")))
	}
	return fmt.Sprint(s)
}

// latencies summarizes the check-and-sets invoked within [from, to): at each level, how many
// there were, the share answered (ok), and the median and 99th percentile of the time to an
// answer, whatever it was. It is what the suite prints of each fault, not a property it checks.
func latencies(ops []op, from, to time.Time) string {
	byLevel := map[wire.Consistency][]op{}
	for _, o := range ops {
		if o.kind == checkAndSet && !o.invoked.Before(from) && o.invoked.Before(to) {
			byLevel[o.level] = append(byLevel[o.level], o)
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
			took[i] = o.done.Sub(o.invoked)
			if o.outcome == ok {
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
