package filter

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// The encoding is in snapshots and logs on disk and in batches between pods of different
// versions: its bytes must not change.
func TestOptionsBinaryRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{
			Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, ValidAfterCreate: time.Hour, ValidAfterAccess: time.Minute},
			"e803000000000000" + "7b14ae47e17a843f" + "01" + "0200000000000000" + "000000000000e03f" + "00a0b83046030000" + "005847f80d000000",
		},
		{Options{}, strings.Repeat("00", OptionsBinarySize)},
		// Partitions set the flags' second bit and follow the options of one partition.
		{
			Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Partitions: 8},
			"e803000000000000" + "7b14ae47e17a843f" + "03" + "0200000000000000" + "000000000000e03f" + strings.Repeat("00", 16) + "08000000",
		},
		// RedisBloom's layout sets the flags' third bit; bits-and-blooms', the zero layout, none.
		{
			Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: LayoutRedisBloom},
			"e803000000000000" + "7b14ae47e17a843f" + "05" + "0200000000000000" + "000000000000e03f" + strings.Repeat("00", 16),
		},
		// An owner sets the flags' fourth bit and follows the partitions, if any.
		{
			Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Partitions: 8, Owner: testOwner},
			"e803000000000000" + "7b14ae47e17a843f" + "0b" + "0200000000000000" + "000000000000e03f" + strings.Repeat("00", 16) + "08000000" +
				"37e7e58fedbd44414a9d81b2b3bc8ae9",
		},
		{
			Options{Capacity: 1000, FPP: 0.01, Owner: testOwner},
			"e803000000000000" + "7b14ae47e17a843f" + "08" + strings.Repeat("00", 32) + "37e7e58fedbd44414a9d81b2b3bc8ae9",
		},
	} {
		b, err := tc.o.AppendBinary([]byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b[len("prefix"):]); string(b[:len("prefix")]) != "prefix" || got != tc.want {
			t.Fatalf("%+v encodes as %s, want %s after what was there", tc.o, got, tc.want)
		}
		var back Options
		if n := OptionsBinaryLen(b[len("prefix"):][:OptionsBinarySize]); n != len(b)-len("prefix") || n > OptionsBinaryMaxLen {
			t.Fatalf("%+v: OptionsBinaryLen says %d of %d bytes (at most %d)", tc.o, n, len(b)-len("prefix"), OptionsBinaryMaxLen)
		}
		if err := back.UnmarshalBinary(b[len("prefix"):]); err != nil || back != tc.o {
			t.Fatalf("%+v decodes as %+v, %v", tc.o, back, err)
		}
	}
}

// testOwner is the owner 37e7e58f-edbd-4441-4a9d-81b2b3bc8ae9.
var testOwner = OwnerID{0x37, 0xe7, 0xe5, 0x8f, 0xed, 0xbd, 0x44, 0x41, 0x4a, 0x9d, 0x81, 0xb2, 0xb3, 0xbc, 0x8a, 0xe9}

func TestOptionsUnmarshalBinaryRefusesWhatAppendBinaryDoesNotMake(t *testing.T) {
	good, _ := Options{Capacity: 1, FPP: 0.5}.AppendBinary(nil)
	partitionedShort := append([]byte(nil), good...)
	partitionedShort[16] = flagPartitioned
	unknownFlag := append([]byte(nil), good...)
	unknownFlag[16] = 16
	ownedShort := append([]byte(nil), good...)
	ownedShort[16] = flagOwned
	zeroOwner := append(append([]byte(nil), ownedShort...), make([]byte, optionsOwnerSize)...)
	onePartition := append(append([]byte(nil), partitionedShort...), 1, 0, 0, 0)
	growth := append([]byte(nil), good...)
	growth[17+4] = 1 // 2^32
	for name, b := range map[string][]byte{
		"empty":                               nil,
		"short":                               good[:OptionsBinarySize-1],
		"long":                                append(append([]byte(nil), good...), 0),
		"partitioned flag without partitions": partitionedShort,
		"unknown flag":                        unknownFlag,
		"flagged partitions of 1":             onePartition,
		"owned flag without an owner":         ownedShort,
		"flagged owner of zeros":              zeroOwner,
		"growth > 2^32-1":                     growth,
	} {
		var o Options
		if err := o.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: decoded as %+v, want an error", name, o)
		}
	}
}
