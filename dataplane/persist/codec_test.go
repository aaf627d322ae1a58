package persist

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// An add record takes its bytes and a string header for each key it holds to decode; a count it
// declares beyond the keys it holds costs nothing.
func TestAddRecordAllocatesWhatItHolds(t *testing.T) {
	decode := func(body []byte) (change, uint64, error) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		d := decoder{r: bytes.NewReader(body), left: uint64(len(body))}
		c := d.change()
		runtime.ReadMemStats(&after)
		return c, after.TotalAlloc - before.TotalAlloc, d.err
	}

	keys := slices.Repeat([]string{"", "x", "日本"}, 1<<20)
	body := appendAdd(nil, "f", keys)
	c, allocated, err := decode(body)
	if err != nil || !slices.Equal(c.keys, keys) {
		t.Fatalf("decoded %d keys, %v; want %d", len(c.keys), err, len(keys))
	}
	t.Logf("%d bytes, %d keys: %d bytes allocated", len(body), len(keys), allocated)
	if limit := uint64(len(body)) + 16*uint64(len(keys)) + 64<<10; allocated > limit {
		t.Errorf("decoding %d bytes of %d keys allocated %d bytes, more than the bytes and a header a key (%d)", len(body), len(keys), allocated, limit)
	}

	// A count of about 8 Mi keys over 8 MiB that holds one long key.
	const declared = 8<<20 - 4
	liar := []byte{kindAdd, 1, 'f'}
	liar = binary.AppendUvarint(liar, declared)
	liar = append(binary.AppendUvarint(liar, 8<<20-8), strings.Repeat("k", 8<<20-8)...)
	_, allocated, err = decode(liar)
	if err == nil {
		t.Fatal("a record declaring more keys than it holds decoded")
	}
	t.Logf("%d bytes declaring %d keys: %d bytes allocated", len(liar), declared, allocated)
	if limit := 2 * uint64(len(liar)); allocated > limit {
		t.Errorf("a record of %d bytes declaring %d keys allocated %d bytes, more than twice its size", len(liar), declared, allocated)
	}
}
