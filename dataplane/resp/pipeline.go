package resp

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"
	"unsafe"

	"github.com/tidwall/redcon"
)

// A client that pipelines sends many commands before it reads a reply, and they arrive together:
// redcon hands them over one at a time, and writes the replies once every command read with them
// has been answered. Answered one by one, n pipelined BF.ADDs are n commits of the log, each
// waiting for the disk under logSync always, and the client sees no reply until the last. So the
// commands read together are answered here, in order, and a run of adds (BF.ADD, BF.MADD) to one
// filter is one batch: one call of the engine's batch path, one commit of the log, one
// replication. A run of checks (BF.EXISTS, BF.MEXISTS) to one filter is one batch of checks, which
// the engine runs memory-level parallel.

// maxRun bounds the items of one batch of pipelined commands.
const maxRun = 4096

// runnable is what a command is in a batched run: an add or a check, of one item or many, and
// the command itself, for its metrics.
type runnable struct {
	add, multi bool
	cmd        command
}

// runnables are the commands a run batches, by name.
var runnables = map[string]runnable{
	"bf.add":     {add: true},
	"bf.madd":    {add: true, multi: true},
	"bf.exists":  {},
	"bf.mexists": {multi: true},
}

// asRunnable says what cmd is in a run; false for any other command, or one of the wrong arity,
// which Dispatch answers.
func (s *Server) asRunnable(cmd redcon.Command) (runnable, bool) {
	if len(cmd.Args) < 3 {
		return runnable{}, false
	}
	c, known := s.command(cmd.Args[0])
	r, ok := runnables[c.name]
	if !known || !ok || !r.multi && len(cmd.Args) != 3 {
		return runnable{}, false
	}
	r.cmd = c
	return r, true
}

// answer answers cmds in order, runs of them as batches, into w; it reports whether the client
// asked to close the connection (QUIT), after which nothing more is answered.
func (s *Server) answer(sess *session, w replier, cmds []redcon.Command) (quit bool) {
	for len(cmds) > 0 {
		// Inside MULTI every command is queued one by one.
		if n := s.batchedOutsideMulti(sess, w, cmds); n > 0 {
			cmds = cmds[n:]
			continue
		}
		ctx, cancel := s.commandContext()
		quit = s.Dispatch(ctx, sess, w, cmds[0].Args)
		cancel()
		if quit {
			return true
		}
		cmds = cmds[1:]
	}
	return false
}

// batchedOutsideMulti is batched, but for a connection inside MULTI, whose commands are queued.
func (s *Server) batchedOutsideMulti(sess *session, w replier, cmds []redcon.Command) int {
	if sess.tx != nil {
		return 0
	}
	return s.batched(sess, w, cmds)
}

// commandContext bounds a command by requestTimeoutSeconds when the pod has peers. Alone, a
// command waits for nothing (no acknowledgement, no home elsewhere), and the timer the deadline
// costs is saved: it was a quarter of the CPU time of an unpipelined BF.ADD. Every wait on peers
// is bounded where it waits too; the deadline caps them all.
func (s *Server) commandContext() (context.Context, context.CancelFunc) {
	if !s.opts.Writes.Replicating() {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), s.opts.Config.RequestTimeout)
}

// batched answers the run of adds, or of checks, to one filter that cmds start with as one
// batch, and says how many commands it answered: 0 when there is no run of two or more, or when
// its commands would not answer alike one by one and together (see batchable).
func (s *Server) batched(sess *session, w replier, cmds []redcon.Command) int {
	return s.batchedUnder(sess, w, cmds, true)
}

// batchedUnder is batched; shared says it takes the transaction lock shared for the batch, as
// each of its commands would one by one (EXEC, which holds it exclusively, says false).
func (s *Server) batchedUnder(sess *session, w replier, cmds []redcon.Command, shared bool) int {
	if len(cmds) < 2 { // an unpipelined command: Dispatch looks it up
		return 0
	}
	first, ok := s.asRunnable(cmds[0])
	if !ok {
		return 0
	}
	key := cmds[0].Args[1]
	run, items := sess.run[:0], 0
	r, name := first, cmds[0].Args[0]
	for _, cmd := range cmds {
		// A pipeline spells its commands alike: one spelled as the one before is that command.
		if !bytes.Equal(cmd.Args[0], name) || len(cmd.Args) < 3 || !r.multi && len(cmd.Args) != 3 {
			if r, ok = s.asRunnable(cmd); !ok {
				break
			}
			name = cmd.Args[0]
		}
		if r.add != first.add || !bytes.Equal(cmd.Args[1], key) || items+len(cmd.Args)-2 > maxRun {
			break
		}
		items += len(cmd.Args) - 2
		run = append(run, r)
	}
	sess.run = run // its room, for the next read
	n := len(run)
	if n < 2 || !s.batchable(sess, cmds[0]) {
		return 0
	}
	start := time.Now()
	if shared {
		s.txMu.RLock()
	}
	answers, err := s.runBatch(sess, first.add, string(key), itemStrings(cmds[:n], items, first.add))
	if shared {
		s.txMu.RUnlock()
	}
	var stopped *stoppedError
	if err != nil && len(answers) < items {
		// The engine stopped part-way (a memory limit). The commands whose items it answered all
		// get their answers; the others are left to be answered one by one, as they would have
		// been without the batch, but for one whose first items the batch added (below).
		stopped = asStopped(err)
		n, err = coveredWhole(cmds[:len(run)], len(answers)), nil
		run = run[:n]
	}
	// Each command took the batch's time.
	elapsed := time.Since(start)
	out := writer{w, sess.resp3}
	for i, r := range run {
		m := len(cmds[i].Args) - 2
		switch {
		case err != nil:
			out.WriteError(oneLine(replyText(err)))
		case r.multi:
			out.WriteArray(m)
			for _, a := range answers[:m] {
				out.WriteBool(a == 1)
			}
		default:
			out.WriteBool(answers[0] == 1)
		}
		if err == nil {
			answers = answers[m:]
		}
		s.series(r.cmd, true).Answered(err != nil, elapsed)
	}
	if stopped != nil && len(answers) > 0 {
		s.answerStopped(out, cmds[n], answers, stopped)
		s.series(sess.run[n].cmd, true).Answered(false, time.Since(start))
		n++
	}
	return n
}

// asStopped is err as a *stoppedError, or nil.
func asStopped(err error) *stoppedError {
	stopped, _ := errors.AsType[*stoppedError](err)
	return stopped
}

// coveredWhole is how many of cmds, from the first, have all their items among the first items.
func coveredWhole(cmds []redcon.Command, items int) int {
	n := 0
	for covered := 0; n < len(cmds) && covered+len(cmds[n].Args)-2 <= items; n++ {
		covered += len(cmds[n].Args) - 2
	}
	return n
}

// answerStopped answers a BF.MADD whose first items a batch added before the filter stopped at
// the next one, as addAndReply would have answered it alone: the answers, the error in place of
// that item, and each item after tried alone.
func (s *Server) answerStopped(w writer, cmd redcon.Command, answers []int64, stopped *stoppedError) {
	items := cmd.Args[2:]
	w.WriteArray(len(items))
	for _, a := range answers {
		w.WriteBool(a == 1)
	}
	rest := make([]string, 0, len(items)-len(answers)-1)
	for _, item := range items[len(answers)+1:] {
		rest = append(rest, string(item))
	}
	ctx, cancel := s.commandContext()
	defer cancel()
	s.answerNotAdded(ctx, w, string(cmd.Args[1]), stopped, rest)
}

// itemStrings gathers the items of cmds, the arguments after the key, as strings. Checks keep no
// item, so their strings view the arguments where redcon read them, valid until the commands are
// answered; an add's items may be kept (by the log, by the queues to the peers), so they are
// copied, all into one allocation.
func itemStrings(cmds []redcon.Command, items int, copied bool) []string {
	out := make([]string, 0, items)
	var buf []byte
	if copied {
		size := 0
		for _, cmd := range cmds {
			for _, item := range cmd.Args[2:] {
				size += len(item)
			}
		}
		buf = make([]byte, 0, size)
	}
	for _, cmd := range cmds {
		for _, item := range cmd.Args[2:] {
			if copied {
				start := len(buf)
				buf = append(buf, item...)
				item = buf[start:len(buf):len(buf)]
			}
			out = append(out, unsafe.String(unsafe.SliceData(item), len(item)))
		}
	}
	return out
}

// runBatch adds, or checks, items in the filter key, and answers 1 or 0 for each as the commands
// do: 1 for an item added, or for one present. With an error, it answers the items added before
// the engine stopped, if it stopped part-way: all of them, or none, when the error came after.
// The answers are the session's, valid until its next batch.
func (s *Server) runBatch(sess *session, add bool, key string, items []string) ([]int64, error) {
	answers := slices.Grow(sess.answers[:0], len(items))[:len(items)]
	clear(answers)
	sess.answers = answers
	ctx, cancel := s.commandContext()
	defer cancel()
	if !add {
		if f, ok := s.lookup(key); ok {
			present, err := s.check(ctx, f, items)
			if err != nil {
				return nil, err
			}
			for i, p := range present {
				answers[i] = 1 - added(p)
			}
		}
		return answers, nil
	}
	opts := s.defaults()
	present, _, err := s.add(ctx, key, &opts, items)
	if err == nil && len(present) != len(items) {
		err = errorf("the filter answered %d of %d items", len(present), len(items))
	}
	for i, p := range present {
		answers[i] = added(p)
	}
	return answers[:len(present)], err
}

// batchable reports whether the commands of a run to the filter of cmd answer alike one by one
// and in a batch: not before the connection authenticated or while the filters load, which each
// answers on its own, and not for a non-scaling filter, which each add must find not full.
func (s *Server) batchable(sess *session, cmd redcon.Command) bool {
	if !sess.authenticated || s.opts.Loading() {
		return false
	}
	f, ok := s.opts.Store.Lookup(string(cmd.Args[1]))
	return !ok || f.Options().Scalable
}
