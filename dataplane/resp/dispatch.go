package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// session is what a connection remembers between its commands.
type session struct {
	name, libName, libVersion string
	// authenticated is set by AUTH or HELLO ... AUTH; without a password every connection is.
	authenticated bool
	// resp3 says HELLO 3 switched the connection to RESP3 (reply.go).
	resp3 bool
	// authFailures counts the connection's failed authentications, each answered later than
	// the one before.
	authFailures int
	// tx is the transaction MULTI opened, nil outside one.
	tx *transaction
	// run and answers are reused from one read of commands to the next: a connection answers
	// one read at a time.
	run     []runnable
	answers []int64
}

// command is one command of the table: its arity in Redis's convention (n: exactly n arguments,
// the name included; -n: at least n) and what runs it.
type command struct {
	arity int
	// filters marks the commands that read or write filters: they wait for recovery.
	filters bool
	// noAuth marks the commands a connection may send before it authenticates (Redis's
	// no-auth flag): AUTH, HELLO and QUIT.
	noAuth bool
	// runsAtOnce marks the commands that run even inside MULTI rather than being queued (MULTI,
	// EXEC, DISCARD, WATCH, QUIT), and noMulti those refused there (AUTH, HELLO: a failed
	// authentication waits, and EXEC must not wait with the transaction lock held).
	runsAtOnce, noMulti bool
	run                 func(ctx context.Context, s *Server, c *call) error

	// name is the command's lower-case name and index its place in commandNames, which the
	// server's metrics series are indexed by; init sets both.
	name  string
	index int
}

// call is one command being answered.
type call struct {
	sess *session
	w    writer
	args [][]byte // args[0] is the command's name
	quit bool
	// queued says the command was kept for EXEC, which counts it in the metrics when it runs.
	queued bool
}

// arg is argument i as a string.
func (c *call) arg(i int) string { return string(c.args[i]) }

// replyError is an error answered as it is: its text starts with Redis's error prefix (ERR,
// LOADING, NOPROTO...) or is RedisBloom's own wording.
type replyError string

func (e replyError) Error() string { return string(e) }

// errorf is an ERR reply.
func errorf(format string, a ...any) error { return replyError("ERR " + fmt.Sprintf(format, a...)) }

// tryAgain is the reply to a check-and-set or create that the filter's home did not serve (HTTP's
// 503 codes 13 and 14): Redis Cluster's TRYAGAIN, which clients retry, since no false was answered.
func tryAgain(reason string) string { return "TRYAGAIN " + reason }

// errLoading is Redis's answer while it loads its dataset; clients know to retry it.
const errLoading = replyError("LOADING Bloomery is loading the dataset in memory")

// commands is the command table, by lower-case name. It is filled in init because the
// commands' functions read it (COMMAND COUNT).
var commands map[string]command

// commandNames are the table's names, sorted: the command labels of the metrics.
var commandNames []string

// maxNameLength is the longest name of the table: lookup lowers names in a buffer this large.
const maxNameLength = 16

func init() {
	commands = map[string]command{}
	for _, table := range []map[string]command{bloomCommands, keyspaceCommands, expireCommands, connectionCommands, serverCommands, transactionCommands, dumpCommands} {
		maps.Copy(commands, table)
	}
	commandNames = slices.Sorted(maps.Keys(commands))
	for i, name := range commandNames {
		if len(name) > maxNameLength {
			panic("resp: command name longer than maxNameLength: " + name)
		}
		cmd := commands[name]
		cmd.name, cmd.index = name, i
		commands[name] = cmd
	}
}

// lookup finds a command by its name in any case, without allocating: the name is lowered into
// a buffer on the stack, and a map index by string(bytes) does not copy.
func lookup(name []byte) (command, bool) {
	var buf [maxNameLength]byte
	if len(name) > len(buf) {
		return command{}, false
	}
	lower := buf[:len(name)]
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		lower[i] = ch
	}
	cmd, ok := commands[string(lower)]
	return cmd, ok
}

// command is lookup, but for the commands the configuration disabled (respDisabledCommands),
// which are unknown, as Redis's rename-command to "" makes them.
func (s *Server) command(name []byte) (command, bool) {
	cmd, known := lookup(name)
	if known && s.disabled[cmd.index] {
		return command{}, false
	}
	return cmd, known
}

// CheckDisabledCommands reports a name of respDisabledCommands that is no command of the port:
// a misspelt name would leave on what the operator meant to turn off.
func CheckDisabledCommands(names []string) error {
	for _, name := range names {
		if _, ok := commands[strings.ToLower(name)]; !ok {
			return fmt.Errorf("respDisabledCommands: %q is not a command of the RESP port (docs/resp.md lists them)", name)
		}
	}
	return nil
}

// Dispatch answers one command into w, with Redis's texts for an unknown command and a wrong
// number of arguments. A command that answers an error as a whole applies nothing. It reports
// whether the connection is to be closed (QUIT).
func (s *Server) Dispatch(ctx context.Context, sess *session, w replier, args [][]byte) (quit bool) {
	if len(args) == 0 {
		return false // redcon never passes an empty command; a fuzzer may
	}
	start := time.Now()
	c := &call{sess: sess, w: writer{w, sess.resp3}, args: args}
	cmd, known := s.command(args[0])
	err := s.run(ctx, c, cmd, known)
	if err != nil {
		w.WriteError(oneLine(replyText(err)))
	}
	if !c.queued {
		s.series(cmd, known).Answered(err != nil, time.Since(start))
	}
	// At debug level every command is logged, as every HTTP request is.
	if s.opts.Log != nil && s.opts.Log.Enabled(ctx, slog.LevelDebug) {
		s.opts.Log.DebugContext(ctx, "RESP command", "command", truncate(string(args[0]), 128), "args", len(args)-1, "error", errText(err))
	}
	return c.quit
}

// run checks a command as Redis does, in its order: that it exists, its number of arguments,
// that the connection has authenticated; then it runs it, or, inside MULTI, queues it. A command
// refused inside MULTI aborts the transaction, as in Redis.
func (s *Server) run(ctx context.Context, c *call, cmd command, known bool) error {
	err := s.admissible(c, cmd, known)
	inMulti := c.sess.tx != nil
	switch {
	case err != nil && inMulti:
		c.sess.tx.aborted = true
		return err
	case err != nil:
		return err
	case inMulti && cmd.noMulti:
		c.sess.tx.aborted = true
		return errNotInMulti
	case inMulti && !cmd.runsAtOnce:
		return s.enqueue(c, cmd)
	case cmd.filters:
		// Shared with every other command on the filters; EXEC holds it alone.
		s.txMu.RLock()
		defer s.txMu.RUnlock()
	}
	return cmd.run(ctx, s, c)
}

// admissible is Redis's checks of a command before it runs or is queued.
func (s *Server) admissible(c *call, cmd command, known bool) error {
	switch {
	case !known:
		return unknownCommand(c.args)
	case cmd.arity > 0 && len(c.args) != cmd.arity || cmd.arity < 0 && len(c.args) < -cmd.arity:
		return wrongArity(cmd.name)
	case s.hasPassword && !c.sess.authenticated && !cmd.noAuth:
		return errNoAuth
	case cmd.filters && s.opts.Loading():
		return errLoading
	}
	return s.loadPending(c, cmd)
}

// unknownCommand is Redis's text: the name and the start of the arguments, each quoted and
// followed by a space, up to about 128 bytes.
func unknownCommand(args [][]byte) error {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(string(a), 128-b.Len()))
	}
	return errorf("unknown command '%s', with args beginning with: %s", truncate(string(args[0]), 128), b.String())
}

// wrongArity is Redis's text, with the command's name in lower case.
func wrongArity(name string) error {
	return errorf("wrong number of arguments for '%s' command", name)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// replyText is the error reply of err: replyErrors as they are; a write the update log cannot
// take (a full or failing disk, HTTP's 507 code 12) after MISCONF, as Redis answers a write it
// cannot persist, so that clients that tell persistence errors apart see one; anything else (an
// engine or a replication error) after ERR.
func replyText(err error) string {
	if re, ok := errors.AsType[replyError](err); ok {
		return string(re)
	}
	if hu, ok := errors.AsType[*writes.HomeUnavailableError](err); ok {
		return tryAgain(hu.Reason)
	}
	if errors.Is(err, filter.ErrNotJournaled) {
		return "MISCONF " + err.Error()
	}
	return "ERR " + err.Error()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return replyText(err)
}

// lineBreaks turns line breaks into spaces; a Replacer is built once, not per reply.
var lineBreaks = strings.NewReplacer("\r", " ", "\n", " ")

// oneLine keeps an error reply on one line, as RESP requires: Redis too turns line breaks in
// error texts into spaces. A text without any, which is nearly every one, is answered as it is.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return lineBreaks.Replace(s)
}
