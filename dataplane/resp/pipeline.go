package resp

import (
	"bytes"
	"context"

	"github.com/tidwall/redcon"
)

// A client that pipelines sends many commands before it reads a reply, and they arrive together:
// redcon hands them over one at a time, and writes the replies once every command read with them
// has been answered. Answered one by one, n pipelined BF.ADDs are n commits of the log, each
// waiting for the disk under logSync always, and the client sees no reply until the last. So the
// commands read together are answered here, in order, and a run of BF.ADDs to one filter is one
// batch: one call of the engine's batch path, one commit of the log, one replication.

// maxAddRun bounds the items of one batch of pipelined BF.ADDs.
const maxAddRun = 4096

// serve answers first and every command read with it, in order; it reports whether the client
// asked to close the connection (QUIT), after which nothing more is answered.
func (s *Server) serve(conn redcon.Conn, sess *session, first redcon.Command) (quit bool) {
	cmds := append([]redcon.Command{first}, conn.ReadPipeline()...)
	for len(cmds) > 0 {
		n := addRun(cmds)
		if n > 1 && s.batchable(cmds[0]) {
			s.addBatch(conn, cmds[:n])
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

// addRun is the number of BF.ADDs of one filter that cmds start with: 0 when the first is none.
func addRun(cmds []redcon.Command) int {
	n := 0
	for n < len(cmds) && n < maxAddRun && isAdd(cmds[n]) && bytes.Equal(cmds[n].Args[1], cmds[0].Args[1]) {
		n++
	}
	return n
}

func isAdd(cmd redcon.Command) bool {
	return len(cmd.Args) == 3 && bytes.EqualFold(cmd.Args[0], []byte("bf.add"))
}

// batchable reports whether the BF.ADDs to the filter of cmd answer alike one by one and in a
// batch: not while the filters load, which each answers on its own, and not for a non-scaling
// filter, which each add must find not full.
func (s *Server) batchable(cmd redcon.Command) bool {
	if s.opts.Loading() {
		return false
	}
	f, ok := s.opts.Store.Lookup(string(cmd.Args[1]))
	return !ok || f.Options().Scalable
}

// addBatch answers a run of BF.ADDs of one filter with one add of all their items: 1 or 0 for
// each, or, when the add fails, its error for each, as each would have had alone.
func (s *Server) addBatch(w replier, cmds []redcon.Command) {
	items := make([]string, len(cmds))
	for i, cmd := range cmds {
		items[i] = string(cmd.Args[2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Config.RequestTimeout)
	defer cancel()
	opts := s.defaults()
	answers, _, err := s.add(ctx, string(cmds[0].Args[1]), &opts, items)
	if err == nil && len(answers) != len(items) {
		err = errorf("the filter answered %d of %d items", len(answers), len(items))
	}
	for i := range cmds {
		if err != nil {
			w.WriteError(oneLine(replyText(err)))
		} else {
			w.WriteInt64(added(answers[i]))
		}
		if s.opts.Metrics != nil {
			s.opts.Metrics.RESP.Command(err != nil)
		}
	}
}
