package resp

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// do sends one command, its words split at spaces and items appended, and answers its reply.
func do(t *testing.T, s *Server, sess *session, line string, items ...string) string {
	t.Helper()
	var args [][]byte
	for word := range strings.FieldsSeq(line) {
		args = append(args, []byte(word))
	}
	for _, item := range items {
		args = append(args, []byte(item))
	}
	w := redcon.NewWriter(nil)
	s.Dispatch(t.Context(), sess, w, args)
	return string(w.Buffer())
}

// numbered is n items named prefix-0 onwards.
func numbered(prefix string, n int) []string {
	items := make([]string, n)
	for i := range items {
		items[i] = prefix + "-" + strconv.Itoa(i)
	}
	return items
}

// BF.DEBUG answers RedisBloom's lines: the items, then each layer's bytes, bits, hashes, hash
// width, capacity, items and error rate. A filter of 10 at 0.01 takes 100 items in four layers of
// 10, 20, 40 and 80, the error rate halving from 0.005; the first layer needs 10·ln(200)/ln²2 =
// 110.3 bits, which RedisBloom's layout rounds up to a power of two, 128 in two words, and
// ⌈ln(200)/ln 2⌉ = 8 hashes.
func TestDebug(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	do(t, s, sess, "BF.RESERVE bf 0.01 10")
	do(t, s, sess, "BF.MADD bf", numbered("i", 100)...)
	card := strings.TrimSuffix(strings.TrimPrefix(do(t, s, sess, "BF.CARD bf"), ":"), "\r\n")
	lines := parseBulks(t, do(t, s, sess, "BF.DEBUG bf"))
	if len(lines) != 5 {
		t.Fatalf("BF.DEBUG answered %d lines, want the filter's and four layers': %q", len(lines), lines)
	}
	if lines[0] != "size:"+card {
		t.Errorf("BF.DEBUG's first line %q, want size:%s, BF.CARD's", lines[0], card)
	}
	if want := "bytes:16 bits:128 hashes:8 hashwidth:64 capacity:10 size:10 ratio:0.005"; lines[1] != want {
		t.Errorf("the first layer: %q, want %q", lines[1], want)
	}
	items := 0
	for i, line := range lines[1:] {
		var bytes, bits, hashes, width, capacity, size int
		var ratio string
		if _, err := fmt.Sscanf(line, "bytes:%d bits:%d hashes:%d hashwidth:%d capacity:%d size:%d ratio:%s",
			&bytes, &bits, &hashes, &width, &capacity, &size, &ratio); err != nil {
			t.Fatalf("layer %d: %q: %v", i, line, err)
		}
		wantRatio := []string{"0.005", "0.0025", "0.00125", "0.000625"}[i]
		if capacity != 10<<i || ratio != wantRatio || bytes != (bits+63)/64*8 || width != 64 || hashes < 8+i {
			t.Errorf("layer %d: %q, want capacity %d, ratio %s, whole words, hashes growing", i, line, 10<<i, wantRatio)
		}
		if i < 3 && size != capacity {
			t.Errorf("layer %d holds %d items, want its capacity %d: a layer is added once the one before is full", i, size, capacity)
		}
		items += size
	}
	if strconv.Itoa(items) != card {
		t.Errorf("the layers hold %d items, BF.CARD says %s", items, card)
	}
}

// parseBulks reads an array of bulk strings.
func parseBulks(t *testing.T, reply string) []string {
	t.Helper()
	head, rest, ok := strings.Cut(reply, "\r\n")
	n, err := strconv.Atoi(strings.TrimPrefix(head, "*"))
	if !ok || err != nil || !strings.HasPrefix(head, "*") {
		t.Fatalf("not an array: %q", reply)
	}
	out := make([]string, n)
	for i := range out {
		var size string
		size, rest, _ = strings.Cut(rest, "\r\n")
		m, err := strconv.Atoi(strings.TrimPrefix(size, "$"))
		if err != nil || len(rest) < m+2 {
			t.Fatalf("not a bulk string at %d: %q", i, reply)
		}
		out[i], rest = rest[:m], rest[m+2:]
	}
	return out
}

// BF.INFO's Size is RedisBloom's: the bit arrays and 32 bytes of the filter and 64 a layer. A
// filter of 100 at 0.001 answers 296, RedisBloom's own test's figure.
func TestInfoSizeIsRedisBlooms(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	do(t, s, sess, "BF.RESERVE bf 0.001 100")
	if got := do(t, s, sess, "BF.INFO bf SIZE"); got != "*1\r\n:296\r\n" {
		t.Errorf("BF.INFO SIZE = %q, want 296", got)
	}
}

// A filter BF.ADD, BF.MADD or BF.INSERT creates has RedisBloom's defaults, 100 items at 0.01, or
// those configured as respInitialSize and respErrorRate.
func TestImplicitCreatesTakeRedisBloomsDefaults(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	for _, line := range []string{"BF.ADD a x", "BF.MADD b x", "BF.INSERT c ITEMS x"} {
		do(t, s, sess, line)
		key := strings.Fields(line)[1]
		if got := parseBulks(t, do(t, s, sess, "BF.DEBUG "+key))[1]; !strings.Contains(got, " capacity:100 ") || !strings.HasSuffix(got, " ratio:0.005") {
			t.Errorf("%s created a filter whose layer is %q, want capacity 100 at 0.01·0.5", line, got)
		}
	}
	s.opts.Config.RESPInitialSize, s.opts.Config.RESPErrorRate = 5000, 0.002
	do(t, s, sess, "BF.ADD d x")
	if got := parseBulks(t, do(t, s, sess, "BF.DEBUG d"))[1]; !strings.Contains(got, " capacity:5000 ") || !strings.HasSuffix(got, " ratio:0.001") {
		t.Errorf("BF.ADD with respInitialSize 5000 and respErrorRate 0.002 created %q", got)
	}
}

// EXPANSION takes RedisBloom's values up to 32768, 30000 as in RedisBloom's tests. Its second
// layer would pass the test server's 1 MiB a filter: the filter takes its first 1,024 items, and
// each new item after answers RedisBloom's error with the limit, in its place in BF.MADD's array,
// and is not added; an item already there answers 0.
func TestLargeExpansionStopsAtTheMemoryLimitItemByItem(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	if got := do(t, s, sess, "BF.RESERVE bf 0.01 1024 EXPANSION 30000"); got != "+OK\r\n" {
		t.Fatalf("BF.RESERVE EXPANSION 30000 = %q", got)
	}
	if got := do(t, s, sess, "BF.INFO bf EXPANSION"); got != "*1\r\n:30000\r\n" {
		t.Errorf("BF.INFO EXPANSION = %q, want 30000", got)
	}
	items := numbered("x", 1100)
	reply := do(t, s, sess, "BF.MADD bf", items...)
	answers := strings.Split(strings.TrimSuffix(reply, "\r\n"), "\r\n")
	if answers[0] != "*1100" {
		t.Fatalf("BF.MADD of 1,100 items answered %q, want an array of 1,100", answers[0])
	}
	added, errs := 0, 0
	var refused []string
	for i, a := range answers[1:] {
		switch {
		case a == ":1":
			added++
		case a == ":0":
		case strings.HasPrefix(a, "-ERR problem inserting into filter: filter too large"):
			errs++
			refused = append(refused, items[i])
		default:
			t.Fatalf("item %d answered %q", i, a)
		}
	}
	if card := do(t, s, sess, "BF.CARD bf"); card != ":1024\r\n" || added != 1024 || errs == 0 {
		t.Errorf("BF.CARD %q, %d items answered 1 and %d an error; want 1,024 added, the first layer full, and errors after", card, added, errs)
	}
	// Every item answered an error was not added.
	for _, item := range refused {
		if got := do(t, s, sess, "BF.EXISTS bf", item); got != ":0\r\n" {
			t.Errorf("%s answered an error but BF.EXISTS says %q", item, got)
		}
	}
	// One command now: an item there answers 0, a new one the error, on BF.ADD as in BF.MADD.
	got := do(t, s, sess, "BF.MADD bf", items[0], "new-1", "new-2")
	if !strings.HasPrefix(got, "*3\r\n:0\r\n-ERR problem inserting into filter: ") || strings.Count(got, "-ERR problem inserting") != 2 {
		t.Errorf("BF.MADD of an item there and two new ones = %q", got)
	}
	if got := do(t, s, sess, "BF.ADD bf new-3"); !strings.HasPrefix(got, "-ERR problem inserting into filter: filter too large") {
		t.Errorf("BF.ADD of a new item = %q", got)
	}
	if got := do(t, s, sess, "BF.CARD bf"); got != ":1024\r\n" {
		t.Errorf("BF.CARD after the refused adds = %q, want 1024", got)
	}
}

// A filter stops at filter.MaxLayers layers, a documented limit: RedisBloom's own test grows one
// of capacity 1 and expansion 1 by 5,000 items. Past the limit each new item answers the error
// naming it, and BF.INFO counts the layers.
func TestLayerLimitAnswersItemByItem(t *testing.T) {
	s := newTestServer(t)
	sess := &session{authenticated: true}
	do(t, s, sess, "BF.RESERVE poc 0.0001 1 EXPANSION 1")
	reply := do(t, s, sess, "BF.MADD poc", numbered("i", 200)...)
	if !strings.HasPrefix(reply, "*200\r\n") || !strings.Contains(reply, "-ERR problem inserting into filter: filter too large: filter \"poc\" already has 48 layers\r\n") {
		t.Errorf("BF.MADD of 200 items to a filter of 1 and expansion 1 = %q", reply)
	}
	if got := do(t, s, sess, "BF.INFO poc FILTERS"); got != "*1\r\n:48\r\n" {
		t.Errorf("BF.INFO FILTERS = %q, want 48", got)
	}
	card := do(t, s, sess, "BF.CARD poc")
	if ones := strings.Count(reply, ":1\r\n"); card != fmt.Sprintf(":%d\r\n", ones) {
		t.Errorf("BF.CARD %q, but %d items answered 1", card, ones)
	}
}
