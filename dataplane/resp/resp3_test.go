package resp

import (
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// helloReply is the server's map of HELLO in a protocol: RESP3's map, or RESP2's array.
func helloReply(header, proto string) string {
	return header + "$6\r\nserver\r\n$8\r\nbloomery\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n$5\r\nproto\r\n:" + proto +
		"\r\n$2\r\nid\r\n:0\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
}

// HELLO 3 switches a connection to RESP3, whose replies are Redis 7's and RedisBloom's there:
// booleans for adds and checks, maps for HELLO and BF.INFO, RESP3's null; HELLO 2 switches it
// back, and a HELLO answered an error leaves it as it was.
func TestHelloSwitchesTheProtocol(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	wantReplies(t, conversation(t, s, sess,
		"HELLO 3", "BF.RESERVE k 0.01 100", "BF.ADD k a", "BF.ADD k a", "BF.MADD k a b",
		"BF.EXISTS k a", "BF.EXISTS missing a", "BF.MEXISTS k a z", "BF.INSERT k ITEMS c",
		"BF.CARD k", "BF.INFO k ITEMS", "BF.INFO k", "CLIENT GETNAME", "HELLO",
	),
		helloReply("%7\r\n", "3"), "+OK\r\n", "#t\r\n", "#f\r\n", "*2\r\n#f\r\n#t\r\n",
		"#t\r\n", "#f\r\n", "*2\r\n#t\r\n#f\r\n", "*1\r\n#t\r\n",
		":3\r\n", "%1\r\n+Number of items inserted\r\n:3\r\n",
		"%5\r\n+Capacity\r\n:100\r\n+Size\r\n:240\r\n+Number of filters\r\n:1\r\n+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n",
		"_\r\n", helloReply("%7\r\n", "3"),
	)

	// A non-scaling filter's expansion rate is RESP3's null.
	wantReplies(t, conversation(t, s, sess, "BF.RESERVE fixed 0.01 100 NONSCALING", "BF.INFO fixed EXPANSION"),
		"+OK\r\n", "%1\r\n+Expansion rate\r\n_\r\n")

	// HELLO refused leaves the protocol as it was.
	wantReplies(t, conversation(t, s, sess, "HELLO 4", "HELLO x", "BF.EXISTS k a"),
		"-NOPROTO unsupported protocol version\r\n", "-ERR Protocol version is not an integer or out of range\r\n", "#t\r\n")

	wantReplies(t, conversation(t, s, sess,
		"HELLO 2", "BF.ADD k d", "BF.MEXISTS k d z", "BF.INFO k ITEMS", "BF.INFO fixed EXPANSION", "CLIENT GETNAME",
	),
		helloReply("*14\r\n", "2"), ":1\r\n", "*2\r\n:1\r\n:0\r\n", "*1\r\n:4\r\n", "*1\r\n$-1\r\n", "$-1\r\n",
	)
}

// Errors, queued replies and EXEC's array, with a null and an error in it, are written alike in
// both protocols but for the types RESP3 adds.
func TestTransactionRepliesInBothProtocols(t *testing.T) {
	for _, c := range []struct {
		hello, exec string
	}{
		{"HELLO 2", "*4\r\n:1\r\n$-1\r\n-ERR item exists\r\n*2\r\n:1\r\n:0\r\n"},
		{"HELLO 3", "*4\r\n#t\r\n_\r\n-ERR item exists\r\n*2\r\n#t\r\n#f\r\n"},
	} {
		s := newTestServer(t)
		sess := &session{authenticated: true}
		got := conversation(t, s, sess, c.hello, "BF.RESERVE k 0.01 100", "MULTI", "BF.ADD k a", "CLIENT GETNAME",
			"BF.RESERVE k 0.01 100", "BF.MEXISTS k a z", "BF.ADD k", "EXEC")
		wantReplies(t, got[1:], "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
			"-ERR wrong number of arguments for 'bf.add' command\r\n",
			"-EXECABORT Transaction discarded because of previous errors.\r\n")
		got = conversation(t, s, sess, "MULTI", "BF.ADD k a", "CLIENT GETNAME", "BF.RESERVE k 0.01 100", "BF.MEXISTS k a z", "EXEC")
		wantReplies(t, got, "+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", c.exec)
	}
}

// Pipelined adds and checks, answered as one batch, answer in the connection's protocol.
func TestPipelinedRunsAnswerInRESP3(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	conversation(t, s, sess, "HELLO 3", "BF.RESERVE k 0.01 1000")
	w := redcon.NewWriter(nil)
	var cmds []redcon.Command
	for _, line := range []string{"BF.ADD k a", "BF.MADD k a b", "BF.ADD k c", "BF.EXISTS k a", "BF.MEXISTS k z b", "BF.EXISTS k z"} {
		var args [][]byte
		for word := range strings.FieldsSeq(line) {
			args = append(args, []byte(word))
		}
		cmds = append(cmds, redcon.Command{Args: args})
	}
	if n := s.batched(sess, w, cmds); n != 3 {
		t.Fatalf("the run of adds batched %d commands, want 3", n)
	}
	if n := s.batched(sess, w, cmds[3:]); n != 3 {
		t.Fatalf("the run of checks batched %d commands, want 3", n)
	}
	if got, want := string(w.Buffer()), "#t\r\n*2\r\n#f\r\n#t\r\n#t\r\n#t\r\n*2\r\n#f\r\n#t\r\n#f\r\n"; got != want {
		t.Errorf("the runs answered %q, want %q", got, want)
	}
}

// Writing RESP3's types allocates nothing, as RESP2's do not: adds and checks answer them.
func TestRESP3RepliesDoNotAllocate(t *testing.T) {
	w := redcon.NewWriter(nil)
	for _, resp3 := range []bool{false, true} {
		out := writer{w, resp3}
		if n := testing.AllocsPerRun(100, func() {
			w.SetBuffer(nil)
			out.WriteBool(true)
			out.WriteBool(false)
			out.WriteMap(5)
			out.WriteNull()
		}); n != 0 {
			t.Errorf("RESP3 %v: writing booleans, a map's header and a null allocates %v times", resp3, n)
		}
	}
}
