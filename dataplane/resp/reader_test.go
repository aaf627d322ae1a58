package resp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countedBudget is a budget of limit bytes that tells what it lends.
type countedBudget struct {
	limit int64
	used  atomic.Int64
}

func (b *countedBudget) Take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *countedBudget) Release(n int64) { b.used.Add(-n) }

// testReader reads what the test writes into the other end of a pipe.
func testReader(t *testing.T, budget Budget) (*reader, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return newReader(server, budget, 0, time.Minute), client
}

// send writes raw to the client's end in the background (a pipe blocks until it is read).
func send(t *testing.T, client net.Conn, raw []byte) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := client.Write(raw)
		done <- err
	}()
	return done
}

// encode is one command in RESP, as clients send it.
func encode(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

var open = limits{args: 1 << 20, bulk: 1 << 20, command: 4 << 20}

// A pipeline decodes into its commands, a command split over reads is decoded whole, and an
// inline command is split into its words.
func TestReaderDecodesPipelinesAndInlineCommands(t *testing.T) {
	rd, client := testReader(t, unlimited{})
	raw := append(encode("PING"), encode("BF.ADD", "k", "a\r\nb")...)
	raw = append(raw, "ECHO  hi\r\n"...)
	raw = append(raw, encode("BF.MADD", "k", strings.Repeat("x", 40_000), "")...)
	sent := send(t, client, raw)
	var got []string
	for len(got) < 4 {
		cmds, err := rd.read(open)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			got = append(got, fmt.Sprintf("%d:%q", len(c.Args), bytes.Join(c.Args, []byte("|"))[:min(20, len(bytes.Join(c.Args, []byte("|"))))]))
		}
		rd.release()
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	want := []string{`1:"PING"`, `3:"BF.ADD|k|a\r\nb"`, `2:"ECHO|hi"`, `4:"BF.MADD|k|xxxxxxxxxx"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
}

// A command larger than the base buffer is charged to the budget while it is read and answered,
// and everything is given back once it is: a connection holds a large buffer only while it needs
// one.
func TestReaderGivesBackALargeCommandsRoom(t *testing.T) {
	budget := &countedBudget{limit: 1 << 30}
	rd, client := testReader(t, budget)
	sent := send(t, client, encode("BF.MADD", "k", strings.Repeat("x", 1<<20)))
	if _, err := rd.read(open); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if held := budget.used.Load(); held < 1<<20-baseBuffer {
		t.Errorf("a command of 1 MiB being answered holds %d bytes of the budget, want at least %d", held, 1<<20-baseBuffer)
	}
	rd.release()
	if held := budget.used.Load(); held != 0 || len(rd.buf) != baseBuffer {
		t.Errorf("once answered, the reader holds %d bytes of the budget and a buffer of %d, want 0 and %d", held, len(rd.buf), baseBuffer)
	}
}

// A large command's buffer, given back, serves the next large command of any connection, which
// reads its own bytes whatever the buffer held: a shorter one, then one of another content.
func TestReaderReusesALargeBuffer(t *testing.T) {
	budget := &countedBudget{limit: 1 << 30}
	for i, arg := range []string{strings.Repeat("x", 1<<20), strings.Repeat("y", 1<<20-100), strings.Repeat("z", 1<<20)} {
		rd, client := testReader(t, budget)
		sent := send(t, client, encode("BF.LOADCHUNK", "k", "1", arg))
		cmds, err := rd.read(open)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if len(cmds) != 1 || len(cmds[0].Args) != 4 || string(cmds[0].Args[3]) != arg {
			t.Fatalf("command %d: not the one sent", i)
		}
		rd.release()
		if held := budget.used.Load(); held != 0 {
			t.Errorf("command %d answered: %d bytes of the budget held", i, held)
		}
	}
}

// Each limit refuses a command by what its headers declare, before its bytes are buffered, with
// Redis's texts before authentication; and a budget without room refuses a large command.
func TestReaderLimits(t *testing.T) {
	unauthenticated := (&Server{}).limits(&session{})
	for _, tt := range []struct {
		name   string
		lim    limits
		budget int64
		raw    []byte
		reply  string
		reason string
	}{
		{"bulk before AUTH", unauthenticated, 1 << 30, []byte("*2\r\n$4\r\nAUTH\r\n$268435456\r\n"), "ERR Protocol error: unauthenticated bulk length", closedProtocol},
		{"arguments before AUTH", unauthenticated, 1 << 30, []byte("*11\r\n"), "ERR Protocol error: unauthenticated multibulk length", closedProtocol},
		{"inline before AUTH", unauthenticated, 1 << 30, []byte("a b c d e f g h i j k\r\n"), "ERR Protocol error: unauthenticated multibulk length", closedProtocol},
		{"bulk", limits{args: 100, bulk: 1000, command: 1 << 20}, 1 << 30, []byte("*2\r\n$4\r\nPING\r\n$1001\r\n"), "respMaxBulkLength (1000 bytes)", closedTooLarge},
		{"command", limits{args: 1 << 20, bulk: 1000, command: 2000}, 1 << 30, bytes.Repeat([]byte("$3\r\nabc\r\n"), 300), "respMaxCommandLength (2000 bytes)", closedTooLarge},
		{"arguments", limits{args: 333, bulk: 1000, command: 2000}, 1 << 30, []byte("*3000000\r\n"), "a command of 3000000 arguments is larger than respMaxCommandLength (2000 bytes) allows", closedTooLarge},
		{"budget", open, 100_000, encode("BF.MADD", "k", strings.Repeat("x", 1<<20)), "maxRequestBytesInFlight", closedBudget},
		{"not RESP", open, 1 << 30, []byte("*1\r\n+PING\r\n"), "ERR Protocol error: expected '$', got '+'", closedProtocol},
		{"bad length", open, 1 << 30, []byte("*1\r\n$x\r\n"), "ERR Protocol error: invalid bulk length", closedProtocol},
	} {
		t.Run(tt.name, func(t *testing.T) {
			budget := &countedBudget{limit: tt.budget}
			rd, client := testReader(t, budget)
			raw := tt.raw
			if tt.name == "command" {
				raw = append([]byte("*300\r\n"), raw...)
			}
			go func() { _, _ = client.Write(raw) }() // the reader stops reading it part-way
			_, err := rd.read(tt.lim)
			pe, ok := errors.AsType[*protocolError](err)
			if !ok || !strings.Contains(pe.reply, tt.reply) || pe.reason != tt.reason {
				t.Fatalf("read: %v; want a refusal saying %q, closing for %s", err, tt.reply, tt.reason)
			}
			if held := budget.used.Load(); held > 0 && tt.name != "budget" {
				t.Errorf("the refused command holds %d bytes of the budget", held)
			}
			rd.close()
			if held := budget.used.Load(); held != 0 {
				t.Errorf("the closed reader holds %d bytes of the budget", held)
			}
		})
	}
}

// A connection that sends nothing for the idle time, or part of a command for longer than a
// command may take, is closed, for either reason.
func TestReaderDeadlines(t *testing.T) {
	server, client := net.Pipe()
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	rd := newReader(server, unlimited{}, time.Millisecond, time.Hour)
	if _, err := rd.read(open); !isClose(err, closedIdle) {
		t.Errorf("an idle connection: %v, want closed as idle", err)
	}
	rd = newReader(server, unlimited{}, time.Hour, time.Millisecond)
	go func() { _, _ = client.Write([]byte("*2\r\n$4\r\nPING")) }()
	if _, err := rd.read(open); !isClose(err, closedSlowCommand) {
		t.Errorf("a command that never ends: %v, want closed as a slow command", err)
	}
}

func isClose(err error, reason string) bool {
	pe, ok := errors.AsType[*protocolError](err)
	return ok && pe.reason == reason
}

// Before authentication the commands after an AUTH are not decoded with it: once it succeeds they
// get the limits of an authenticated connection, as in Redis, which decodes a command at a time.
func TestReaderStopsAtAuthBeforeAuthentication(t *testing.T) {
	rd, client := testReader(t, unlimited{})
	unauthenticated := (&Server{}).limits(&session{})
	big := strings.Repeat("x", 2*unauthenticatedBulk)
	sent := send(t, client, append(encode("AUTH", "pw"), encode("BF.ADD", "k", big)...))
	cmds, err := rd.read(unauthenticated)
	if err != nil || len(cmds) != 1 || string(cmds[0].Args[0]) != "AUTH" {
		t.Fatalf("first read before AUTH: %d commands, %v; want AUTH alone", len(cmds), err)
	}
	rd.release()
	if cmds, err = rd.read(open); err != nil || len(cmds) != 1 || len(cmds[0].Args[2]) != len(big) {
		t.Fatalf("the command after AUTH: %d commands, %v; want the BF.ADD of %d bytes", len(cmds), err, len(big))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// fuzzLimits are small, so that the fuzzer reaches every limit of the reader.
var fuzzLimits = limits{args: 16, bulk: 64, command: 512}

// FuzzReader feeds arbitrary bytes to the reader, once in a single write and once cut into the
// pieces the fuzzer picks (split's bytes are the pieces' lengths): a command decoded from many
// reads must be the one decoded from one, and the stream must end the same way, a protocol error
// or the end of the input. Every command decoded holds at most the limits' arguments and bytes,
// re-encodes to bytes that decode to it again, and the closed reader gives the budget back whole.
func FuzzReader(f *testing.F) {
	for _, seed := range [][2]string{
		{string(encode("BF.ADD", "k", "a\r\nb")) + "PING\r\n", "\x03\x07"},
		{string(encode("AUTH", "pw")) + string(encode("BF.MADD", "k", "a", "b")), "\x01"},
		{"*2\r\n$4\r\nPING\r\n$65\r\n", "\x05"},
		{"*1\r\n+PING\r\n*1\r\n$x\r\n", ""},
		{"  ECHO   hi  \r\n\r\n*0\r\n*-1\r\n", "\x02\x02"},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*100\r\n", "\x0b"},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, in, split []byte) {
		if len(in) > 4096 {
			return
		}
		whole, wholeEnd := decodeStream(t, [][]byte{in})
		var pieces [][]byte
		rest := in
		for _, n := range split {
			n := min(int(n)+1, len(rest))
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		cut, cutEnd := decodeStream(t, append(pieces, rest))
		if !sameStrings(whole, cut) || wholeEnd != cutEnd {
			t.Fatalf("%q decoded whole: %q, %s\nin pieces %q: %q, %s", in, whole, wholeEnd, pieces, cut, cutEnd)
		}
		for _, cmd := range whole {
			if len(cmd) > fuzzLimits.args {
				t.Fatalf("a command of %d arguments passed the limit of %d", len(cmd), fuzzLimits.args)
			}
			again, end := decodeStream(t, [][]byte{encode(cmd...)})
			if len(again) != 1 || !sameStrings(again[0], cmd) || end != "EOF" {
				t.Fatalf("%q re-encoded decodes to %q, %s", cmd, again, end)
			}
		}
	})
}

// decodeStream reads the commands that chunks, written one after the other, make, until the
// reader stops; it answers them and how the stream ended: EOF, or the protocol error's reply. It
// fails the test if the closed reader keeps any of the budget.
func decodeStream(t *testing.T, chunks [][]byte) ([][]string, string) {
	t.Helper()
	server, client := net.Pipe()
	budget := &countedBudget{limit: 1 << 20}
	rd := newReader(server, budget, 0, time.Minute)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for _, c := range chunks {
			if _, err := client.Write(c); err != nil {
				return // the reader stopped
			}
		}
		_ = client.Close()
	}()
	var cmds [][]string
	var end string
	for end == "" {
		read, err := rd.read(fuzzLimits)
		for _, c := range read {
			var args []string
			for _, a := range c.Args {
				if int64(len(a)) > fuzzLimits.bulk {
					t.Fatalf("an argument of %d bytes passed the limit of %d", len(a), fuzzLimits.bulk)
				}
				args = append(args, string(a))
			}
			cmds = append(cmds, args)
		}
		rd.release()
		switch pe, ok := errors.AsType[*protocolError](err); {
		case ok:
			end = pe.reply
		case err != nil:
			end = "EOF" // the input's end, however the pipe says it
		}
	}
	rd.close()
	_ = server.Close()
	<-written
	if held := budget.used.Load(); held != 0 {
		t.Fatalf("the closed reader holds %d bytes of the budget", held)
	}
	return cmds, end
}

// sameStrings compares lists of strings, or of lists of them, element by element.
func sameStrings[T []string | [][]string](a, b T) bool { return reflect.DeepEqual(a, b) }
