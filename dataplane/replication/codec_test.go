package replication

import (
	"errors"
	"math"
	"reflect"
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
	}
}

func TestOpsRoundTrip(t *testing.T) {
	ops := sampleOps()
	got, err := DecodeOps(AppendOps(nil, ops))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, ops)
	}
	if got, err := DecodeOps(AppendOps(nil, nil)); err != nil || len(got) != 0 {
		t.Fatalf("an empty batch: %v, %v", got, err)
	}
}

func TestDecodeOpsRefusesMalformedBatches(t *testing.T) {
	good := AppendOps(nil, sampleOps())
	for name, b := range map[string][]byte{
		"empty":          nil,
		"wrong magic":    append([]byte("BOP2"), good[4:]...),
		"truncated":      good[:len(good)-3],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"huge count":     append([]byte("BOP1"), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"unknown kind":   append([]byte("BOP1"), 1, 9, 1, 'f', 0, 0, 0, 0, 0, 0, 0, 1),
	} {
		if _, err := DecodeOps(b); !errors.Is(err, ErrMalformedOps) {
			t.Errorf("%s: %v, want ErrMalformedOps", name, err)
		}
	}
}

// FuzzDecodeOps feeds DecodeOps, which reads what peers send, arbitrary bytes: it must never
// panic, and what it accepts must survive an encoding and a decoding unchanged (the bytes may
// differ: a varint has several spellings).
func FuzzDecodeOps(f *testing.F) {
	f.Add(AppendOps(nil, sampleOps()))
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
// keys decodes with an empty list.
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
		if op.Keys != nil && len(op.Keys) == 0 {
			op.Keys = nil
		}
		out[i] = op
	}
	return out
}
