package resp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// conversation sends commands (words split at spaces) one at a time on one session and
// returns each one's reply, as RESP.
func conversation(t *testing.T, s *Server, sess *session, cmds ...string) []string {
	t.Helper()
	var out []string
	for _, line := range cmds {
		w := redcon.NewWriter(nil)
		var args [][]byte
		for word := range strings.FieldsSeq(line) {
			args = append(args, []byte(word))
		}
		s.Dispatch(t.Context(), sess, w, args)
		out = append(out, string(w.Buffer()))
	}
	return out
}

// wantReplies compares the replies of a conversation with the expected ones.
func wantReplies(t *testing.T, got []string, want ...string) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("reply %d = %q, want %q", i, g, w)
		}
	}
}

// Queued commands run only at EXEC, in order, and their replies, errors of single commands
// included, come in EXEC's array in their places.
func TestTransactionQueuesUntilExec(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	wantReplies(t, conversation(t, s, sess,
		"MULTI", "BF.RESERVE k 0.01 100", "BF.RESERVE k 0.01 100", "BF.ADD k a", "bf.exists k a",
	), "+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n")
	if _, ok := s.opts.Store.Lookup("k"); ok {
		t.Fatal("the filter exists before EXEC: a queued command ran")
	}
	wantReplies(t, conversation(t, s, sess, "EXEC", "EXEC"),
		"*4\r\n+OK\r\n-ERR item exists\r\n:1\r\n:1\r\n", "-ERR EXEC without MULTI\r\n")
}

// A command refused as it is queued (unknown, of the wrong arity, not allowed inside MULTI)
// makes EXEC run nothing and answer EXECABORT; the connection is out of the transaction after.
func TestTransactionAbortedAtQueueTime(t *testing.T) {
	for _, refused := range []string{"NOSUCH x", "BF.ADD k", "AUTH pw"} {
		t.Run(refused, func(t *testing.T) {
			s := newTestServer(t)
			sess := &session{authenticated: true}
			got := conversation(t, s, sess, "MULTI", "BF.ADD k a", refused, "BF.ADD k b", "EXEC", "BF.CARD k")
			if !strings.HasPrefix(got[2], "-ERR ") {
				t.Errorf("%s inside MULTI answered %q, want an error", refused, got[2])
			}
			wantReplies(t, []string{got[0], got[1], got[3], got[4], got[5]},
				"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
				"-EXECABORT Transaction discarded because of previous errors.\r\n", ":0\r\n")
		})
	}
}

// MULTI, EXEC, DISCARD and WATCH out of place answer Redis's errors; DISCARD drops the queue.
func TestTransactionControlErrors(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	wantReplies(t, conversation(t, s, sess,
		"EXEC", "DISCARD", "MULTI", "MULTI", "WATCH k", "BF.ADD k a", "DISCARD", "BF.CARD k", "UNWATCH",
	),
		"-ERR EXEC without MULTI\r\n", "-ERR DISCARD without MULTI\r\n", "+OK\r\n",
		"-ERR MULTI calls can not be nested\r\n", "-ERR WATCH inside MULTI is not allowed\r\n",
		"+QUEUED\r\n", "+OK\r\n", ":0\r\n", "+OK\r\n")
	if got := conversation(t, s, sess, "WATCH k")[0]; !strings.HasPrefix(got, "-ERR WATCH is not supported") {
		t.Errorf("WATCH answered %q, want the error saying it is not supported", got)
	}
	// Neither MULTI nested nor WATCH inside MULTI aborts the transaction, as in Redis.
	wantReplies(t, conversation(t, s, sess, "MULTI", "MULTI", "WATCH k", "PING", "EXEC"),
		"+OK\r\n", "-ERR MULTI calls can not be nested\r\n", "-ERR WATCH inside MULTI is not allowed\r\n",
		"+QUEUED\r\n", "*1\r\n+PONG\r\n")
}

// The queue is bounded by respMaxCommandLength and charged to the budget: the command that would
// pass the bound is refused and aborts the transaction, and EXEC, DISCARD or the connection's end
// give every byte back.
func TestTransactionQueueIsBounded(t *testing.T) {
	s := newTestServer(t)
	budget := &countedBudget{limit: 1 << 30}
	s.budget = budget
	s.authenticated.command = 1000
	sess := &session{authenticated: true}
	item := strings.Repeat("x", 100)
	replies := conversation(t, s, sess, "MULTI")
	for range 20 {
		replies = append(replies, conversation(t, s, sess, "BF.ADD k "+item)...)
	}
	queued := strings.Count(strings.Join(replies, ""), "+QUEUED")
	if queued == 0 || queued == 20 {
		t.Fatalf("%d of 20 commands were queued; want the bound to stop them part-way", queued)
	}
	if !strings.Contains(strings.Join(replies, ""), "larger than respMaxCommandLength (1000 bytes)") {
		t.Errorf("no reply names the bound: %q", replies)
	}
	if budget.used.Load() == 0 || budget.used.Load() > 1000 {
		t.Errorf("the queue holds %d bytes of the budget, want some and at most the bound", budget.used.Load())
	}
	wantReplies(t, conversation(t, s, sess, "EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n")
	if n := budget.used.Load(); n != 0 {
		t.Errorf("after EXEC the budget lends %d bytes, want 0", n)
	}

	// A budget with no room refuses the command too.
	budget.limit = 10
	wantReplies(t, conversation(t, s, sess, "MULTI", "PING"),
		"+OK\r\n", "-"+errBudget.reply+"\r\n")
	conversation(t, s, sess, "DISCARD")

	budget.limit = 1 << 30
	conversation(t, s, sess, "MULTI", "PING", "PING")
	s.endTransaction(sess) // what the connection's end does
	if n := budget.used.Load(); n != 0 {
		t.Errorf("after the connection's end the budget lends %d bytes, want 0", n)
	}
}

// Inside MULTI a pipelined run of adds is queued, not batched: nothing is added before EXEC.
func TestTransactionQueuesPipelinedRuns(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	var cmds []redcon.Command
	for _, line := range []string{"MULTI", "BF.ADD k a", "BF.ADD k b", "BF.MADD k a c"} {
		var args [][]byte
		for w := range strings.FieldsSeq(line) {
			args = append(args, []byte(w))
		}
		cmds = append(cmds, redcon.Command{Args: args})
	}
	w := redcon.NewWriter(nil)
	s.answer(sess, w, cmds)
	if got, want := string(w.Buffer()), "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"; got != want {
		t.Fatalf("the pipeline answered %q, want %q", got, want)
	}
	if _, ok := s.opts.Store.Lookup("k"); ok {
		t.Fatal("the filter exists before EXEC: a queued run was batched")
	}
	wantReplies(t, conversation(t, s, sess, "EXEC"), "*3\r\n:1\r\n:1\r\n*2\r\n:0\r\n:1\r\n")
}

// transactionCommandNames are the names FuzzTransaction picks from: the transaction's own, the
// commands a transaction queues, one refused inside MULTI and an unknown one.
var transactionCommandNames = []string{
	"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "BF.ADD", "BF.MADD", "BF.EXISTS", "BF.CARD",
	"BF.RESERVE", "DEL", "PING", "AUTH", "NOSUCH", "bf.add", "exec",
}

// transactionModel is what Redis's rules say a connection's transaction is, kept apart from the
// server's own state.
type transactionModel struct {
	inMulti, aborted bool
	queue            [][][]byte
}

// expect is the reply the model expects to a command on the transaction ("-" for any error),
// and whether the model answered it (false: an ordinary command outside MULTI, which the
// reference server answers).
func (m *transactionModel) expect(t *testing.T, reference *Server, args [][]byte) (string, bool) {
	t.Helper()
	cmd, known := lookup(args[0])
	arityOK := known && (cmd.arity > 0 && len(args) == cmd.arity || cmd.arity < 0 && len(args) >= -cmd.arity)
	switch {
	case known && arityOK && cmd.name == "multi" && m.inMulti:
		return "-ERR MULTI calls can not be nested\r\n", true
	case known && arityOK && cmd.name == "multi":
		m.inMulti, m.aborted, m.queue = true, false, nil
		return "+OK\r\n", true
	case known && arityOK && (cmd.name == "exec" || cmd.name == "discard") && !m.inMulti:
		return "-ERR " + strings.ToUpper(cmd.name) + " without MULTI\r\n", true
	case known && arityOK && cmd.name == "discard":
		m.inMulti = false
		return "+OK\r\n", true
	case known && arityOK && cmd.name == "exec":
		m.inMulti = false
		if m.aborted {
			return "-EXECABORT Transaction discarded because of previous errors.\r\n", true
		}
		// What the commands answer one by one, outside any transaction.
		out := fmt.Sprintf("*%d\r\n", len(m.queue))
		for _, q := range m.queue {
			w := redcon.NewWriter(nil)
			reference.Dispatch(t.Context(), &session{authenticated: true}, w, q)
			out += string(w.Buffer())
		}
		return out, true
	case known && arityOK && cmd.name == "watch" && m.inMulti:
		return "-ERR WATCH inside MULTI is not allowed\r\n", true
	case known && arityOK && cmd.name == "watch":
		return "-" + errWatch.Error() + "\r\n", true
	case !m.inMulti:
		return "", false
	case !known || !arityOK || cmd.noMulti:
		m.aborted = true
		return "-", true // any error
	}
	m.queue = append(m.queue, copyArgs(args))
	return "+QUEUED\r\n", true
}

// FuzzTransaction sends arbitrary commands (split at 0x01, their arguments at NUL bytes, the
// first byte of each picking its name) on one connection, MULTI, EXEC and DISCARD among them, and
// checks every reply against Redis's rules, kept in a model: a command inside MULTI is queued or
// refused, EXEC answers EXECABORT after a refusal and otherwise, byte for byte, what its
// commands answer sent one by one to a second server fed the same commands. The queue gives
// every byte it took from the budget back.
func FuzzTransaction(f *testing.F) {
	for _, seed := range []string{
		"\x00\x01\x05k\x00a\x01\x07k\x00a\x01\x08k\x01\x01",
		"\x00\x01\x05k\x00a\x01\x05k\x01\x01\x01\x08k",
		"\x00\x01\x00\x01\x03k\x01\x0c\x01\x0dx\x01\x0f",
		"\x09k\x000.01\x00100\x01\x00\x01\x09k\x000.01\x00100\x01\x0ak\x01\x06k\x00a\x00b\x01\x02\x01\x08k",
		"\x01\x01\x02\x01\x03k\x01\x04\x01\x00\x01\x04\x01\x0b\x01\x01",
		// EXEC batches runs of adds and of checks to one filter, an item repeated within a run.
		"\x00\x01\x05k\x00a\x01\x05k\x00b\x01\x06k\x00a\x00c\x01\x07k\x00a\x01\x07k\x00z\x01\x05k\x00z\x01\x01",
	} {
		f.Add([]byte(seed))
	}
	s, reference := newTestServer(f), newTestServer(f)
	budget := &countedBudget{limit: 1 << 30}
	s.budget = budget
	f.Fuzz(func(t *testing.T, in []byte) {
		sess, model := &session{authenticated: true}, &transactionModel{}
		defer func() {
			s.endTransaction(sess)
			if n := budget.used.Load(); n != 0 {
				t.Fatalf("after the connection's end the budget lends %d bytes", n)
			}
		}()
		for i, part := range bytes.Split(in, []byte{1}) {
			if len(part) == 0 || i == 64 {
				continue
			}
			args := bytes.Split(part[1:], []byte{0})
			name := []byte(transactionCommandNames[int(part[0])%len(transactionCommandNames)])
			args = append([][]byte{name}, args[:min(len(args), 8)]...)
			if len(part) == 1 {
				args = args[:1]
			}
			want, modelled := model.expect(t, reference, args)
			w := redcon.NewWriter(nil)
			s.Dispatch(t.Context(), sess, w, args)
			got := string(w.Buffer())
			if !modelled {
				ref := redcon.NewWriter(nil)
				reference.Dispatch(t.Context(), &session{authenticated: true}, ref, args)
				want = string(ref.Buffer())
			}
			if n, err := readReply(w.Buffer()); err != nil || n != len(got) {
				t.Fatalf("%q answered %q: not one reply (%v)", args, got, err)
			}
			if want == "-" && !strings.HasPrefix(got, "-") || want != "-" && got != want {
				t.Fatalf("%q answered %q, want %q", args, got, want)
			}
		}
	})
}
