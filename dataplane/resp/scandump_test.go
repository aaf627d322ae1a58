package resp_test

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// redisBloomFilter is one filter of testdata/redisbloom (its README says what each field is).
type redisBloomFilter struct {
	Name      string   `json:"name"`
	Reserve   []string `json:"reserve"`
	ItemCount int      `json:"itemCount"`
	Chunks    []struct {
		Iterator int64  `json:"iterator"`
		Data     string `json:"data"`
	} `json:"chunks"`
	AbsentAnsweringOne []string `json:"absentAnsweringOne"`
}

func (f redisBloomFilter) items() []string  { return names(f.Name+"-item-", f.ItemCount) }
func (f redisBloomFilter) absent() []string { return names(f.Name+"-absent-", 10000) }

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// chunk is a chunk's data, decoded.
func (f redisBloomFilter) chunk(t *testing.T, i int) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(f.Chunks[i].Data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readRedisBloomFixture(t *testing.T) []redisBloomFilter {
	t.Helper()
	file, err := os.Open("testdata/redisbloom/redisbloom-scandump.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = file.Close() }()
	gz, err := gzip.NewReader(file)
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Filters []redisBloomFilter `json:"filters"`
	}
	if err := json.NewDecoder(gz).Decode(&fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Filters) != 6 {
		t.Fatalf("the fixture holds %d filters, want 6", len(fixture.Filters))
	}
	return fixture.Filters
}

// redisBloomDefaults are RedisBloom's options of a filter BF.ADD or BF.MADD creates, which the
// fixture's implicit filter has.
func redisBloomDefaults(cfg *config.Config) {
	cfg.DefaultExpectedInsertions = 100
	cfg.DefaultFPP = 0.01
}

// Each filter RedisBloom dumped loads with BF.LOADCHUNK, and answers every item it added 1 and
// exactly the absent probes RedisBloom answered 1: the same bits, hashed the same way.
func TestLoadChunkOfRedisBloomDumps(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, redisBloomDefaults)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	for _, f := range readRedisBloomFixture(t) {
		key := "loaded-" + f.Name
		for i, c := range f.Chunks {
			if err := rdb.BFLoadChunk(ctx, key, c.Iterator, f.chunk(t, i)).Err(); err != nil {
				t.Fatalf("%s: BF.LOADCHUNK of chunk %d (iterator %d): %v", f.Name, i, c.Iterator, err)
			}
		}
		if missed := answering(t, rdb, key, f.items(), false); len(missed) > 0 {
			t.Errorf("%s: %d of %d added items answer 0, first %q", f.Name, len(missed), f.ItemCount, missed[0])
		}
		if got := answering(t, rdb, key, f.absent(), true); !slices.Equal(sorted(got), sorted(f.AbsentAnsweringOne)) {
			t.Errorf("%s: %d absent probes answer 1, RedisBloom's %d did; got %v, want %v", f.Name, len(got), len(f.AbsentAnsweringOne), head(got), head(f.AbsentAnsweringOne))
		}
		// The filter dumps back to the very chunks it was loaded from.
		if got := scandump(t, rdb, key); !sameChunks(t, f, got) {
			t.Errorf("%s: the dump of the loaded filter differs from RedisBloom's", f.Name)
		}
	}
}

// The same BF.RESERVE and BF.MADD as RedisBloom's make the same filter: its dump has the same
// header fields and bits as RedisBloom's, byte for byte.
func TestScanDumpMatchesRedisBloom(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, redisBloomDefaults)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	for _, f := range readRedisBloomFixture(t) {
		key := "filled-" + f.Name
		if f.Reserve != nil {
			args := []any{"BF.RESERVE", key}
			for _, a := range f.Reserve[2:] {
				args = append(args, a)
			}
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("%s: %v: %v", f.Name, args, err)
			}
		}
		items := f.items()
		for start := 0; start < len(items); start += 10000 {
			batch := items[start:min(start+10000, len(items))]
			if err := rdb.BFMAdd(ctx, key, toAny(batch)...).Err(); err != nil {
				t.Fatalf("%s: BF.MADD: %v", f.Name, err)
			}
		}
		if got := scandump(t, rdb, key); !sameChunks(t, f, got) {
			t.Errorf("%s: the dump differs from RedisBloom's", f.Name)
		}
	}
}

// dumped is one BF.SCANDUMP answer.
type dumped struct {
	iter int64
	data []byte
}

// scandump dumps key from iterator 0 until the iterator answered is 0, that last answer left out.
func scandump(t *testing.T, rdb *redis.Client, key string) []dumped {
	t.Helper()
	var out []dumped
	for iter := int64(0); ; {
		res, err := rdb.BFScanDump(t.Context(), key, iter).Result()
		if err != nil {
			t.Fatalf("BF.SCANDUMP %s %d: %v", key, iter, err)
		}
		if res.Iter == 0 {
			return out
		}
		out = append(out, dumped{res.Iter, []byte(res.Data)})
		iter = res.Iter
		if len(out) > 1000 {
			t.Fatalf("BF.SCANDUMP %s: no end after 1000 chunks", key)
		}
	}
}

// sameChunks compares a dump with the fixture's, field by field for the header.
func sameChunks(t *testing.T, f redisBloomFilter, got []dumped) bool {
	t.Helper()
	if len(got) != len(f.Chunks) {
		t.Errorf("%s: %d chunks, RedisBloom's dump has %d", f.Name, len(got), len(f.Chunks))
		return false
	}
	same := true
	for i, c := range f.Chunks {
		want := f.chunk(t, i)
		if got[i].iter != c.Iterator {
			t.Errorf("%s: chunk %d has iterator %d, RedisBloom's %d", f.Name, i, got[i].iter, c.Iterator)
			same = false
		}
		if !bytes.Equal(got[i].data, want) {
			same = false
			if i == 0 {
				t.Errorf("%s: header\n got %s\nwant %s", f.Name, describeHeader(got[i].data), describeHeader(want))
			} else {
				t.Errorf("%s: chunk %d: %d bytes differ of %d (%d bytes got)", f.Name, i, differing(got[i].data, want), len(want), len(got[i].data))
			}
		}
	}
	return same
}

func describeHeader(b []byte) string { return fmt.Sprintf("%x", b) }

func differing(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// answering is those of items that BF.MEXISTS answers present (or absent when !present).
func answering(t *testing.T, rdb *redis.Client, key string, items []string, present bool) []string {
	t.Helper()
	var out []string
	for start := 0; start < len(items); start += 10000 {
		batch := items[start:min(start+10000, len(items))]
		got, err := rdb.BFMExists(t.Context(), key, toAny(batch)...).Result()
		if err != nil {
			t.Fatalf("BF.MEXISTS %s: %v", key, err)
		}
		for i, p := range got {
			if p == present {
				out = append(out, batch[i])
			}
		}
	}
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func head(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], " ") + " …"
	}
	return strings.Join(s, " ")
}

// A filter created over HTTP, in bits-and-blooms' layout and of several partitions, dumps in
// Bloomery's own header and loads back into a filter that answers every value as it does; a
// filter created over HTTP in RedisBloom's layout dumps as RedisBloom's do.
func TestScanDumpRoundTripsHTTPFilters(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	capacity, partitions := uint64(500), 4
	values, probes := names("v", 2000), names("p", 5000)
	for _, layout := range []string{"", "redisbloom"} {
		name := "http-" + layout
		opts := client.CreateOptions{ExpectedInsertions: &capacity, Layout: layout}
		if layout == "" {
			opts.Partitions = &partitions
		}
		created := dataplane.Create(t, ts, name, opts)
		if want := cmp.Or(layout, "bitsandblooms"); created.Layout != want {
			t.Errorf("%s: created with layout %q, want %q", name, created.Layout, want)
		}
		if err := ts.Client.MultiSet(ctx, name, values); err != nil {
			t.Fatal(err)
		}
		chunks := scandump(t, rdb, name)
		options := binary.LittleEndian.Uint32(chunks[0].data[12:])
		if redisBloom := options == 5; redisBloom != (layout == "redisbloom") {
			t.Errorf("%s: header options %#x", name, options)
		}
		copyName := "copy-" + name
		for _, c := range chunks {
			if err := rdb.BFLoadChunk(ctx, copyName, c.iter, c.data).Err(); err != nil {
				t.Fatalf("%s: BF.LOADCHUNK %d: %v", name, c.iter, err)
			}
		}
		if !slices.EqualFunc(scandump(t, rdb, copyName), chunks, func(a, b dumped) bool { return a.iter == b.iter && bytes.Equal(a.data, b.data) }) {
			t.Errorf("%s: the copy dumps otherwise than the original", name)
		}
		orig, cp := dataplane.Get(t, ts, name), dataplane.Get(t, ts, copyName)
		if cp.Items != orig.Items || cp.Layers != orig.Layers || cp.Partitions != orig.Partitions || cp.Layout != orig.Layout {
			t.Errorf("%s: the copy is %+v, the original %+v", name, cp, orig)
		}
		if got := dataplane.MultiCheck(t, ts, copyName, values); slices.Contains(got, false) {
			t.Errorf("%s: a value of the original answers false in the copy", name)
		}
		if got, want := dataplane.MultiCheck(t, ts, copyName, probes), dataplane.MultiCheck(t, ts, name, probes); !slices.Equal(got, want) {
			t.Errorf("%s: the probes answer otherwise in the copy", name)
		}
	}
}

// Until every byte of its layers is loaded, a filter's keys are neither checked nor added over
// RESP; once loaded, they are. RedisBloom's checks and texts refuse chunks that do not fit.
func TestLoadChunkProgressAndRefusals(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, redisBloomDefaults)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	f := readRedisBloomFixture(t)[1] // grown: a header and three chunks
	key := "partial"
	load := func(i int) error { return rdb.BFLoadChunk(ctx, key, f.Chunks[i].Iterator, f.chunk(t, i)).Err() }
	if err := load(0); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{{"BF.EXISTS", key, "a"}, {"BF.MEXISTS", key, "a"}, {"BF.ADD", key, "a"}, {"BF.MADD", key, "a"}, {"BF.SCANDUMP", key, 0}} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
			t.Errorf("%v during the load: %v, want LOADING", cmd, err)
		}
	}
	if err := rdb.Do(ctx, "BF.INFO", key).Err(); err != nil {
		t.Errorf("BF.INFO during the load: %v", err)
	}
	for name, tc := range map[string]struct {
		iter int64
		data []byte
		want string
	}{
		"header again":     {1, f.chunk(t, 0), "ERR received bad data"},
		"past the end":     {1 << 30, []byte("x"), "ERR invalid offset - no link found"},
		"over two layers":  {f.Chunks[1].Iterator + 8, bytes.Repeat([]byte{0}, int(f.Chunks[1].Iterator)+7), "ERR invalid chunk - Too big for current filter"},
		"negative":         {-5, []byte("x"), "ERR received bad data"},
		"not a number":     {0, nil, "ERR Second argument must be numeric"},
		"iterator of data": {3, []byte("xyz"), "ERR invalid offset - no link found"},
	} {
		args := []any{"BF.LOADCHUNK", key, tc.iter, tc.data}
		if name == "not a number" {
			args[2] = "x"
		}
		if err := rdb.Do(ctx, args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if err := rdb.BFLoadChunk(ctx, "missing", 5, []byte("x")).Err(); err == nil || err.Error() != "ERR not found" {
		t.Errorf("a data chunk for a missing key: %v", err)
	}
	for i := 1; i < len(f.Chunks); i++ {
		if err := load(i); err != nil {
			t.Fatal(err)
		}
	}
	if got := answering(t, rdb, key, f.items(), false); len(got) > 0 {
		t.Errorf("%d items answer 0 once loaded", len(got))
	}
}

// In a cluster, a load through one pod is a replicated write: the other pod answers LOADING from
// the header on, and every item of the dump once the last chunk is acknowledged, with no
// anti-entropy pass between them.
func TestLoadChunkReachesEveryPod(t *testing.T) {
	t.Parallel()
	// The loading pod sends batches of 16 KiB: a chunk travels in several ops.
	small := func(cfg *config.Config) { redisBloomDefaults(cfg); cfg.MaxHTTPRequestLength = 16 << 10 }
	a, b := dataplane.Start(t, small), dataplane.Start(t, redisBloomDefaults)
	ctx := t.Context()
	members := []wire.Member{{Name: "a", URL: a.Internal.URL}, {Name: "b", URL: b.Internal.URL}}
	for self, ts := range map[string]*dataplane.Server{"a": a, "b": b} {
		if err := ts.Internal.Client.SetMembership(ctx, wire.Membership{Epoch: 1, Self: self, Members: members}); err != nil {
			t.Fatal(err)
		}
	}
	dataplane.WaitUntilReady(t, a)
	dataplane.WaitUntilReady(t, b)
	loader, reader := dataplane.RedisClient(t, a), dataplane.RedisClient(t, b)
	f := readRedisBloomFixture(t)[1] // grown: a header and three chunks
	if size := len(f.chunk(t, len(f.Chunks)-1)); size <= 8<<10 {
		t.Fatalf("the last chunk has %d bytes, which one op carries", size)
	}
	// Two filters, homed on either pod, whichever it is.
	for _, key := range []string{"spread-0", "spread-1"} {
		if err := loader.BFLoadChunk(ctx, key, f.Chunks[0].Iterator, f.chunk(t, 0)).Err(); err != nil {
			t.Fatal(err)
		}
		err := reader.BFExists(ctx, key, "x").Err()
		if err == nil || !strings.HasPrefix(err.Error(), "LOADING") || !strings.Contains(err.Error(), " 0 of ") {
			t.Errorf("%s: BF.EXISTS on the other pod after the header = %v, want LOADING with 0 bytes loaded", key, err)
		}
		for i := 1; i < len(f.Chunks); i++ {
			if err := loader.BFLoadChunk(ctx, key, f.Chunks[i].Iterator, f.chunk(t, i)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if missed := answering(t, reader, key, f.items(), false); len(missed) > 0 {
			t.Errorf("%s: %d of %d loaded items answer 0 on the other pod, first %q", key, len(missed), f.ItemCount, missed[0])
		}
		if got := scandump(t, reader, key); !sameChunks(t, f, got) {
			t.Errorf("%s: the other pod's dump differs from RedisBloom's", key)
		}
	}
}

// A dump taken at the port's default limits loads at the same limits: a layer larger than
// respMaxBulkLength is dumped in chunks that a BF.LOADCHUNK, framing included, may carry.
func TestScanDumpOfALargeLayerLoadsAtTheDefaultLimits(t *testing.T) {
	t.Parallel()
	ts := dataplane.Start(t, nil)
	ctx := t.Context()
	rdb := dataplane.RedisClient(t, ts)
	// 1e7 items at 0.001: one layer of 17 MiB, over the default respMaxBulkLength of 10 MiB.
	if err := rdb.Do(ctx, "BF.RESERVE", "large", 0.001, 10_000_000, "NONSCALING").Err(); err != nil {
		t.Fatal(err)
	}
	items := names("large-item-", 1000)
	if err := rdb.BFMAdd(ctx, "large", toAny(items)...).Err(); err != nil {
		t.Fatal(err)
	}
	chunks := scandump(t, rdb, "large")
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want the header and the layer in two at least", len(chunks))
	}
	for i, c := range chunks {
		if err := rdb.BFLoadChunk(ctx, "copy", c.iter, c.data).Err(); err != nil {
			t.Fatalf("BF.LOADCHUNK of chunk %d of %d (%d bytes): %v", i, len(chunks), len(c.data), err)
		}
	}
	if missed := answering(t, rdb, "copy", items, false); len(missed) > 0 {
		t.Errorf("%d of %d items answer 0 in the copy, first %q", len(missed), len(items), missed[0])
	}
}

// Under placement (three pods, two replicas of each partition), a load through a pod that holds
// the filter reaches its other owner: every pod answers every item, reads being routed to the
// owners.
func TestLoadChunkUnderPlacement(t *testing.T) {
	t.Parallel()
	c := dataplane.NewCluster(t, 3, func(cfg *config.Config) {
		redisBloomDefaults(cfg)
		cfg.WriteConsistency = wire.ConsistencyAll
	})
	c.Push(wire.Placement{ReplicationFactor: 2}, nil)
	for _, ts := range c.Pods {
		dataplane.WaitUntilReady(t, ts)
	}
	ctx := t.Context()
	f := readRedisBloomFixture(t)[1]
	// The pod that loads must hold the filter: one of three does not, and answers so.
	loaded := false
	for i, ts := range c.Pods {
		rdb := dataplane.RedisClient(t, ts)
		err := rdb.BFLoadChunk(ctx, "placed", f.Chunks[0].Iterator, f.chunk(t, 0)).Err()
		if err != nil && strings.Contains(err.Error(), "holds 0 of the filter's 1 partitions") {
			if err := rdb.Del(ctx, "placed").Err(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("the header through %s: %v", c.Names[i], err)
		}
		for j := 1; j < len(f.Chunks); j++ {
			if err := rdb.BFLoadChunk(ctx, "placed", f.Chunks[j].Iterator, f.chunk(t, j)).Err(); err != nil {
				t.Fatalf("chunk %d through %s: %v", j, c.Names[i], err)
			}
		}
		loaded = true
		break
	}
	if !loaded {
		t.Fatal("no pod took the load")
	}
	for i, ts := range c.Pods {
		if missed := answering(t, dataplane.RedisClient(t, ts), "placed", f.items(), false); len(missed) > 0 {
			t.Errorf("through %s, %d of %d loaded items answer 0, first %q", c.Names[i], len(missed), f.ItemCount, missed[0])
		}
	}
}
