package process

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// These tests move filters with BF.SCANDUMP and BF.LOADCHUNK between real data-plane processes,
// as a client of RedisBloom's does, and with `bloomery move-from-redis`.

// respClient is a go-redis client of the RESP port on loopback.
func respClient(t *testing.T, port string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// chunk is one BF.SCANDUMP answer.
type chunk struct {
	iter int64
	data []byte
}

// dumpOver takes the dump of key with BF.SCANDUMP, every chunk.
func dumpOver(t *testing.T, rdb *redis.Client, key string) []chunk {
	t.Helper()
	var chunks []chunk
	for iter := int64(0); ; {
		d, err := rdb.BFScanDump(t.Context(), key, iter).Result()
		if err != nil {
			t.Fatalf("BF.SCANDUMP %s %d: %v", key, iter, err)
		}
		if d.Iter == 0 {
			return chunks
		}
		chunks = append(chunks, chunk{d.Iter, []byte(d.Data)})
		iter = d.Iter
	}
}

// loadOver loads chunks into key with BF.LOADCHUNK.
func loadOver(t *testing.T, rdb *redis.Client, key string, chunks []chunk) {
	t.Helper()
	for i, c := range chunks {
		if err := rdb.BFLoadChunk(t.Context(), key, c.iter, c.data).Err(); err != nil {
			t.Fatalf("BF.LOADCHUNK %s, chunk %d of %d: %v", key, i, len(chunks), err)
		}
	}
}

// reserveAndAdd makes key with BF.RESERVE, of a capacity its items overflow into more layers,
// and adds them with BF.MADD.
func reserveAndAdd(t *testing.T, rdb *redis.Client, key string, items []string) {
	t.Helper()
	if err := rdb.BFReserve(t.Context(), key, 0.001, int64(len(items)/5)).Err(); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(items); start += 1000 {
		args := make([]any, 0, 1000)
		for _, item := range items[start:min(start+1000, len(items))] {
			args = append(args, item)
		}
		if err := rdb.BFMAdd(t.Context(), key, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// answeringZero lists the items BF.MEXISTS answers 0 for through rdb.
func answeringZero(t *testing.T, rdb *redis.Client, key string, items []string) []string {
	t.Helper()
	var zero []string
	for start := 0; start < len(items); start += 1000 {
		batch := items[start:min(start+1000, len(items))]
		args := make([]any, len(batch))
		for i, item := range batch {
			args[i] = item
		}
		got, err := rdb.BFMExists(t.Context(), key, args...).Result()
		if err != nil {
			t.Fatalf("BF.MEXISTS %s: %v", key, err)
		}
		for i, present := range got {
			if !present {
				zero = append(zero, batch[i])
			}
		}
	}
	return zero
}

// A filter dumped through one pod of three and loaded through another, at writeConsistency all,
// answers every item through every pod once the last chunk is acknowledged: the chunks are
// replicated writes, with no anti-entropy (off here) between the load and the reads.
func TestScanDumpLoadsIntoEveryPod(t *testing.T) {
	c := startRESPCluster(t, 3, 0, "writeConsistency: all")
	items := valuesOf("item", 50_000)
	source := respClient(t, c.pods[0].respPort)
	reserveAndAdd(t, source, "source", items)
	chunks := dumpOver(t, source, "source")
	if len(chunks) < 3 {
		t.Fatalf("the dump has %d chunks, want a header and two layers at least", len(chunks))
	}
	loadOver(t, respClient(t, c.pods[1].respPort), "loaded", chunks)
	for _, p := range c.pods {
		if zero := answeringZero(t, respClient(t, p.respPort), "loaded", items); len(zero) > 0 {
			t.Errorf("through %s, %d of %d loaded items answer 0, first %q", p.name, len(zero), len(items), zero[0])
		}
	}
	// The loaded filter dumps back to the same chunks, through the pod that did not load it.
	again := dumpOver(t, respClient(t, c.pods[2].respPort), "loaded")
	if fmt.Sprint(again) != fmt.Sprint(chunks) {
		t.Errorf("the loaded filter's dump through %s differs from the source's", c.pods[2].name)
	}
}

// Loaded chunks are journaled: a kill -9 of a lone data plane right after the last chunk was
// acknowledged loses none, and no snapshot was taken for them.
func TestLoadedChunksSurviveAKill(t *testing.T) {
	dir := t.TempDir()
	dp, port := startWithRESP(t, dir, "--log-sync", "always")
	rdb := respClient(t, port)
	items := valuesOf("kept", 20_000)
	reserveAndAdd(t, rdb, "source", items)
	chunks := dumpOver(t, rdb, "source")
	snapshots := strings.Count(dp.logs(), `"msg":"Snapshot written"`)
	loadOver(t, rdb, "loaded", chunks)
	if strings.Count(dp.logs(), `"msg":"Snapshot written"`) != snapshots {
		t.Fatalf("a snapshot was written during the load:\n%s", dp.logs())
	}
	dp.stop(t, syscall.SIGKILL)

	_, port = startWithRESP(t, dir)
	if zero := answeringZero(t, respClient(t, port), "loaded", items); len(zero) > 0 {
		t.Errorf("after a kill -9, %d of %d loaded items answer 0, first %q", len(zero), len(items), zero[0])
	}
}

// `bloomery move-from-redis`, the real binary, moves every filter of one data plane into a
// cluster of three through one pod's RESP port, and every pod answers every item.
func TestMoveFromRedisBetweenDataPlanes(t *testing.T) {
	_, from := startWithRESP(t, t.TempDir())
	source := respClient(t, from)
	moved := map[string][]string{}
	for _, key := range []string{"moved-a", "moved-b"} {
		moved[key] = valuesOf(key+"-item", 10_000)
		reserveAndAdd(t, source, key, moved[key])
	}
	c := startRESPCluster(t, 3, 0, "writeConsistency: all")
	res := runBinary(t, "move-from-redis", "--from", "redis://127.0.0.1:"+from, "--to", "redis://127.0.0.1:"+c.pods[1].respPort)
	if res.code != 0 || !strings.Contains(res.stdout+res.stderr, "moved 2 filters") {
		t.Fatalf("move-from-redis exited %d:\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	for key, items := range moved {
		for _, p := range c.pods {
			if zero := answeringZero(t, respClient(t, p.respPort), key, items); len(zero) > 0 {
				t.Errorf("%s through %s: %d of %d items answer 0, first %q", key, p.name, len(zero), len(items), zero[0])
			}
		}
	}
}
