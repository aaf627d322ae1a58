package resp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// The reader decodes a connection's commands with Redis's limits (proto-max-bulk-len,
// client-query-buffer-limit): a declared length past them is refused before a byte of it is
// buffered, so what a connection holds is bounded by what one command may be, never by what a
// client declares or sends. redcon's reader had no limit and kept a copy of every command.

// Before a connection authenticates, a command may have at most unauthenticatedArgs arguments of
// at most unauthenticatedBulk bytes each: Redis's own limits, enough for AUTH and HELLO ... AUTH
// with a long password, and nothing a stranger can grow the process with.
const (
	unauthenticatedArgs = 10
	unauthenticatedBulk = 16 << 10
)

// inlineMax bounds an inline command's line (a command typed into telnet), as Redis's
// PROTO_INLINE_MAX_SIZE does.
const inlineMax = 64 << 10

// baseBuffer is the read buffer every connection has; a larger one, for a large command, is
// charged to the budget and given back once its commands are answered.
const baseBuffer = 16 << 10

// argBytes is what one decoded argument holds besides its bytes: its slice header. A command of
// a million empty arguments holds 24 MB once decoded, so each argument is charged this too.
const argBytes = 24

// minArgBytes is the least an argument takes as sent ($0\r\n\r\n): a command of more arguments
// than its length over this cannot fit, and is refused by its header.
const minArgBytes = 6

// limits are what one command may be.
type limits struct {
	args    int   // arguments, the name included
	bulk    int64 // bytes of one argument
	command int64 // bytes of the whole command as sent
}

// errors that end a connection after their reply: the rest of a refused command is still on the
// way and cannot be told from the next command. Each is the reason the connection is closed.
type protocolError struct {
	reply  string // the error reply, ERR included
	reason string // the metrics' reason of the close
}

func (e *protocolError) Error() string { return e.reply }

func tooLarge(format string, a ...any) error {
	return &protocolError{reply: "ERR Protocol error: " + fmt.Sprintf(format, a...), reason: closedTooLarge}
}

func malformed(text string) error {
	return &protocolError{reply: "ERR Protocol error: " + text, reason: closedProtocol}
}

// errBudget is the reply when the pod's commands and request bodies in flight leave no room for a
// larger buffer; the client retries, as an HTTP client retries a 503.
var errBudget = &protocolError{
	reply:  "ERR the pod holds its limit of request bytes in flight (maxRequestBytesInFlight): retry shortly",
	reason: closedBudget,
}

// partial is how far the command at the reader's start has been decoded, so that a command that
// arrives in many reads is decoded once, not from its start again at every read.
type partial struct {
	args  int // arguments declared; 0 while the header is not read
	read  int // arguments read whole
	first int // where the first argument's header starts, from the command's start
	pos   int // the next byte to decode, from the command's start
	need  int // bytes from the command's start that the argument being read ends at
	// started is when the command's first byte was read, for the deadline of a slow command.
	started time.Time
}

// reader reads one connection's commands.
type reader struct {
	conn net.Conn
	buf  []byte
	r, w int // buf[r:w] is read and not decoded
	p    partial
	args [][]byte // the decoded commands' arguments, reused from one read to the next
	cmds []redcon.Command
	// budget is charged the buffer beyond baseBuffer and a room for arguments beyond keptArgs.
	budget Budget
	// readAt is when the last read brought bytes: a command whose first byte it brought started
	// then.
	readAt time.Time
	// idle is how long a connection may send nothing (0: forever); slow how long a command may
	// take to arrive once its first byte has.
	idle, slow time.Duration
}

func newReader(conn net.Conn, budget Budget, idle, slow time.Duration) *reader {
	return &reader{conn: conn, buf: make([]byte, baseBuffer), budget: budget, idle: idle, slow: slow}
}

// release gives back what the last commands held: the caller has answered them. A buffer grown
// for a large command goes back to the base once it is answered, and a large room for arguments
// is let go: a connection that once sent a large command does not hold its room until it closes.
func (rd *reader) release() {
	clear(rd.cmds)
	rd.cmds = rd.cmds[:0]
	clear(rd.args)
	rd.args = rd.args[:0]
	if cap(rd.args) > keptArgs {
		rd.budget.Release(int64(cap(rd.args)) * argBytes)
		rd.args = nil
	}
	if len(rd.buf) > baseBuffer && rd.w-rd.r <= baseBuffer {
		buf := make([]byte, baseBuffer)
		rd.w = copy(buf, rd.buf[rd.r:rd.w])
		rd.budget.Release(int64(len(rd.buf) - baseBuffer))
		large := rd.buf
		largeBuffers.Put(&large)
		rd.r, rd.buf = 0, buf
	}
}

// largeBuffers keeps the buffers of large commands once answered, for the next large command of
// any connection: each BF.LOADCHUNK of megabytes took a new buffer, zeroed, and left it to the
// collector. The pool lets its buffers go at a collection, as the collector did.
var largeBuffers sync.Pool // of *[]byte

// largeBuffer is a buffer of size bytes, one of largeBuffers if it fits: as large, and at most an
// eighth larger, for the budget is charged size (and a step of the buffer's doubling would take
// and lose one that a whole chunk fits). Its bytes are not zeroed: only what is read into it is
// decoded.
func largeBuffer(size int) []byte {
	if b, ok := largeBuffers.Get().(*[]byte); ok {
		if cap(*b) >= size && cap(*b)-size <= size/8 {
			return (*b)[:size]
		}
		largeBuffers.Put(b)
	}
	return make([]byte, size)
}

// close gives back everything the reader holds: its connection is closed.
func (rd *reader) close() {
	rd.release()
	rd.budget.Release(int64(len(rd.buf) - baseBuffer))
	rd.buf = nil
}

// answered shifts the deadline of the command on its way by the time the server took to answer
// the commands before it: the client is given the time to send it, not the server's.
func (rd *reader) answered(took time.Duration) {
	rd.p.started = rd.p.started.Add(took)
}

// read answers the commands read and not yet answered, reading from the connection until there is
// at least one. Their arguments are valid until release.
func (rd *reader) read(lim limits) ([]redcon.Command, error) {
	for {
		if err := rd.decodeAll(lim); err != nil {
			if len(rd.cmds) > 0 {
				// The commands before the bad one are answered first, as Redis answers them,
				// whether or not they came in the same read; decoding meets the error again at
				// the next read.
				return rd.cmds, nil
			}
			return nil, err
		}
		if len(rd.cmds) > 0 {
			return rd.cmds, nil
		}
		if err := rd.fill(lim); err != nil {
			return nil, err
		}
	}
}

// decodeAll decodes the complete commands of the buffer.
func (rd *reader) decodeAll(lim limits) error {
	for rd.r < rd.w {
		args, err := rd.decode(lim)
		if err != nil || args == nil {
			return err
		}
		if len(args) > 0 { // an empty command (*0) is skipped, as Redis does
			rd.cmds = append(rd.cmds, redcon.Command{Args: args})
		}
		if lim.args == unauthenticatedArgs && authenticates(args) {
			// The commands after it may authenticate, and get the larger limits.
			return nil
		}
	}
	return nil
}

// authenticates reports whether a command may authenticate its connection: AUTH or HELLO.
func authenticates(args [][]byte) bool {
	return len(args) > 0 && (bytes.EqualFold(args[0], []byte("auth")) || bytes.EqualFold(args[0], []byte("hello")))
}

// fill reads more bytes, growing the buffer for a command larger than it, under the deadline of
// an idle connection or of a command that is on its way.
func (rd *reader) fill(lim limits) error {
	if rd.r == rd.w && rd.p.args == 0 {
		rd.r, rd.w = 0, 0
	}
	if err := rd.room(lim); err != nil {
		return err
	}
	deadline := time.Time{}
	switch {
	case rd.r < rd.w || rd.p.args > 0:
		deadline = rd.p.started.Add(rd.slow)
	case rd.idle > 0:
		deadline = time.Now().Add(rd.idle)
	}
	if err := rd.conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	n, err := rd.conn.Read(rd.buf[rd.w:])
	if n > 0 {
		rd.readAt = time.Now()
		if rd.r == rd.w && rd.p.args == 0 {
			rd.p.started = rd.readAt
		}
		rd.w += n
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if rd.r < rd.w || rd.p.args > 0 {
			return &protocolError{reason: closedSlowCommand}
		}
		return &protocolError{reason: closedIdle}
	}
	return err
}

// room makes room to read into: the decoded bytes are dropped, and a command larger than the
// buffer gets a larger one, charged to the budget.
func (rd *reader) room(lim limits) error {
	if rd.w < len(rd.buf) {
		return nil
	}
	if rd.r > 0 {
		rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
		rd.r = 0
		return nil
	}
	// Doubled, but never past what the command may be: a buffer of twice the limit would hold
	// memory no command may use.
	size := min(max(2*len(rd.buf), rd.p.need), max(int(lim.command), len(rd.buf)+1))
	if !rd.budget.Take(int64(size - len(rd.buf))) {
		return errBudget
	}
	buf := largeBuffer(size)
	copy(buf, rd.buf[:rd.w])
	rd.buf = buf
	return nil
}

// decode decodes the command at the buffer's start: its arguments, or nil when it is not all
// there yet.
func (rd *reader) decode(lim limits) ([][]byte, error) {
	b := rd.buf[rd.r:rd.w]
	if rd.p.args == 0 {
		if b[0] != '*' {
			return rd.inline(b, lim)
		}
		n, end, err := header(b, 0, "multibulk")
		if err != nil || end < 0 {
			return nil, err
		}
		switch {
		case n <= 0:
			rd.r += end
			return [][]byte{}, nil
		case n > lim.args:
			return nil, argsRefused(n, lim)
		}
		rd.p.args, rd.p.pos, rd.p.first, rd.p.read = n, end, end, 0
	}
	for rd.p.read < rd.p.args {
		if done, err := rd.bulk(b, lim); !done || err != nil {
			return nil, err
		}
	}
	return rd.complete(b)
}

// argsRefused is the error of a command of n arguments, more than lim allows.
func argsRefused(n int, lim limits) error {
	if lim.args == unauthenticatedArgs {
		return malformed("unauthenticated multibulk length")
	}
	return tooLarge("a command of %d arguments is larger than respMaxCommandLength (%d bytes) allows: send fewer items per command", n, lim.command)
}

// bulkRefused is the error of an argument of size bytes, more than lim allows.
func bulkRefused(size int, lim limits) error {
	if lim.bulk == unauthenticatedBulk {
		return malformed("unauthenticated bulk length")
	}
	return tooLarge("an argument of %d bytes is larger than respMaxBulkLength (%d bytes)", size, lim.bulk)
}

// commandRefused is the error of a command larger than lim allows.
func commandRefused(lim limits) error {
	return tooLarge("the command is larger than respMaxCommandLength (%d bytes): send fewer or smaller items per command", lim.command)
}

// bulk decodes the argument at the command's position; done is false when it is not all there.
func (rd *reader) bulk(b []byte, lim limits) (done bool, err error) {
	p := &rd.p
	if p.pos >= len(b) {
		return false, nil
	}
	if b[p.pos] != '$' {
		return false, malformed(fmt.Sprintf("expected '$', got '%c'", b[p.pos]))
	}
	size, start, err := header(b, p.pos, "bulk")
	if err != nil || start < 0 {
		return false, err
	}
	switch {
	case size < 0:
		return false, malformed("invalid bulk length")
	case int64(size) > lim.bulk:
		return false, bulkRefused(size, lim)
	case int64(start)+int64(size)+2 > lim.command:
		return false, commandRefused(lim)
	}
	end := start + size
	if end+2 > len(b) {
		p.need = end + 2
		return false, nil
	}
	if b[end] != '\r' || b[end+1] != '\n' {
		return false, malformed("invalid bulk length")
	}
	p.read++
	p.pos, p.need = end+2, 0
	return true, nil
}

// complete makes the arguments of the command fully decoded at b's start, and moves past it. Its
// headers, checked as they arrived, are read again rather than kept: two offsets an argument would
// hold 16 bytes for each of a million tiny items.
func (rd *reader) complete(b []byte) ([][]byte, error) {
	if err := rd.roomForArgs(rd.p.args); err != nil {
		return nil, err
	}
	start := len(rd.args)
	for at := rd.p.first; at < rd.p.pos; {
		eol := at + bytes.IndexByte(b[at:], '\n')
		size, _ := parseLength(b[at+1 : eol-1])
		rd.args = append(rd.args, b[eol+1:eol+1+size:eol+1+size])
		at = eol + 1 + size + 2
	}
	rd.r += rd.p.pos
	rd.p = partial{started: rd.readAt}
	return rd.args[start:len(rd.args):len(rd.args)], nil
}

// keptArgs is the room for arguments a connection keeps uncharged between reads.
const keptArgs = 256

// roomForArgs makes room for n more arguments, a room beyond keptArgs charged to the budget.
// The commands decoded already keep the old array; only the next ones use the new.
func (rd *reader) roomForArgs(n int) error {
	if cap(rd.args)-len(rd.args) >= n {
		return nil
	}
	size := max(2*cap(rd.args), len(rd.args)+n, keptArgs)
	if size > keptArgs && !rd.budget.Take(int64(size)*argBytes) {
		return errBudget
	}
	if cap(rd.args) > keptArgs {
		rd.budget.Release(int64(cap(rd.args)) * argBytes)
	}
	rd.args = make([][]byte, len(rd.args), size)
	return nil
}

// header reads the number after b[at] (*n or $n) up to its CRLF: the number and where the line
// ends, or an end of -1 when the line is not all there.
func header(b []byte, at int, what string) (n, end int, err error) {
	const longest = 32 // "$" and 20 digits are far less
	i := bytes.IndexByte(b[at:min(len(b), at+longest)], '\n')
	switch {
	case i < 0 && len(b)-at >= longest:
		return 0, 0, malformed("too big " + what + " count string")
	case i < 0:
		return 0, -1, nil
	case i < 2 || b[at+i-1] != '\r':
		return 0, 0, malformed("invalid " + what + " length")
	}
	v, ok := parseLength(b[at+1 : at+i-1])
	if !ok {
		return 0, 0, malformed("invalid " + what + " length")
	}
	return v, at + i + 1, nil
}

// parseLength reads a length as RESP writes it, a negative one too (*-1, $-1), without the
// allocation of strconv's error.
func parseLength(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n, true
	}
	return n, true
}

// multibulkSize is how many bytes the command of args takes as a multibulk.
func multibulkSize(args [][]byte) int64 {
	size := int64(len("*\r\n") + len(strconv.Itoa(len(args))))
	for _, a := range args {
		size += int64(len("$\r\n\r\n")+len(strconv.Itoa(len(a)))) + int64(len(a))
	}
	return size
}

// inline decodes a command typed as a line of words, as telnet sends it.
func (rd *reader) inline(b []byte, lim limits) ([][]byte, error) {
	i := bytes.IndexByte(b[:min(len(b), inlineMax)], '\n')
	if i < 0 {
		if len(b) >= inlineMax {
			return nil, tooLarge("too big inline request")
		}
		return nil, nil
	}
	words := bytes.Fields(bytes.TrimSuffix(b[:i], []byte("\r")))
	if len(words) == 0 {
		// An empty line, skipped as Redis skips it. Not nil, which would say the command is not
		// all there: the commands after it in the buffer would wait for the next read.
		rd.r += i + 1
		return [][]byte{}, nil
	}
	if len(words) > lim.args {
		return nil, argsRefused(len(words), lim)
	}
	// A line's words are arguments like any others: the same limits hold, on the line and on
	// the command it stands for, so that a command passes typed as a line only if it would as a
	// multibulk.
	if int64(i+1) > lim.command || multibulkSize(words) > lim.command {
		return nil, commandRefused(lim)
	}
	for _, w := range words {
		if int64(len(w)) > lim.bulk {
			return nil, bulkRefused(len(w), lim)
		}
	}
	if err := rd.roomForArgs(len(words)); err != nil {
		return nil, err
	}
	rd.r += i + 1
	rd.p.started = rd.readAt
	start := len(rd.args)
	rd.args = append(rd.args, words...)
	return rd.args[start:len(rd.args):len(rd.args)], nil
}
