package resp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
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
