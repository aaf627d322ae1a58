package filter

import (
	"hash/fnv"
	"math/bits"
)

// Key locations without an allocation per key. bits-and-blooms/bloom/v3 derives a key's k bit
// locations from four 64-bit hashes: MurmurHash3 x64-128 (seed 0) of the key, and of the key with
// one byte of value 1 appended. bloom.Locations returns them in a new slice for every key and its
// hash function is not exported, so the engine computes the same four hashes here, reading the
// key in place. TestLocationsMatchBloom and FuzzLocations check every location against
// bloom.Locations: the bits set are exactly those bits-and-blooms would set, so snapshots and
// merges do not depend on which computed them.

const (
	murmurC1 = 0x87c37b91114253d5
	murmurC2 = 0x4cf5ad432745937f
)

// baseHashes are the four hashes bloom/v3 computes for key.
func baseHashes(key string) [4]uint64 {
	var h1, h2 uint64
	blocks := len(key) / 16 * 16
	for i := 0; i < blocks; i += 16 {
		h1, h2 = murmurBlock(h1, h2, load64(key[i:i+8]), load64(key[i+8:i+16]))
	}
	// Both hashes share every full block of the key; only the tails differ.
	tail := key[blocks:]
	a, b := murmurFinish(h1, h2, tail, false, uint64(len(key)))
	c, d := murmurFinish(h1, h2, tail, true, uint64(len(key))+1)
	return [4]uint64{a, b, c, d}
}

// location is the i-th location of a key with hashes h, before the modulo of a layer's size:
// the formula of bloom/v3, which combines the hashes in pairs (Kirsch and Mitzenmacher).
func location(h *[4]uint64, i uint) uint64 {
	ii := uint64(i)
	return h[ii%2] + ii*h[2+(((ii+(ii%2))%4)/2)]
}

// appendLocations appends the first k locations of key to dst.
func appendLocations(dst []uint64, key string, k uint) []uint64 {
	h := baseHashes(key)
	for i := range k {
		dst = append(dst, location(&h, i))
	}
	return dst
}

// load64 reads 8 bytes of s as a little-endian word.
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// murmurBlock mixes one 16-byte block (k1, k2) into the state (h1, h2).
func murmurBlock(h1, h2, k1, k2 uint64) (uint64, uint64) {
	h1 ^= bits.RotateLeft64(k1*murmurC1, 31) * murmurC2
	h1 = (bits.RotateLeft64(h1, 27)+h2)*5 + 0x52dce729
	h2 ^= bits.RotateLeft64(k2*murmurC2, 33) * murmurC1
	h2 = (bits.RotateLeft64(h2, 31)+h1)*5 + 0x38495ab5
	return h1, h2
}

// murmurFinish mixes the tail (fewer than 16 bytes), followed by a byte 1 when appendOne, and
// finalizes a hash of length bytes in all.
func murmurFinish(h1, h2 uint64, tail string, appendOne bool, length uint64) (uint64, uint64) {
	var k1, k2 uint64
	for j := 0; j < len(tail); j++ {
		if j < 8 {
			k1 |= uint64(tail[j]) << (8 * j)
		} else {
			k2 |= uint64(tail[j]) << (8 * (j - 8))
		}
	}
	n := len(tail)
	if appendOne {
		if n < 8 {
			k1 |= 1 << (8 * n)
		} else {
			k2 |= 1 << (8 * (n - 8))
		}
		n++
	}
	if n == 16 { // the appended byte completed a block
		h1, h2 = murmurBlock(h1, h2, k1, k2)
		n = 0
	}
	if n > 8 {
		h2 ^= bits.RotateLeft64(k2*murmurC2, 33) * murmurC1
	}
	if n > 0 {
		h1 ^= bits.RotateLeft64(k1*murmurC1, 31) * murmurC2
	}
	h1 ^= length
	h2 ^= length
	h1 += h2
	h2 += h1
	h1, h2 = fmix64(h1), fmix64(h2)
	h1 += h2
	h2 += h1
	return h1, h2
}

// fmix64 is MurmurHash3's finalizer: it makes every input bit affect every output bit.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// PartitionOf is the partition of a filter of partitions partitions that key belongs to. Its hash
// is FNV-1a finished by Mix, and so independent of the bit positions, which come from murmur3:
// the keys of one partition are spread over its bits as any keys are.
func PartitionOf(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	hi, _ := bits.Mul64(Mix(h.Sum64()), uint64(partitions))
	return int(hi)
}

// Mix is splitmix64's finalizer: FNV's low bits, and its output for inputs that differ in their
// last bytes, are poorly spread until mixed. A key's partition and every rendezvous order of the
// data plane (a filter's home, a partition's owners) finish their FNV hashes with it.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
