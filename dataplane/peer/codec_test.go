package peer

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

func sampleOps() []Op {
	opts := filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, ValidAfterCreate: time.Hour, ValidAfterAccess: time.Minute}
	return []Op{
		{Kind: OpCreate, Name: "f", Generation: 1_700_000_000_000_000_000, Options: &opts},
		{Kind: OpAdd, Name: "f", Generation: 1_700_000_000_000_000_000, Keys: []string{"a", "", "日本", "\x00<>&\"\\"}},
		{Kind: OpDelete, Name: "g.h-i_j", Generation: 42},
		{Kind: OpAdd, Name: "f", Generation: 1_700_000_000_000_000_000, Keys: []string{"x"}, HomeEpoch: 1 << 40, Home: "pod-a"},
		{Kind: OpExpire, Name: "f", Generation: 1_700_000_000_000_000_000,
			Expiry: &filter.Expiry{Mode: filter.ExpiryAt, At: time.Unix(0, 1_800_000_000_000_000_000), Stamp: 1_700_000_000_000_000_001, Origin: "pod-b"}},
		{Kind: OpExpire, Name: "f", Generation: 1_700_000_000_000_000_000, Expiry: &filter.Expiry{Mode: filter.ExpiryNever, Stamp: 7, Origin: ""}},
		// A create carries the filter's layout, so that every replica hashes its keys alike.
		{Kind: OpCreate, Name: "r", Generation: 5, Options: &filter.Options{Capacity: 100, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: filter.LayoutRedisBloom}},
		// ... and its owner, if it has one, so that every replica answers it.
		{Kind: OpCreate, Name: "o", Generation: 6, Options: &filter.Options{Capacity: 100, FPP: 0.01, Partitions: 2, Owner: filter.OwnerID{1, 15: 2}}},
		// The pieces of a dump loaded in chunks: its head, and bytes ORed into a layer.
		{Kind: OpLoad, Name: "r", Generation: 5, Load: &filter.Load{Head: []filter.LoadHead{{Layers: 3, Items: 700, NewestItems: 100}}}},
		{Kind: OpLoad, Name: "r", Generation: 5, Load: &filter.Load{Partition: 0, Layer: 2, Offset: 1 << 40, Bytes: []byte{0, 1, 0xff, 7}}},
	}
}

func TestOpsRoundTrip(t *testing.T) {
	ops := sampleOps()
	got, err := DecodeOps(AppendOps(nil, ops))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalized(got), ops) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, ops)
	}
	if got, err := DecodeOps(AppendOps(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("an empty batch: %v, %v", got, err)
	}
}

func TestDecodeOpsRefusesMalformedBatches(t *testing.T) {
	good := AppendOps(nil, sampleOps())
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"wrong magic":           append([]byte("BOP2"), good[4:]...),
		"truncated":             good[:len(good)-3],
		"trailing bytes":        append(append([]byte(nil), good...), 0),
		"huge count":            append([]byte("BOP1"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"too many ops":          append(binary.AppendUvarint([]byte("BOP1"), maxBatchOps+1), make([]byte, 10*(maxBatchOps+1))...),
		"huge key count":        append([]byte("BOP1"), 1, 3, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0),
		"unknown kind":          append([]byte("BOP1"), 1, 9, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1),
		"home's add at epoch 0": append([]byte("BOP1"), 1, 5, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 'a', 0),
		// A load whose piece is of no known kind, declares more bytes than it has, or a head of
		// more layers than a filter may have.
		"unknown piece":      append([]byte("BOP1"), 1, wireLoad, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1, 9),
		"bytes past the end": append([]byte("BOP1"), 1, wireLoad, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 100, 0xff),
		"too many layers":    append([]byte("BOP1"), 1, wireLoad, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 49, 0, 0),
		"no piece":           append([]byte("BOP1"), 1, wireLoad, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1),
	} {
		if _, err := DecodeOps(b); !errors.Is(err, ErrMalformedOps) {
			t.Errorf("%s: %v, want ErrMalformedOps", name, err)
		}
	}
}

// An add that no home served is encoded as before the home's add (kind 5) existed, so that a pod
// of an earlier version reads it; only a check-and-set's add takes kind 5.
func TestOnlyAHomesAddTakesTheNewKind(t *testing.T) {
	plain := AppendOps(nil, []Op{{Kind: OpAdd, Name: "f", Generation: 1, Keys: []string{"k"}}})
	home := AppendOps(nil, []Op{{Kind: OpAdd, Name: "f", Generation: 1, Keys: []string{"k"}, HomeEpoch: 3, Home: "a"}})
	if plain[5] != wireAdd || home[5] != wireHomeAdd {
		t.Errorf("kinds %d and %d, want %d for an add and %d for a home's add", plain[5], home[5], wireAdd, wireHomeAdd)
	}
}

// A batch takes what it holds to decode, not a string header for each key it declares or holds:
// a body of 80 MiB of empty keys would otherwise cost 1.3 GiB of headers.
func TestDecodeOpsAllocatesWithinAMultipleOfTheBatch(t *testing.T) {
	add := func(keys int, key string) []byte {
		b := append([]byte("BOP1"), 1, wireAdd, 1, 'f')
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = binary.AppendUvarint(b, uint64(keys))
		for range keys {
			b = appendString(b, key)
		}
		return b
	}
	// Declares 8 Mi keys in 8 MiB, the last of which says 127 bytes that are not there.
	liar := add(8<<20, "")
	liar[len(liar)-1] = 0x7f
	for name, tt := range map[string]struct {
		body []byte
		ok   bool
	}{
		"empty keys":     {add(8<<20, ""), true},
		"one-byte keys":  {add(4<<20, "x"), true},
		"declared count": {liar, false},
	} {
		t.Run(name, func(t *testing.T) {
			var keys int
			allocated := allocatedBy(func() {
				ops, err := DecodeOps(tt.body)
				if (err == nil) != tt.ok {
					t.Fatalf("decoding: %v", err)
				}
				if err == nil {
					keys = ops[0].KeyCount()
				}
			})
			if tt.ok && keys == 0 {
				t.Fatal("no keys decoded")
			}
			t.Logf("%d bytes, %d keys: %d bytes allocated", len(tt.body), keys, allocated)
			if limit := 4 * uint64(len(tt.body)); allocated > limit {
				t.Errorf("decoding %d bytes (%d keys) allocated %d bytes, more than 4 times the body (%d)", len(tt.body), keys, allocated, limit)
			}
		})
	}
}

// allocatedBy answers the bytes fn allocates on the heap.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzDecodeOps feeds DecodeOps, which reads what peers send, arbitrary bytes: it must never
// panic, and what it accepts must survive an encoding and a decoding unchanged (the bytes may
// differ: a varint has several spellings).
func FuzzDecodeOps(f *testing.F) {
	f.Add(AppendOps(nil, sampleOps()))
	f.Add(AppendOps(nil, sampleOps()[len(sampleOps())-2:])) // the loads alone
	f.Add([]byte("BOP1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeOps(b)
		if err != nil {
			return
		}
		again, err := DecodeOps(AppendOps(nil, ops))
		if err != nil {
			t.Fatalf("re-encoded ops do not decode: %v", err)
		}
		if !reflect.DeepEqual(normalized(again), normalized(ops)) {
			t.Fatalf("decoded\n%+v\nre-encoded and decoded\n%+v", ops, again)
		}
	})
}

// normalized makes ops comparable with DeepEqual: a NaN never equals itself, and an add without
// keys decodes with an empty list, and decoded keys are packed.
func normalized(ops []Op) []Op {
	out := make([]Op, len(ops))
	for i, op := range ops {
		if op.Options != nil {
			o := *op.Options
			if math.IsNaN(o.FPP) {
				o.FPP = 0
			}
			if math.IsNaN(o.Tightening) {
				o.Tightening = 0
			}
			op.Options = &o
		}
		op.Keys, op.packed = op.AllKeys(), packedKeys{}
		if op.Keys != nil && len(op.Keys) == 0 {
			op.Keys = nil
		}
		out[i] = op
	}
	return out
}

func valuesFor(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// A batch of adds is encoded within the size its hint reserves, so in one allocation.
func TestEncodedSizeHintHoldsABatchOfAdds(t *testing.T) {
	ops := []Op{
		{Kind: OpAdd, Name: "f", Generation: 1, Keys: valuesFor("k", 300)},
		{Kind: OpAdd, Name: strings.Repeat("n", 200), Generation: 2, Keys: []string{"", strings.Repeat("x", 1<<14)}},
		{Kind: OpCreate, Name: "g", Generation: 3, Options: &filter.Options{Capacity: 10, FPP: 0.01, Partitions: 8}},
		{Kind: OpLoad, Name: "g", Generation: 3, Load: &filter.Load{Head: make([]filter.LoadHead, 8)}},
		{Kind: OpLoad, Name: "g", Generation: 3, Load: &filter.Load{Partition: 7, Layer: 47, Offset: 1 << 60, Bytes: make([]byte, 1<<14)}},
	}
	hint := encodedSizeHint(ops)
	if got := len(AppendOps(nil, ops)); got > hint {
		t.Fatalf("the batch took %d bytes, over its hint of %d", got, hint)
	}
	if allocs := testing.AllocsPerRun(10, func() { _ = AppendOps(make([]byte, 0, encodedSizeHint(ops)), ops) }); allocs > 1 {
		t.Errorf("%.0f allocations to encode a batch, want 1", allocs)
	}
}
