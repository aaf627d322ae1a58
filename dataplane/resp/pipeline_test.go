package resp

import (
	"bytes"
	"testing"

	"github.com/tidwall/redcon"
)

// readPipeline is a connection whose read brought cmds after the first, answered into a Writer.
type readPipeline struct {
	*redcon.Writer
	cmds []redcon.Command
}

func (r *readPipeline) ReadPipeline() []redcon.Command {
	cmds := r.cmds
	r.cmds = nil
	return cmds
}

// pings is a pipeline of n PING commands.
func pings(n int) []redcon.Command {
	cmds := make([]redcon.Command, n)
	for i := range cmds {
		cmds[i] = redcon.Command{Args: [][]byte{[]byte("PING")}}
	}
	return cmds
}

// TestConnectionKeepsTheRoomOfSmallPipelinesOnly serves a connection small pipelines and one
// larger than what it keeps: every command is answered, the small pipelines' room is reused, and
// the large one's is let go.
func TestConnectionKeepsTheRoomOfSmallPipelinesOnly(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	var out bytes.Buffer
	serve := func(n int) {
		t.Helper()
		out.Reset()
		w := redcon.NewWriter(&out)
		cmds := pings(n)
		if quit := s.serve(&readPipeline{Writer: w, cmds: cmds[1:]}, sess, cmds[0]); quit {
			t.Fatalf("a pipeline of %d PINGs closed the connection", n)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Count(out.Bytes(), []byte("+PONG\r\n")); got != n {
			t.Fatalf("a pipeline of %d PINGs got %d PONGs", n, got)
		}
	}

	serve(100)
	room := cap(sess.pipeline)
	if room < 100 {
		t.Fatalf("after a pipeline of 100 commands the connection keeps room for %d", room)
	}
	serve(50)
	if cap(sess.pipeline) != room {
		t.Errorf("a smaller pipeline changed the kept room from %d to %d commands", room, cap(sess.pipeline))
	}
	serve(4 * keptPipeline)
	if got := cap(sess.pipeline); got > keptPipeline {
		t.Errorf("after a pipeline of %d commands the connection keeps room for %d, more than %d", 4*keptPipeline, got, keptPipeline)
	}
	serve(10)
}
