package httpapi

import (
	"crypto/rand"
	"strconv"
	"strings"
	"sync"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// statusLog numbers the changes of the pod's filters as the polls of wire.FilterStatusesPath find
// them, so that a poll can be answered with what changed since the version it holds rather than
// with every filter: ten thousand filters created at once made the operator decode ten thousand
// statuses for each answer, and an answer came with every few creates.
//
// A version is the log's instance and the number of the last look that found a change. The
// instance is drawn when the process starts: a version of another process, or from before the
// log forgot a name, is answered with every filter.
type statusLog struct {
	instance string

	mu      sync.Mutex
	seq     uint64 // the last look that found a change
	horizon uint64 // a version below it may lack the forgetting of a name
	names   map[string]loggedName
}

// loggedName is what the log knows of a name: a live filter, a tombstone, or both.
type loggedName struct {
	state   nameState
	changed uint64 // the look that last found its state changed
}

// nameState is what the operator reports of a name besides its counts. The generation tells a
// filter recreated under its name from the one before; the tombstone of a filter created and
// deleted between two looks changes it too, since the operator may have seen the filter in
// between.
type nameState struct {
	live                                        bool
	generation                                  int64
	capacity                                    uint64
	fpp                                         float64
	scalable                                    bool
	growth                                      uint
	partitions, partitionsHeld, partitionsOwned int
	tombstone                                   bool
	tombstoneGeneration                         int64
}

// liveStatus is a live filter's status, with the generation that tells it from an earlier filter
// of its name.
type liveStatus struct {
	status     wire.FilterStatus
	generation int64
}

func newStatusLog() *statusLog {
	return &statusLog{instance: rand.Text()[:8], names: map[string]loggedName{}}
}

// look compares the filters and tombstones with what the log holds, numbers what changed, and
// returns the version they make.
func (l *statusLog) look(live []liveStatus, tombstones []filter.Tombstone) string {
	states := make(map[string]nameState, len(live)+len(tombstones))
	for _, e := range live {
		f := e.status
		states[f.Name] = nameState{live: true, generation: e.generation, capacity: f.ExpectedInsertions, fpp: f.FPP,
			scalable: f.Scalable, growth: f.Growth, partitions: f.Partitions, partitionsHeld: f.PartitionsHeld, partitionsOwned: f.PartitionsOwned}
	}
	for _, t := range tombstones {
		st := states[t.Name]
		st.tombstone, st.tombstoneGeneration = true, t.Generation
		states[t.Name] = st
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.seq + 1
	for name, st := range states {
		if was, ok := l.names[name]; !ok || was.state != st {
			l.names[name] = loggedName{state: st, changed: next}
			l.seq = next
		}
	}
	for name := range l.names {
		if _, ok := states[name]; !ok {
			// Neither live nor a tombstone any more (the tombstone's retention is over): the
			// versions that could hold it as live are answered in full from now on.
			delete(l.names, name)
			l.seq, l.horizon = next, next
		}
	}
	return l.version(l.seq)
}

func (l *statusLog) version(seq uint64) string {
	return l.instance + "." + strconv.FormatUint(seq, 36)
}

// answer is the poll's answer as of version, the last look's, for a caller that holds held:
// with changes, the filters changed since held and the names gone since, when the log can tell;
// else every filter.
func (l *statusLog) answer(version string, live []liveStatus, held string, changes bool) wire.FilterStatuses {
	out := wire.FilterStatuses{Version: version}
	l.mu.Lock()
	defer l.mu.Unlock()
	since, ok := l.parse(held)
	if !changes || !ok {
		out.Filters = make([]wire.FilterStatus, len(live))
		for i, e := range live {
			out.Filters[i] = e.status
		}
		return out
	}
	out.Changes = true
	out.Filters = []wire.FilterStatus{}
	isLive := make(map[string]bool, len(live))
	for _, e := range live {
		isLive[e.status.Name] = true
		if l.names[e.status.Name].changed > since {
			out.Filters = append(out.Filters, e.status)
		}
	}
	// A name that changed after the look that made version, and is not in live, is absent as of
	// version too: removing it is true of that version.
	for name, n := range l.names {
		if n.changed > since && !isLive[name] {
			out.Removed = append(out.Removed, name)
		}
	}
	return out
}

// parse reads a version of this log that the log can answer changes since.
func (l *statusLog) parse(held string) (uint64, bool) {
	instance, raw, ok := strings.Cut(held, ".")
	if !ok || instance != l.instance {
		return 0, false
	}
	seq, err := strconv.ParseUint(raw, 36, 64)
	if err != nil || seq < l.horizon || seq > l.seq {
		return 0, false
	}
	return seq, true
}
