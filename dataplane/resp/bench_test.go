package resp

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// BenchmarkDispatch is one command's cost through the dispatch, without the network: the share
// of a RESP round trip that is Bloomery's own.
func BenchmarkDispatch(b *testing.B) {
	s := newTestServer(b)
	w := redcon.NewWriter(nil)
	sess := &session{authenticated: true}
	s.Dispatch(b.Context(), sess, w, [][]byte{[]byte("BF.RESERVE"), []byte("f"), []byte("0.001"), []byte("10000")})
	values := make([][]byte, 4096)
	for i := range values {
		values[i] = []byte("v-" + strconv.Itoa(i))
	}
	for _, name := range benchmarkNames() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cmd, resp3 := benchmarkCommand(name)
			sess.resp3 = resp3
			for i := 0; b.Loop(); i++ {
				w.SetBuffer(w.Buffer()[:0])
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s.Dispatch(ctx, sess, w, [][]byte{cmd, []byte("f"), values[i%len(values)]})
				cancel()
			}
		})
	}
}

// benchmarkNames are the benchmarks' commands, in RESP2 under their names and in RESP3 under
// RESP3/ and their names: the two protocols write different replies.
func benchmarkNames() []string {
	return []string{"BF.ADD", "BF.EXISTS", "RESP3/BF.ADD", "RESP3/BF.EXISTS"}
}

// benchmarkCommand is the command of a benchmark's name, and whether it is in RESP3.
func benchmarkCommand(name string) ([]byte, bool) {
	cmd, resp3 := strings.CutPrefix(name, "RESP3/")
	return []byte(cmd), resp3
}

// BenchmarkPipelinedRun is a run of 16 pipelined commands to one filter answered as one batch,
// without the network: what 16 pipelined commands cost Bloomery beyond their reading and writing.
func BenchmarkPipelinedRun(b *testing.B) {
	s := newTestServer(b)
	w := redcon.NewWriter(nil)
	sess := &session{authenticated: true}
	// 100,000 items at 0.001 take 180 KB, within the test server's 1 MiB per filter.
	s.Dispatch(b.Context(), sess, w, [][]byte{[]byte("BF.RESERVE"), []byte("f"), []byte("0.001"), []byte("100000")})
	if got := string(w.Buffer()); got != "+OK\r\n" {
		b.Fatalf("BF.RESERVE answered %q", got)
	}
	const run = 16
	for _, name := range benchmarkNames() {
		b.Run(name, func(b *testing.B) {
			cmd, resp3 := benchmarkCommand(name)
			sess.resp3 = resp3
			// Made beforehand, so that only the server's work is measured; the items come round
			// again after 4,096 runs.
			runs := make([][]redcon.Command, 4096)
			for i := range runs {
				runs[i] = make([]redcon.Command, run)
				for j := range runs[i] {
					runs[i][j].Args = [][]byte{cmd, []byte("f"), []byte("v-" + strconv.Itoa(i*run+j))}
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				w.SetBuffer(w.Buffer()[:0])
				if n := s.batched(sess, w, runs[i%len(runs)]); n != run {
					b.Fatalf("batched %d of %d commands", n, run)
				}
			}
		})
	}
}
