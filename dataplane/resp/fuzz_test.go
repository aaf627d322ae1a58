package resp

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// newTestServer is a server over a store of its own, alone (no peers), with small memory limits
// so that arbitrary capacities fail instead of allocating.
func newTestServer(t testing.TB) *Server {
	t.Helper()
	return newTestServerWithPassword(t, "")
}

// newTestServerWithPassword is newTestServer whose connections must authenticate with password
// (none when empty).
func newTestServerWithPassword(t testing.TB, password string) *Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	store := filter.NewStore(filter.Limits{FilterBytes: 1 << 20, TotalBytes: 8 << 20, Filters: 64}, nil)
	node := replication.NewNode(replication.Options{Store: store, Log: log, Timeout: 100 * time.Millisecond})
	t.Cleanup(node.Close)
	cfg := config.Default()
	cfg.DefaultExpectedInsertions = 1000
	return New(Options{
		Config: cfg, Log: log, Store: store, Writes: writes.New(store, node, log),
		Metrics: metrics.New(metrics.Options{Store: store}), Password: password,
	})
}

// dispatchSeeds are argument vectors (split at NUL bytes) of every command, well and badly formed.
var dispatchSeeds = []string{
	"PING", "PING\x00hi", "ECHO\x00x", "HELLO\x002", "HELLO\x003", "HELLO\x002\x00SETNAME\x00n", "HELLO\x004", "HELLO",
	"SELECT\x000", "SELECT\x009", "CLIENT\x00SETNAME\x00me", "CLIENT\x00GETNAME", "COMMAND", "COMMAND\x00COUNT", "QUIT",
	"BF.RESERVE\x00k\x000.01\x00100", "BF.RESERVE\x00k\x000.01\x00100\x00EXPANSION\x003\x00NONSCALING",
	"BF.ADD\x00k\x00a", "BF.MADD\x00k\x00a\x00b", "BF.EXISTS\x00k\x00a", "BF.MEXISTS\x00k\x00a\x00z",
	"BF.INSERT\x00n\x00CAPACITY\x002\x00NONSCALING\x00ITEMS\x00a\x00b\x00c", "BF.INSERT\x00k\x00NOCREATE\x00ITEMS\x00a",
	"BF.INFO\x00k", "BF.INFO\x00k\x00EXPANSION", "BF.CARD\x00k",
	"DEL\x00k\x00z", "EXISTS\x00k", "TYPE\x00k", "KEYS\x00*", "SCAN\x000\x00MATCH\x00k*\x00COUNT\x002",
	"INFO", "INFO\x00keyspace\x00server",
	"EXPIRE\x00k\x00100", "EXPIRE\x00k\x00100\x00NX", "EXPIRE\x00k\x00100\x00gt\x00XX", "EXPIRE\x00k\x00-1",
	"EXPIRE\x00k\x009223372036854775807", "EXPIRE\x00k\x00x\x00LT", "EXPIRE\x00k\x001\x00NX\x00LT", "EXPIRE\x00k\x001\x00GT\x00LT\x00zz",
	"PEXPIRE\x00k\x001500\x00LT", "PEXPIRE\x00k\x00-9223372036854775808", "TTL\x00k", "PTTL\x00k", "PERSIST\x00k", "TTL\x00k\x00k",
	"nosuch\x00a\r\nb", "BF.ADD\x00k",
	"AUTH\x00pw", "AUTH\x00default\x00pw", "AUTH\x00a\x00b\x00c", "HELLO\x002\x00AUTH\x00default\x00pw\x00SETNAME\x00n", "HELLO\x002\x00AUTH",
}

// FuzzDispatch runs arbitrary argument vectors (the input split at NUL bytes) through the
// dispatch of a RESP2 connection and of a RESP3 one: nothing panics, and every command answers
// exactly one well-formed reply, of RESP2's types alone on a connection that is not (or no
// longer, after the command's HELLO) in RESP3.
func FuzzDispatch(f *testing.F) {
	for _, seed := range dispatchSeeds {
		f.Add([]byte(seed))
	}
	s := newTestServer(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte{0})
		if len(args) > 64 {
			args = args[:64]
		}
		for _, resp3 := range []bool{false, true} {
			w := redcon.NewWriter(nil)
			sess := &session{resp3: resp3}
			s.Dispatch(t.Context(), sess, w, args)
			out := w.Buffer()
			n, err := readReplyIn(out, sess.resp3)
			if err != nil {
				t.Fatalf("%q answered %q (RESP3 %v): %v", args, out, resp3, err)
			}
			if n != len(out) {
				t.Fatalf("%q answered %q (RESP3 %v): more than one reply", args, out, resp3)
			}
		}
	})
}

// readReply reads one RESP2 or RESP3 reply at the start of b and returns its length.
func readReply(b []byte) (int, error) { return readReplyIn(b, true) }

// readReplyIn is readReply, taking RESP3's types only when resp3 is set.
func readReplyIn(b []byte, resp3 bool) (int, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("no reply")
	}
	end := bytes.Index(b, []byte("\r\n"))
	if end < 0 {
		return 0, fmt.Errorf("unterminated line")
	}
	line := b[1:end]
	if !resp3 && bytes.IndexByte([]byte("#_%="), b[0]) >= 0 {
		return 0, fmt.Errorf("RESP3's type %q in a RESP2 reply", b[0])
	}
	switch b[0] {
	case '+', '-':
		if bytes.ContainsAny(line, "\r\n") {
			return 0, fmt.Errorf("line break in a simple reply")
		}
		return end + 2, nil
	case ':':
		if _, err := strconv.ParseInt(string(line), 10, 64); err != nil {
			return 0, fmt.Errorf("integer %q: %w", line, err)
		}
		return end + 2, nil
	case '#':
		if string(line) != "t" && string(line) != "f" {
			return 0, fmt.Errorf("boolean %q", line)
		}
		return end + 2, nil
	case '_':
		if len(line) != 0 {
			return 0, fmt.Errorf("null %q", line)
		}
		return end + 2, nil
	case '%':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("map length %q", line)
		}
		return readElements(b, end+2, 2*n, resp3)
	case '$', '=':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("bulk length %q", line)
		}
		if n == -1 {
			return end + 2, nil
		}
		if len(b) < end+2+n+2 || string(b[end+2+n:end+4+n]) != "\r\n" {
			return 0, fmt.Errorf("bulk of %d bytes not terminated", n)
		}
		return end + 4 + n, nil
	case '*':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("array length %q", line)
		}
		return readElements(b, end+2, n, resp3)
	}
	return 0, fmt.Errorf("unknown reply type %q", b[0])
}

// readElements reads n replies from b[at:], an aggregate's elements, and returns where they end.
func readElements(b []byte, at, n int, resp3 bool) (int, error) {
	for range max(n, 0) {
		m, err := readReplyIn(b[at:], resp3)
		if err != nil {
			return 0, err
		}
		at += m
	}
	return at, nil
}

// Finding a command by its name, in any case, allocates nothing: it runs for every command.
func TestLookupDoesNotAllocate(t *testing.T) {
	names := [][]byte{[]byte("BF.ADD"), []byte("bf.mexists"), []byte("Ping"), []byte("NOSUCHCOMMAND"), []byte("a-name-longer-than-any-command")}
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range names {
			lookup(name)
		}
	}); n != 0 {
		t.Errorf("lookup allocates %v times, want 0", n)
	}
	for _, name := range []string{"BF.ADD", "bf.add", "Bf.Add"} {
		if cmd, ok := lookup([]byte(name)); !ok || cmd.name != "bf.add" || commandNames[cmd.index] != "bf.add" {
			t.Errorf("lookup(%q) = %+v, %v; want bf.add", name, cmd, ok)
		}
	}
}

// FuzzDispatchBeforeAuth runs arbitrary argument vectors through a connection of a server with a
// password that has not authenticated: every command answers one well-formed reply, and none
// but AUTH and HELLO with the password changes anything: the filters stay as they were.
func FuzzDispatchBeforeAuth(f *testing.F) {
	for _, seed := range dispatchSeeds {
		f.Add([]byte(seed))
	}
	f.Add([]byte("AUTH\x00the-password"))
	s := newTestServerWithPassword(f, "the-password")
	if _, _, err := s.opts.Store.Create("k", filter.Options{Capacity: 100, FPP: 0.01}, false); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte{0})
		if len(args) > 64 {
			args = args[:64]
		}
		before := s.opts.Store.Names()
		w := redcon.NewWriter(nil)
		sess := &session{}
		s.Dispatch(t.Context(), sess, w, args)
		out := w.Buffer()
		if n, err := readReply(out); err != nil || n != len(out) {
			t.Fatalf("%q answered %q: not one well-formed reply (%v)", args, out, err)
		}
		if sess.authenticated {
			return // the password was given: what follows is a client's to do
		}
		if after := s.opts.Store.Names(); !slices.Equal(before, after) {
			t.Fatalf("%q, unauthenticated, changed the filters from %v to %v", args, before, after)
		}
		if f, err := s.opts.Store.Get("k"); err != nil || f.Items() != 0 {
			t.Fatalf("%q, unauthenticated, wrote to a filter (%v)", args, err)
		}
	})
}

// pipelineCommands are the commands FuzzPipeline sends, picked by a byte: those a run batches,
// and those that change what the runs find. None answers with a time (TTL, INFO), which two
// servers would answer apart.
var pipelineCommands = []string{"BF.ADD", "BF.MADD", "BF.EXISTS", "BF.MEXISTS", "BF.INSERT", "BF.RESERVE", "BF.CARD", "DEL", "bf.add", "Bf.Exists"}

// FuzzPipeline sends arbitrary pipelines (commands split at 0x01, their arguments at NUL bytes,
// the first byte of each picking its name) to two servers fed the same inputs in the same order:
// one answers each pipeline as a client's pipeline is answered, with runs batched; the other
// answers its commands one at a time. Every command answers one well-formed reply, and the two
// servers answer alike, byte for byte, so a batch answers what its commands would have one by one.
func FuzzPipeline(f *testing.F) {
	for _, seed := range []string{
		"\x00k\x00a\x01\x00k\x00b\x01\x00k\x00a\x01\x02k\x00a\x01\x02k\x00z",
		"\x01k\x00a\x00b\x01\x00k\x00c\x01\x01k\x00a\x01\x03k\x00a\x00c\x00q\x01\x02k\x00b",
		"\x05n\x000.01\x003\x00NONSCALING\x01\x00n\x00a\x01\x00n\x00b\x01\x00n\x00c\x01\x00n\x00d\x01\x06n",
		"\x00k\x00a\x01\x00k\x00a\x00extra\x01\x00k\x00b\x01\x07k\x01\x00k\x00b\x01\x08k\x00c\x01\x09k\x00c",
		"\x04k\x00ITEMS\x00a\x01\x00k\x00a\x01\x00j\x00a\x01\x00j\x00b\x01\x01j\x00c\x00a",
	} {
		f.Add([]byte(seed))
	}
	batched, single := newTestServer(f), newTestServer(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var cmds []redcon.Command
		for part := range bytes.SplitSeq(in, []byte{1}) {
			if len(part) == 0 || len(cmds) == 64 {
				continue
			}
			args := bytes.Split(part[1:], []byte{0})
			name := []byte(pipelineCommands[int(part[0])%len(pipelineCommands)])
			cmds = append(cmds, redcon.Command{Args: append([][]byte{name}, args[:min(len(args), 32)]...)})
		}
		sess := &session{authenticated: true}
		piped := redcon.NewWriter(nil)
		batched.answer(sess, piped, cmds)
		oneByOne := redcon.NewWriter(nil)
		for _, cmd := range cmds {
			single.Dispatch(t.Context(), sess, oneByOne, cmd.Args)
		}
		if got, want := piped.Buffer(), oneByOne.Buffer(); !bytes.Equal(got, want) {
			t.Fatalf("pipeline %q answered\n%q\none by one\n%q", cmds, got, want)
		}
		out := piped.Buffer()
		for i := range cmds {
			n, err := readReply(out)
			if err != nil {
				t.Fatalf("command %d of %q: %v (%q)", i, cmds, err, out)
			}
			out = out[n:]
		}
		if len(out) > 0 {
			t.Fatalf("%q answered more than one reply per command: %q left", cmds, out)
		}
	})
}

// A run of adds that the filter's memory limit stops part-way answers what its commands would
// have one by one: those before the limit their answers, the one it stops and those after the
// error of the limit (ERR ... memory).
func TestPipelineStoppedByALimitAnswersAsOneByOne(t *testing.T) {
	var cmds []redcon.Command
	// The first layer holds 100,000 items in about 420 KB; a second would pass the test
	// server's 1 MiB per filter.
	cmds = append(cmds, redcon.Command{Args: [][]byte{[]byte("BF.RESERVE"), []byte("f"), []byte("0.0000001"), []byte("100000")}})
	for c := range 60 {
		args := [][]byte{[]byte("BF.MADD"), []byte("f")}
		for i := range 2000 {
			args = append(args, []byte(fmt.Sprintf("v-%d-%d", c, i)))
		}
		cmds = append(cmds, redcon.Command{Args: args}, redcon.Command{Args: [][]byte{[]byte("BF.ADD"), []byte("f"), []byte(fmt.Sprintf("one-%d", c))}})
	}
	sess := &session{authenticated: true}
	piped := redcon.NewWriter(nil)
	newTestServer(t).answer(sess, piped, cmds)
	single, oneByOne := newTestServer(t), redcon.NewWriter(nil)
	for _, cmd := range cmds {
		single.Dispatch(t.Context(), sess, oneByOne, cmd.Args)
	}
	errors := bytes.Count(oneByOne.Buffer(), []byte("\r\n-ERR"))
	if errors == 0 || errors == len(cmds)-1 {
		t.Fatalf("one by one, %d of %d commands answered an error: the limit was not reached part-way", errors, len(cmds))
	}
	if !bytes.Equal(piped.Buffer(), oneByOne.Buffer()) {
		t.Errorf("the pipeline answered %d errors and %d bytes, one by one %d errors and %d bytes",
			bytes.Count(piped.Buffer(), []byte("\r\n-ERR")), len(piped.Buffer()), errors, len(oneByOne.Buffer()))
	}
	t.Logf("%d of %d commands answered the limit's error", errors, len(cmds))
}
