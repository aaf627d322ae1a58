package resp

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/tidwall/redcon"
)

// The port's limits follow Redis's model: maxclients (respMaxClients) refuses a connection past
// the limit with Redis's text rather than leaving it in the accept queue; timeout
// (respTimeoutSeconds) closes an idle connection; proto-max-bulk-len and client-query-buffer-limit
// (respMaxBulkLength, respMaxCommandLength) bound what one command may be, and far less before
// AUTH. Beyond Redis, a command must arrive, and its replies be read, within requestTimeoutSeconds
// as an HTTP request's must, and the commands read and not yet answered are charged to the
// client port's budget of request bytes in flight (maxRequestBytesInFlight).

// Budget is the pod's budget of request bytes in flight, which the RESP port shares with the
// HTTP client port's request bodies.
type Budget interface {
	// Take takes n bytes, or reports false when they would exceed the budget.
	Take(n int64) bool
	// Release gives back n bytes taken.
	Release(n int64)
}

// unlimited is the budget of a server given none.
type unlimited struct{}

func (unlimited) Take(int64) bool { return true }
func (unlimited) Release(int64)   {}

// The reasons a connection is closed or refused, the metrics' labels.
const (
	closedClient      = "client"       // the client closed it, or QUIT
	closedIdle        = "idle"         // silent for respTimeoutSeconds
	closedSlowCommand = "slow_command" // a command took longer than requestTimeoutSeconds to arrive
	closedSlowReader  = "slow_reader"  // its replies were not read within requestTimeoutSeconds
	closedTooLarge    = "too_large"    // a command past the limits
	closedProtocol    = "protocol"     // not RESP
	closedBudget      = "budget"       // the pod's request bytes in flight at their limit
	closedShutdown    = "shutdown"     // the port closed
	refusedMaxClients = "max_clients"
)

// errMaxClients is Redis's text to a connection past maxclients.
const errMaxClients = "-ERR max number of clients reached\r\n"

// Serve answers the connections ln accepts until ln is closed, which also closes every
// connection; it then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	defer s.closeAll()
	for {
		nc, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // out of file descriptors, and the like: go on
				continue
			}
			return err
		}
		if !s.admit(nc) {
			go s.refuse(nc)
			continue
		}
		go s.serveConn(nc)
	}
}

// admit counts a new connection, or reports false when the port holds respMaxClients already.
func (s *Server) admit(nc net.Conn) bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if s.conns == nil || len(s.conns) >= s.maxClients {
		return false
	}
	s.conns[nc] = struct{}{}
	s.clients.Add(1)
	if s.opts.Metrics != nil {
		s.opts.Metrics.RESP.Opened()
	}
	return true
}

// refuse answers a connection past the limit as Redis does, and closes it; a client that does
// not take the answer within the command deadline is closed anyway.
func (s *Server) refuse(nc net.Conn) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.RESP.Refused(refusedMaxClients)
	}
	_ = nc.SetDeadline(time.Now().Add(s.opts.Config.RequestTimeout))
	_, _ = io.WriteString(nc, errMaxClients) // the client may be gone: it is closed either way
	_ = nc.Close()
}

// closeAll closes every connection once the listener is closed; their commands in flight finish
// (Drain waits for them) and their replies are lost.
func (s *Server) closeAll() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for nc := range s.conns {
		_ = nc.Close()
	}
	s.conns = nil
}

// forget counts a connection gone, for the reason given.
func (s *Server) forget(nc net.Conn, reason string) {
	_ = nc.Close() // closed already, or the reason to close it
	s.connsMu.Lock()
	if s.conns == nil {
		reason = closedShutdown
	}
	delete(s.conns, nc)
	s.connsMu.Unlock()
	s.clients.Add(-1)
	if s.opts.Metrics != nil {
		s.opts.Metrics.RESP.Closed(reason)
	}
}

// serveConn reads a connection's commands and answers them, a read at a time, until it closes.
func (s *Server) serveConn(nc net.Conn) {
	sess := &session{authenticated: !s.hasPassword}
	rd := newReader(nc, s.budget, s.opts.Config.RESPTimeout, s.opts.Config.RequestTimeout)
	w := redcon.NewWriter(nc)
	reason := s.connLoop(nc, sess, rd, w)
	s.endTransaction(sess) // a transaction left open gives back its queue's bytes
	rd.close()
	s.forget(nc, reason)
}

// connLoop serves the connection until it is to be closed, and says why.
func (s *Server) connLoop(nc net.Conn, sess *session, rd *reader, w *redcon.Writer) string {
	for {
		cmds, err := rd.read(s.limits(sess))
		if err != nil {
			return s.readFailed(nc, w, err)
		}
		start := time.Now()
		quit, draining := s.serveRead(sess, w, cmds)
		rd.answered(time.Since(start))
		rd.release()
		if err := s.flush(nc, w); err != nil {
			return closedSlowReader
		}
		switch {
		case draining:
			return closedShutdown
		case quit:
			return closedClient
		}
	}
}

// serveRead answers the commands of one read, unless the server is draining.
func (s *Server) serveRead(sess *session, w replier, cmds []redcon.Command) (quit, draining bool) {
	s.mu.RLock()
	if s.draining {
		s.mu.RUnlock()
		w.WriteError("ERR Bloomery is shutting down")
		return false, true
	}
	s.inFlight.Add(1)
	s.mu.RUnlock()
	defer s.inFlight.Done()
	return s.answer(sess, w, cmds), false
}

// flush writes the replies, which the client must take within requestTimeoutSeconds: one that
// does not read them is closed rather than held.
func (s *Server) flush(nc net.Conn, w *redcon.Writer) error {
	if err := nc.SetWriteDeadline(time.Now().Add(s.opts.Config.RequestTimeout)); err != nil {
		return err
	}
	return w.Flush()
}

// readFailed answers a command refused by the limits before closing, and says why the
// connection closes.
func (s *Server) readFailed(nc net.Conn, w *redcon.Writer, err error) string {
	pe, ok := errors.AsType[*protocolError](err)
	switch {
	case !ok && errors.Is(err, os.ErrDeadlineExceeded):
		return closedIdle
	case !ok:
		return closedClient // EOF, a reset: the client went away
	case pe.reply != "":
		w.WriteError(pe.reply)
		_ = s.flush(nc, w) // the connection closes either way
	}
	return pe.reason
}

// limits are what a command of sess may be: Redis's small limits before it authenticates.
func (s *Server) limits(sess *session) limits {
	if !sess.authenticated {
		return limits{args: unauthenticatedArgs, bulk: unauthenticatedBulk, command: unauthenticatedArgs * (unauthenticatedBulk + 32)}
	}
	return s.authenticated
}
