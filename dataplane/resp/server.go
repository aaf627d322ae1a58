// Package resp serves RedisBloom's BF.* commands over the Redis protocol (RESP2) on the data
// plane's filters, the same ones the HTTP API serves: reads come from the store, writes go
// through the write service, so they are journaled, replicated and served by the filter's home
// as HTTP's are. It decodes commands and encodes replies; the listener and its life are run's.
package resp

import (
	"log/slog"
	"net"
	"sync"

	"github.com/tidwall/redcon"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// Options configure New.
type Options struct {
	Config  config.Config
	Log     *slog.Logger
	Store   *filter.Store
	Writes  *writes.Service
	Metrics *metrics.Metrics
	// Loading reports whether the filters are still being recovered: filter commands then answer
	// LOADING, as Redis does while it loads its dataset. Nil means never.
	Loading func() bool
}

// Server answers RESP commands. Serve it on a listener; Drain before the final snapshot.
type Server struct {
	opts  Options
	level wire.Consistency

	// mu guards draining against the start of a command, so that Drain's wait cannot race with
	// a command that begins as it starts.
	mu       sync.RWMutex
	draining bool
	inFlight sync.WaitGroup
}

// New returns a server over the data plane's store and write service.
func New(opts Options) *Server {
	if opts.Loading == nil {
		opts.Loading = func() bool { return false }
	}
	// Writes run at the cluster's write consistency: RESP has no place for a per-request level.
	return &Server{opts: opts, level: opts.Config.WriteConsistency}
}

// Serve answers the connections ln accepts until ln is closed, which also closes every
// connection; it then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	return redcon.Serve(ln, s.handle, nil, nil)
}

// Drain refuses new commands and waits for those in flight, whose connections closing the
// listener has cut: after it returns no command of this server changes a filter.
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.inFlight.Wait()
}

// handle runs one command of a connection, and those read with it (see serve).
func (s *Server) handle(conn redcon.Conn, cmd redcon.Command) {
	s.mu.RLock()
	if s.draining {
		s.mu.RUnlock()
		conn.WriteError("ERR Bloomery is shutting down")
		_ = conn.Close() // the connection is going anyway
		return
	}
	s.inFlight.Add(1)
	s.mu.RUnlock()
	defer s.inFlight.Done()

	sess, _ := conn.Context().(*session)
	if sess == nil {
		sess = &session{}
		conn.SetContext(sess)
	}
	if quit := s.serve(conn, sess, cmd); quit {
		_ = conn.Close() // flushes the reply first; a failure means the client is gone already
	}
}
