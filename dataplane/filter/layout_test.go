package filter

import (
	"math"
	"testing"
)

// MurmurHash64A of a few keys: the empty key's follow from the algorithm by hand. The resp
// package's tests of RedisBloom's own dumps check the hash, and every length's tail, bit for bit.
func TestMurmur64A(t *testing.T) {
	for _, tc := range []struct {
		key  string
		seed uint64
		want uint64
	}{
		{"", 0, 0},
		{"", 1, 0xc6a4a7935bd064dc},
		{"a", 0, 0x071717d2d36b6b11},
		{"hello", 0, 0x1e68d17c457bf117},
	} {
		if got := murmur64A(tc.key, tc.seed); got != tc.want {
			t.Errorf("murmur64A(%q, %#x) = %#x, want %#x", tc.key, tc.seed, got, tc.want)
		}
	}
}

// RedisBloom's layers, as its BF.DEBUG and dumps describe them: a first layer of 1000 entries at
// 0.01 has 1384 bytes and 8 hashes, and each next one twice the entries at half the error.
func TestRedisBloomShapes(t *testing.T) {
	o := Options{Capacity: 1000, FPP: 0.001, Scalable: true, Growth: 2, Tightening: 0.5, Layout: LayoutRedisBloom}
	for i, want := range []LayerShape{{1000, 15872, 11}, {2000, 34560, 12}, {4000, 74880, 13}} {
		got, err := o.LayerShape(i)
		if err != nil || got != want {
			t.Errorf("layer %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	fixed := Options{Capacity: 20000, FPP: 0.0001, Layout: LayoutRedisBloom}
	if got, err := fixed.LayerShape(0); err != nil || got != (LayerShape{20000, 383424, 14}) {
		t.Errorf("non-scaling layer: %+v, %v", got, err)
	}
	if e := o.RedisBloomLayerError(2); e != 0.000125 {
		t.Errorf("layer 2's error %v, want 0.000125", e)
	}
	if bpe := RedisBloomBitsPerEntry(0.005); math.Abs(bpe-11.027753418256411) > 1e-15 {
		t.Errorf("bits per entry at 0.005: %v", bpe)
	}
}

// A redisbloom filter has one partition and RedisBloom's tightening.
func TestRedisBloomOptionsValidate(t *testing.T) {
	base := Options{Capacity: 100, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: LayoutRedisBloom}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	partitioned, loose := base, base
	partitioned.Partitions = 2
	loose.Tightening = 0.8
	for name, o := range map[string]Options{"partitions": partitioned, "tightening": loose} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
	if p := base.AutoPartitions(1); p != 1 {
		t.Errorf("AutoPartitions of a redisbloom filter: %d, want 1", p)
	}
}
