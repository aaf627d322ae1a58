package peer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"
)

// FuzzStreamServer feeds a stream arbitrary bytes: the receiver applies exactly the complete frames
// within its limit, in order, answers each with a well-formed frame, refuses a frame over the
// limit and stops there, and never applies a frame cut short.
func FuzzStreamServer(f *testing.F) {
	frame := func(batch string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(batch))), batch...)
	}
	f.Add(frame("yny"))
	f.Add(slices.Concat(frame("y"), frame(""), frame("bad"), frame("yy")[:5])) // the last cut short
	f.Add(slices.Concat(frame("y"), []byte{0, 0, 1, 0}, []byte("y")))          // then one over the limit
	f.Add([]byte{0, 0})
	const limit = 64
	f.Fuzz(func(t *testing.T, in []byte) {
		var applied [][]byte
		s := NewStreamServer(func(b []byte) ([]Outcome, error) {
			applied = append(applied, slices.Clone(b))
			return echoLengths(b)
		}, StreamOptions{MaxBatchBytes: limit})
		conn := &bytesConn{in: bytes.NewReader(in)}
		s.serve(conn, bufio.NewReader(conn))

		// What a reader of the protocol makes of the input.
		var want [][]byte
		refused := false
		for rest := in; len(rest) >= FrameHeaderSize; {
			n := int(binary.BigEndian.Uint32(rest))
			if n > limit {
				refused = true
				break
			}
			if len(rest) < FrameHeaderSize+n {
				break
			}
			want = append(want, rest[FrameHeaderSize:FrameHeaderSize+n])
			rest = rest[FrameHeaderSize+n:]
		}
		if len(applied) != len(want) {
			t.Fatalf("applied %d batches, want %d", len(applied), len(want))
		}
		for i := range want {
			if !bytes.Equal(applied[i], want[i]) {
				t.Fatalf("batch %d applied as %q, want %q", i, applied[i], want[i])
			}
		}
		answers := 0
		for out := conn.out.Bytes(); len(out) > 0; answers++ {
			answer, err := readFrame(bytes.NewReader(out), nil, maxAnswer)
			if err != nil || len(answer) == 0 || answer[0] > statusRefused {
				t.Fatalf("answer %d is not a frame of the protocol: %q, %v", answers, out, err)
			}
			out = out[FrameHeaderSize+len(answer):]
		}
		if wantAnswers := len(want) + btoi(refused); answers != wantAnswers {
			t.Fatalf("%d answers, want %d", answers, wantAnswers)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bytesConn is a connection whose sender sent in, then closed its end.
type bytesConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *bytesConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *bytesConn) Close() error                     { return nil }
func (c *bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }
