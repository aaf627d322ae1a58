package httpapi

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/labstack/echo/v4"
)

// The hot endpoints (check, check-and-set and their multi- forms) read {"value": "..."} or
// {"values": [...]} and answer a boolean or an array of booleans. This file does that without
// building a map of the body or reflecting over the answer. Anything but the plain well-formed case
// (escapes, non-ASCII bytes, other fields, non-string elements, duplicated keys, ?pretty) goes to
// the strict path in request.go, so every validation message stays what it was; the fast path only
// accepts bodies for which the strict path would return exactly the same values.

// bodyBuffers hold request bodies while they are decoded; values are copied out of them.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBody is the largest buffer returned to the pool, so that one huge request does not pin
// its memory for good.
const maxPooledBody = 1 << 20

// readRaw reads the body of a request that declares its length, at most limit, into a pooled
// buffer; releaseRaw gives the buffer back. ok is false when the request has no declared length or
// when it is over the limit: the caller then takes the strict path, which reads or refuses it.
func (s *Server) readRaw(c echo.Context, limit int64) (raw []byte, pooled *[]byte, ok bool, err error) {
	req := c.Request()
	n := req.ContentLength
	if n < 0 || n > limit {
		return nil, nil, false, nil
	}
	pooled = bodyBuffers.Get().(*[]byte)
	raw, err = readDeclared(req.Body, (*pooled)[:0], n)
	if err != nil {
		releaseRaw(pooled, raw)
		return nil, nil, true, s.readError(c, err)
	}
	return raw, pooled, true, nil
}

// readDeclared appends the n bytes a request declared to buf, which grows with the bytes that
// arrive rather than with the declaration: a client that declares a large body and sends little
// costs little.
func readDeclared(r io.Reader, buf []byte, n int64) ([]byte, error) {
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(n-int64(len(buf)), int64(max(cap(buf), 4<<10)))))
		}
		m, err := r.Read(buf[len(buf):int(min(int64(cap(buf)), n))])
		buf = buf[:len(buf)+m]
		switch {
		case errors.Is(err, io.EOF) && int64(len(buf)) < n:
			return buf, io.ErrUnexpectedEOF
		case errors.Is(err, io.EOF):
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
	return buf, nil
}

// releaseRaw returns a buffer of readRaw to the pool once nothing refers to raw any more.
func releaseRaw(pooled *[]byte, raw []byte) {
	if cap(raw) <= maxPooledBody {
		*pooled = raw[:0]
		bodyBuffers.Put(pooled)
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && isSpace(raw[i]) {
		i++
	}
	return i
}

// plainString reads a JSON string at raw[i] made only of printable ASCII without escapes, and
// returns the index of its closing quote.
func plainString(raw []byte, i int) (end int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(raw); j++ {
		switch b := raw[j]; {
		case b == '"':
			return j, true
		case b == '\\' || b < 0x20 || b >= 0x80:
			return 0, false
		}
	}
	return 0, false
}

// objectField reads `{ "name" :` at the start of raw and returns the index after the colon.
func objectField(raw []byte, name string) (int, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return 0, false
	}
	i = skipSpace(raw, i+1)
	end, ok := plainString(raw, i)
	if !ok || string(raw[i+1:end]) != name {
		return 0, false
	}
	i = skipSpace(raw, end+1)
	if i >= len(raw) || raw[i] != ':' {
		return 0, false
	}
	return skipSpace(raw, i+1), true
}

// closeObject reports whether raw[i:] is `}` and nothing but white space.
func closeObject(raw []byte, i int) bool {
	i = skipSpace(raw, i)
	return i < len(raw) && raw[i] == '}' && skipSpace(raw, i+1) == len(raw)
}

// fastValue decodes {"value": "<plain string>"}.
func fastValue(raw []byte) (string, bool) {
	i, ok := objectField(raw, "value")
	if !ok {
		return "", false
	}
	end, ok := plainString(raw, i)
	if !ok || !closeObject(raw, end+1) {
		return "", false
	}
	return string(raw[i+1 : end]), true
}

// fastValues decodes {"values": ["<plain string>", ...]}. The strings share one copy of the body.
func fastValues(raw []byte) ([]string, bool) {
	i, ok := objectField(raw, "values")
	if !ok || i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	start := i
	// First pass: validate and count, so that the values take one allocation.
	n, i, ok := countStrings(raw, skipSpace(raw, i+1))
	if !ok || !closeObject(raw, i) {
		return nil, false
	}
	all := string(raw[start:i])
	values := make([]string, 0, n)
	for j := 1; j < len(all); j++ {
		if all[j] != '"' {
			continue
		}
		end := j + 1
		for all[end] != '"' {
			end++
		}
		values = append(values, all[j+1:end])
		j = end
	}
	return values, true
}

// countStrings reads the plain strings of an array whose first element, or its ']', is at i: it
// answers how many there are and the index past the ']', or false when they are not all plain.
func countStrings(raw []byte, i int) (n, end int, ok bool) {
	if i < len(raw) && raw[i] == ']' {
		return 0, i + 1, true
	}
	for {
		last, ok := plainString(raw, i)
		if !ok {
			return 0, 0, false
		}
		n++
		i = skipSpace(raw, last+1)
		switch {
		case i >= len(raw):
			return 0, 0, false
		case raw[i] == ']':
			return n, i + 1, true
		case raw[i] != ',':
			return 0, 0, false
		}
		i = skipSpace(raw, i+1)
	}
}

// jsonAnswers are the bodies c.JSON writes for a boolean; writeBool and writeBools write the same
// bytes (the encoder's trailing newline included) and the same Content-Type.
var jsonAnswers = [2][]byte{[]byte("false\n"), []byte("true\n")}

// plainJSON reports whether c.JSON would write compact JSON: not in debug mode, no ?pretty.
func plainJSON(c echo.Context) bool {
	return c.Request().URL.RawQuery == "" && !c.Echo().Debug
}

func writeBool(c echo.Context, v bool) error {
	if !plainJSON(c) {
		return c.JSON(http.StatusOK, v)
	}
	i := 0
	if v {
		i = 1
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, jsonAnswers[i])
}

var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func writeBools(c echo.Context, v []bool) error {
	if v == nil || !plainJSON(c) {
		return c.JSON(http.StatusOK, v)
	}
	bp := answerBuffers.Get().(*[]byte)
	out := append((*bp)[:0], '[')
	for i, b := range v {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendBool(out, b)
	}
	out = append(out, ']', '\n')
	err := c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
	if cap(out) <= maxPooledBody {
		*bp = out[:0]
		answerBuffers.Put(bp)
	}
	return err
}
