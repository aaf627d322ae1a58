// Package resp serves RedisBloom's BF.* commands over the Redis protocol (RESP2) on the data
// plane's filters, the same ones the HTTP API serves: reads come from the store, writes go
// through the write service, so they are journaled, replicated and served by the filter's home
// as HTTP's are. It decodes commands and encodes replies; the listener and its life are run's.
package resp

import (
	"crypto/sha256"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// Password, when set, is the default user's: a connection must AUTH (or HELLO ... AUTH)
	// with it before any other command answers.
	Password string
	// Budget, shared with the HTTP client port, is charged the commands read and not yet
	// answered beyond each connection's base; nil is no limit.
	Budget Budget
}

// Server answers RESP commands. Serve it on a listener; Drain before the final snapshot.
type Server struct {
	opts  Options
	level wire.Consistency
	// password is the SHA-256 digest of Options.Password, which AUTH compares in constant time;
	// hasPassword says whether there is one.
	password    [sha256.Size]byte
	hasPassword bool
	// series are each command's metrics, by command index, and other the unknown commands'; nil
	// without metrics.
	perCommand []*metrics.RESPCommand
	other      *metrics.RESPCommand
	// disabled marks, by command index, the commands of respDisabledCommands.
	disabled []bool

	// started is when the server was made, for INFO's uptime; clients counts its open
	// connections.
	started time.Time
	clients atomic.Int64

	// conns are the open connections, which closing the listener closes; nil once it is closed.
	// maxClients bounds them (respMaxClients).
	connsMu    sync.Mutex
	conns      map[net.Conn]struct{}
	maxClients int
	// budget is Options.Budget; authenticated the limits of an authenticated connection's
	// command.
	budget        Budget
	authenticated limits

	// txMu is the transaction lock: EXEC holds it alone, every other command on the filters
	// shared (multi.go).
	txMu sync.RWMutex

	// mu guards draining against the start of a command, so that Drain's wait cannot race with
	// a command that begins as it starts.
	mu       sync.RWMutex
	draining bool
	inFlight sync.WaitGroup
	// drained is closed by Drain, which ends the waits of failed authentications; pause is how
	// a failed authentication waits (sleep; tests record it instead).
	drained chan struct{}
	pause   func(time.Duration)
}

// New returns a server over the data plane's store and write service.
func New(opts Options) *Server {
	if opts.Loading == nil {
		opts.Loading = func() bool { return false }
	}
	// Writes run at the cluster's write consistency: RESP has no place for a per-request level.
	bulk, command := opts.Config.RESPCommandLimits()
	s := &Server{
		opts: opts, level: opts.Config.WriteConsistency, started: time.Now(),
		conns: map[net.Conn]struct{}{}, maxClients: opts.Config.RESPMaxClients,
		budget: opts.Budget, authenticated: limits{args: int(command / minArgBytes), bulk: bulk, command: command},
	}
	s.disabled = make([]bool, len(commandNames))
	for _, name := range opts.Config.RESPDisabledCommands {
		if cmd, ok := commands[strings.ToLower(name)]; ok { // run checked the names
			s.disabled[cmd.index] = true
		}
	}
	if s.budget == nil {
		s.budget = unlimited{}
	}
	s.drained = make(chan struct{})
	s.pause = s.sleep
	if opts.Password != "" {
		s.password, s.hasPassword = sha256.Sum256([]byte(opts.Password)), true
	}
	if opts.Metrics != nil {
		// Resolved once, so that counting a command costs no lookup of its labels.
		s.perCommand = make([]*metrics.RESPCommand, len(commandNames))
		for i, name := range commandNames {
			s.perCommand[i] = opts.Metrics.RESP.Command(name)
		}
		s.other = opts.Metrics.RESP.Command(metrics.OtherCommand)
	}
	return s
}

// series are the metrics of a command; nil, which counts nothing, without metrics.
func (s *Server) series(cmd command, known bool) *metrics.RESPCommand {
	switch {
	case s.perCommand == nil:
		return nil
	case known:
		return s.perCommand[cmd.index]
	}
	return s.other
}

// Drain refuses new commands and waits for those in flight, whose connections closing the
// listener has cut: after it returns no command of this server changes a filter.
func (s *Server) Drain() {
	s.mu.Lock()
	if !s.draining {
		close(s.drained)
	}
	s.draining = true
	s.mu.Unlock()
	s.inFlight.Wait()
}
