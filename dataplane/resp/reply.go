package resp

import "strconv"

// A connection speaks RESP2 until HELLO 3 switches it to RESP3, and back with HELLO 2, as Redis
// 7's do. The two differ only in the types RESP3 adds: a map where RESP2 answers an array of
// fields and values, a boolean where it answers 0 or 1, a null of its own, a verbatim string for
// INFO. Errors, simple strings, integers, bulk strings and arrays are written alike, so a
// transaction's queued replies, EXEC's array and the errors in it need nothing of their own.

// replier writes RESP2's types: a redcon.Writer.
type replier interface {
	WriteString(s string)
	WriteError(msg string)
	WriteInt64(n int64)
	WriteBulkString(s string)
	WriteArray(n int)
	WriteNull()
	WriteRaw(data []byte)
}

// writer writes a command's reply in the connection's protocol. It is a value, made per command
// from the session's protocol, so that writing a RESP3 type costs what writing a RESP2 one does:
// the bytes that differ are written from the tables below, and nothing is allocated.
type writer struct {
	replier
	resp3 bool
}

// RESP3's fixed replies, and its map headers for the sizes the commands answer.
var (
	resp3True  = []byte("#t\r\n")
	resp3False = []byte("#f\r\n")
	resp3Null  = []byte("_\r\n")
	mapHeaders = func() (h [16][]byte) {
		for n := range h {
			h[n] = strconv.AppendInt([]byte{'%'}, int64(n), 10)
			h[n] = append(h[n], '\r', '\n')
		}
		return h
	}()
)

// WriteNull is RESP3's null, or RESP2's null bulk string.
func (w writer) WriteNull() {
	if w.resp3 {
		w.WriteRaw(resp3Null)
		return
	}
	w.replier.WriteNull()
}

// WriteBulk is a bulk string of b, copied once into the reply: a chunk of BF.SCANDUMP takes no
// string of its own on the way.
func (w writer) WriteBulk(b []byte) {
	w.WriteRaw(append(strconv.AppendInt([]byte{'$'}, int64(len(b)), 10), '\r', '\n'))
	w.WriteRaw(b)
	w.WriteRaw(crlf)
}

var crlf = []byte("\r\n")

// WriteBool is RESP3's boolean, or RESP2's integer 1 or 0.
func (w writer) WriteBool(b bool) {
	switch {
	case w.resp3 && b:
		w.WriteRaw(resp3True)
	case w.resp3:
		w.WriteRaw(resp3False)
	case b:
		w.WriteInt64(1)
	default:
		w.WriteInt64(0)
	}
}

// WriteMap starts a map of n fields, each then written as its key and its value: RESP3's map,
// or RESP2's array of 2n elements.
func (w writer) WriteMap(n int) {
	switch {
	case !w.resp3:
		w.WriteArray(2 * n)
	case n < len(mapHeaders):
		w.WriteRaw(mapHeaders[n])
	default:
		w.WriteRaw(append(strconv.AppendInt([]byte{'%'}, int64(n), 10), '\r', '\n'))
	}
}

// WriteVerbatim is RESP3's verbatim string of format txt, as Redis 7 answers INFO, or RESP2's
// bulk string.
func (w writer) WriteVerbatim(s string) {
	if !w.resp3 {
		w.WriteBulkString(s)
		return
	}
	b := strconv.AppendInt(append(make([]byte, 0, len(s)+32), '='), int64(len(s)+4), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, s...)
	w.WriteRaw(append(b, '\r', '\n'))
}
