package history

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Pod is one pod the workload sends to: its name, for the history, and its API.
type Pod struct {
	Name string
	API  *client.Client
}

var levels = []wire.Consistency{wire.ConsistencyOne, wire.ConsistencyQuorum, wire.ConsistencyAll}

// opTimeout bounds each operation of Run: one that waits on a paused or partitioned pod ends
// without an answer (indeterminate) rather than holding its client for the rest of the run.
const opTimeout = 10 * time.Second

// Workload runs clients until their context ends. Each new value of check-and-set is sent by
// three clients at once through three different pods at random levels; each value set at quorum
// or all is checked later through another pod at a level that, with the set's, overlaps every
// majority.
type Workload struct {
	Filter  string
	Pods    []Pod
	History History
	next    atomic.Int64
}

// Run runs clients until ctx ends.
func (w *Workload) Run(ctx context.Context, clients int) {
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

// NewValue is a value no operation has sent yet.
func (w *Workload) NewValue(prefix string) string { return fmt.Sprintf("%s-%d", prefix, w.next.Add(1)) }

// racingCheckAndSets sends one new value's check-and-set through three pods at once.
func (w *Workload) racingCheckAndSets(ctx context.Context, rng *rand.Rand) {
	value := w.NewValue("cas")
	var wg sync.WaitGroup
	for _, i := range rng.Perm(len(w.Pods))[:min(3, len(w.Pods))] {
		level := levels[rng.IntN(len(levels))]
		wg.Go(func() { w.timed(ctx, CheckAndSet, value, w.Pods[i], level) })
	}
	wg.Wait()
}

// setThenCheck sets a new value at quorum or all, then checks it through another pod at a level
// whose count with the set's exceeds the pods: all then one, or quorum then quorum.
func (w *Workload) setThenCheck(ctx context.Context, rng *rand.Rand) {
	value := w.NewValue("set")
	pods := rng.Perm(len(w.Pods))
	writeAt, readAt := wire.ConsistencyQuorum, wire.ConsistencyQuorum
	if rng.IntN(2) == 0 {
		writeAt, readAt = wire.ConsistencyAll, wire.ConsistencyOne
	}
	if w.timed(ctx, Set, value, w.Pods[pods[0]], writeAt).Outcome == OK {
		w.timed(ctx, Check, value, w.Pods[pods[1]], readAt)
	}
}

// timed is Do bounded by opTimeout; an operation that the run's end cut short is left out of
// the history, which it is no part of.
func (w *Workload) timed(ctx context.Context, k Kind, value string, p Pod, level wire.Consistency) Op {
	opCtx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	o := Do(opCtx, w.Filter, k, value, p, level)
	if ctx.Err() == nil || o.Outcome == OK {
		w.History.Add(o)
	}
	return o
}

// Do sends one operation through p at level, and returns it as the history records it.
func Do(ctx context.Context, filter string, k Kind, value string, p Pod, level wire.Consistency) Op {
	o := Op{Kind: k, Value: value, Pod: p.Name, Level: level, Invoked: time.Now()}
	api := p.API.At(level)
	var err error
	switch k {
	case CheckAndSet:
		o.Present, err = api.CheckAndSet(ctx, filter, value)
	case Set:
		err = api.Set(ctx, filter, value)
	case Check:
		o.Present, err = api.Check(ctx, filter, value)
	}
	o.Done, o.Outcome, o.Err = time.Now(), Classify(err), err
	return o
}

// Recheck checks again, once the run is over, up to samples of the values whose write was
// acknowledged, spread over the run, through every pod, each at the weakest level that must see
// it: one after a set at all, quorum after a set at quorum or a check-and-set's false. The checks
// join the history. It finds what a check right after the write cannot: a value a pod lost, or
// never got, while it was away.
func (w *Workload) Recheck(ctx context.Context, samples int) {
	type write struct {
		value string
		level wire.Consistency
	}
	var writes []write
	for _, o := range w.History.All() {
		switch {
		case o.Outcome != OK:
		case o.Kind == Set && o.Level == wire.ConsistencyAll:
			writes = append(writes, write{o.Value, wire.ConsistencyOne})
		case o.Kind == Set && o.Level == wire.ConsistencyQuorum, o.Kind == CheckAndSet && !o.Present:
			writes = append(writes, write{o.Value, wire.ConsistencyQuorum})
		}
	}
	step := max(1, len(writes)/max(samples, 1))
	var wg sync.WaitGroup
	for _, p := range w.Pods {
		wg.Go(func() {
			for i := 0; i < len(writes) && ctx.Err() == nil; i += step {
				w.timed(ctx, Check, writes[i].value, p, writes[i].level)
			}
		})
	}
	wg.Wait()
}
