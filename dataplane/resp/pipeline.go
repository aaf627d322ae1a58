package resp

import (
	"bytes"
	"context"
	"time"

	"github.com/tidwall/redcon"
)

// A client that pipelines sends many commands before it reads a reply, and they arrive together:
// redcon hands them over one at a time, and writes the replies once every command read with them
// has been answered. Answered one by one, n pipelined BF.ADDs are n commits of the log, each
// waiting for the disk under logSync always, and the client sees no reply until the last. So the
// commands read together are answered here, in order, and a run of BF.ADDs to one filter is one
// batch: one call of the engine's batch path, one commit of the log, one replication. A run of
// BF.EXISTS to one filter is one batch of checks, which the engine runs memory-level parallel.

// maxRun bounds the items of one batch of pipelined commands.
const maxRun = 4096

var (
	bfAddName    = []byte("bf.add")
	bfExistsName = []byte("bf.exists")
)

// serve answers first and every command read with it, in order; it reports whether the client
// asked to close the connection (QUIT), after which nothing more is answered.
func (s *Server) serve(conn redcon.Conn, sess *session, first redcon.Command) (quit bool) {
	cmds := append([]redcon.Command{first}, conn.ReadPipeline()...)
	for len(cmds) > 0 {
		if n := s.batched(sess, conn, cmds); n > 0 {
			cmds = cmds[n:]
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Config.RequestTimeout)
		quit = s.Dispatch(ctx, sess, conn, cmds[0].Args)
		cancel()
		if quit {
			return true
		}
		cmds = cmds[1:]
	}
	return false
}

// batched answers the run of BF.ADDs, or of BF.EXISTS, of one filter that cmds start with as one
// batch, and says how many commands it answered: 0 when there is no run of two or more, or when
// its commands would not answer alike one by one and together (see batchable).
func (s *Server) batched(sess *session, w replier, cmds []redcon.Command) int {
	name := cmds[0].Args[0]
	if len(cmds) < 2 || !bytes.EqualFold(name, bfAddName) && !bytes.EqualFold(name, bfExistsName) {
		return 0
	}
	n := 0
	for n < len(cmds) && n < maxRun && len(cmds[n].Args) == 3 &&
		bytes.EqualFold(cmds[n].Args[0], name) && bytes.Equal(cmds[n].Args[1], cmds[0].Args[1]) {
		n++
	}
	if n < 2 || !s.batchable(sess, cmds[0]) {
		return 0
	}
	start := time.Now()
	items := make([]string, n)
	for i, cmd := range cmds[:n] {
		items[i] = string(cmd.Args[2])
	}
	key := string(cmds[0].Args[1])
	var answers []bool // 1 for each true
	var err error
	if bytes.EqualFold(name, bfAddName) {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Config.RequestTimeout)
		defer cancel()
		opts := s.defaults()
		var present []bool
		present, _, err = s.add(ctx, key, &opts, items)
		if err == nil && len(present) != n {
			err = errorf("the filter answered %d of %d items", len(present), n)
		}
		answers = make([]bool, len(present))
		for i, p := range present {
			answers[i] = !p
		}
	} else {
		answers = make([]bool, n)
		if f, ok := s.lookup(key); ok {
			answers = f.CheckMany(items)
		}
	}
	// Each command took the batch's time.
	series, elapsed := s.series(lookup(name)), time.Since(start)
	for i := range n {
		switch {
		case err != nil:
			w.WriteError(oneLine(replyText(err)))
		case answers[i]:
			w.WriteInt64(1)
		default:
			w.WriteInt64(0)
		}
		series.Answered(err != nil, elapsed)
	}
	return n
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
