package resp

import (
	"context"
	"time"

	"github.com/tidwall/redcon"
)

// Transactions follow Redis's MULTI, EXEC and DISCARD: after MULTI a connection's commands are
// checked (a known name, its arity, authentication, the filters loaded), answered QUEUED and kept;
// EXEC runs them in order and answers their replies as one array, an error in place for a
// command that fails as it runs. A command refused as it is queued makes EXEC answer EXECABORT
// and run nothing, as in Redis.
//
// Isolation: EXEC runs its commands under the server's transaction lock, exclusively; every
// other RESP command that reads or writes filters holds it shared while it runs. So no other RESP
// client's command runs between a transaction's commands on this pod. The lock is the RESP
// port's: a write through the HTTP API, or replicated from a peer, may land between them, as it
// may land between two commands of any client (docs/resp.md, Transactions).

// Redis's texts for a transaction's errors.
const (
	errExecAbort        = replyError("EXECABORT Transaction discarded because of previous errors.")
	errNestedMulti      = replyError("ERR MULTI calls can not be nested")
	errExecWithoutMulti = replyError("ERR EXEC without MULTI")
	errDiscardNoMulti   = replyError("ERR DISCARD without MULTI")
	errWatchInMulti     = replyError("ERR WATCH inside MULTI is not allowed")
	errNotInMulti       = replyError("ERR Command not allowed inside a transaction")
	// Bloomery keeps no version of a filter that a write would change, so it cannot tell EXEC
	// that a watched key changed: it refuses WATCH rather than pretend to watch.
	errWatch = replyError("ERR WATCH is not supported by Bloomery: a transaction's commands run with no other RESP command between them, so check inside MULTI instead")
)

// transactionCommands are MULTI, EXEC, DISCARD, WATCH and UNWATCH.
var transactionCommands = map[string]command{
	"multi":   {arity: 1, runsAtOnce: true, run: multi},
	"exec":    {arity: 1, runsAtOnce: true, run: exec},
	"discard": {arity: 1, runsAtOnce: true, run: discard},
	"watch":   {arity: -2, runsAtOnce: true, run: watch},
	// UNWATCH is queued as Redis queues it; no key is ever watched, so it only answers OK.
	"unwatch": {arity: 1, run: unwatch},
}

// queued is one command kept by MULTI: its arguments copied out of the reader's buffer, which
// the next read reuses.
type queued struct {
	cmd  command
	args [][]byte
}

// transaction is what a connection keeps between MULTI and EXEC or DISCARD.
type transaction struct {
	cmds []queued
	// bytes is what the queued commands hold, each argument counting argBytes more for its
	// slice: charged to the budget, and bounded by respMaxCommandLength.
	bytes int64
	// aborted says a command was refused as it was queued: EXEC answers EXECABORT.
	aborted bool
}

// errQueueTooLarge is the error of a command that would make the queue larger than limit.
func errQueueTooLarge(limit int64) error {
	return errorf("the transaction's queued commands would be larger than respMaxCommandLength (%d bytes): send fewer or smaller commands between MULTI and EXEC", limit)
}

// enqueue keeps c's command for EXEC, or refuses it, which aborts the transaction. The queue is
// bounded as one command is, by respMaxCommandLength, and charged to the pod's budget of request
// bytes in flight until EXEC, DISCARD or the connection's end gives it back.
func (s *Server) enqueue(c *call, cmd command) error {
	tx := c.sess.tx
	size := int64(0)
	for _, a := range c.args {
		size += int64(len(a)) + argBytes
	}
	switch {
	case tx.bytes+size > s.authenticated.command:
		tx.aborted = true
		return errQueueTooLarge(s.authenticated.command)
	case !s.budget.Take(size):
		tx.aborted = true
		return replyError(errBudget.reply)
	}
	tx.bytes += size
	tx.cmds = append(tx.cmds, queued{cmd: cmd, args: copyArgs(c.args)})
	c.queued = true
	c.w.WriteString("QUEUED")
	return nil
}

// copyArgs copies args into one allocation.
func copyArgs(args [][]byte) [][]byte {
	size := 0
	for _, a := range args {
		size += len(a)
	}
	buf := make([]byte, 0, size)
	out := make([][]byte, len(args))
	for i, a := range args {
		start := len(buf)
		buf = append(buf, a...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// endTransaction forgets sess's transaction, giving back what its queue held.
func (s *Server) endTransaction(sess *session) {
	if sess.tx == nil {
		return
	}
	s.budget.Release(sess.tx.bytes)
	sess.tx = nil
}

func multi(_ context.Context, _ *Server, c *call) error {
	if c.sess.tx != nil {
		return errNestedMulti
	}
	c.sess.tx = &transaction{}
	c.w.WriteString("OK")
	return nil
}

func discard(_ context.Context, s *Server, c *call) error {
	if c.sess.tx == nil {
		return errDiscardNoMulti
	}
	s.endTransaction(c.sess)
	c.w.WriteString("OK")
	return nil
}

// exec runs the queued commands, in order, with no other RESP command on the filters between
// them; each is counted in the metrics as if sent alone. A run of adds, or of checks, to one
// filter is one batch, as in a pipeline (pipeline.go), and answers what its commands would one by
// one: a transaction of 16 BF.ADDs otherwise costs 16 passes through the engine, each waiting on
// its own loads of the filter's words.
func exec(_ context.Context, s *Server, c *call) error {
	tx := c.sess.tx
	if tx == nil {
		return errExecWithoutMulti
	}
	defer s.endTransaction(c.sess)
	if tx.aborted {
		return errExecAbort
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	c.w.WriteArray(len(tx.cmds))
	cmds := make([]redcon.Command, len(tx.cmds))
	for i, q := range tx.cmds {
		cmds[i].Args = q.args
	}
	for i := 0; i < len(tx.cmds); {
		// The lock is held exclusively already: the batch takes it no more.
		if n := s.batchedUnder(c.sess, c.w.replier, cmds[i:], false); n > 0 {
			i += n
			continue
		}
		s.execQueued(c, tx.cmds[i])
		i++
	}
	return nil
}

// execQueued runs one queued command, whose reply, or error, takes its place in EXEC's array.
func (s *Server) execQueued(c *call, q queued) {
	start := time.Now()
	ctx, cancel := s.commandContext()
	defer cancel()
	qc := &call{sess: c.sess, w: c.w, args: q.args}
	// The filters were loaded when it was queued, and stay so: its checks hold still.
	err := q.cmd.run(ctx, s, qc)
	if err != nil {
		c.w.WriteError(oneLine(replyText(err)))
	}
	s.series(q.cmd, true).Answered(err != nil, time.Since(start))
}

func watch(_ context.Context, _ *Server, c *call) error {
	if c.sess.tx != nil {
		return errWatchInMulti
	}
	return errWatch
}

func unwatch(_ context.Context, _ *Server, c *call) error {
	c.w.WriteString("OK")
	return nil
}
