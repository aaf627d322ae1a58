package filter

import (
	"fmt"
	"math"
	"math/bits"
)

// Layout is how a filter hashes its keys to bits and sizes its layers. Two replicas, a dump and
// the filter it is loaded into, agree on the bits of a key only if they share the layout, so it
// is part of a filter's fixed definition, persisted and replicated with its options.
type Layout uint8

const (
	// LayoutBitsAndBlooms hashes as bits-and-blooms/bloom/v3 (MurmurHash3 x64-128, four hashes
	// combined in pairs) and sizes each layer with bloom.EstimateParameters: the layout of every
	// filter created before layouts existed, and of HTTP creates by default.
	LayoutBitsAndBlooms Layout = 0
	// LayoutRedisBloom hashes, sizes, grows and lays bits out as RedisBloom 2.x's Bloom filters
	// do (its BF.RESERVE with FORCE64 and NOROUND), so that its BF.SCANDUMP chunks load into the
	// filter's layers bit for bit, and the filter's dump loads into RedisBloom. See
	// redisBloomShape and redisBloomLocation.
	LayoutRedisBloom Layout = 1
)

// Names of the layouts in the HTTP API and descriptions.
const (
	LayoutNameBitsAndBlooms = "bitsandblooms"
	LayoutNameRedisBloom    = "redisbloom"
)

func (l Layout) String() string {
	switch l {
	case LayoutBitsAndBlooms:
		return LayoutNameBitsAndBlooms
	case LayoutRedisBloom:
		return LayoutNameRedisBloom
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseLayout reads a layout's name.
func ParseLayout(s string) (Layout, error) {
	switch s {
	case LayoutNameBitsAndBlooms:
		return LayoutBitsAndBlooms, nil
	case LayoutNameRedisBloom:
		return LayoutRedisBloom, nil
	}
	return 0, fmt.Errorf("%w: layout must be %q or %q, got %q", ErrInvalidOptions, LayoutNameBitsAndBlooms, LayoutNameRedisBloom, s)
}

// appendLocations appends the first k locations of key in this layout to dst: the i-th location
// does not depend on the layer in either layout, only its reduction modulo the layer's bits does.
func (l Layout) appendLocations(dst []uint64, key string, k uint) []uint64 {
	if l == LayoutRedisBloom {
		a, b := redisBloomHashes(key)
		for i := range k {
			dst = append(dst, redisBloomLocation(a, b, i))
		}
		return dst
	}
	return appendLocations(dst, key, k)
}

// fillLocations writes the first len(dst) locations of key in this layout into dst.
func (l Layout) fillLocations(dst []uint64, key string) {
	if l == LayoutRedisBloom {
		a, b := redisBloomHashes(key)
		for i := range dst {
			dst[i] = redisBloomLocation(a, b, uint(i))
		}
		return
	}
	h := baseHashes(key)
	for i := range dst {
		dst[i] = location(&h, uint(i))
	}
}

// RedisBloom's Bloom filters, as its public source and the bytes of its dumps describe them:
//
//   - a key's two hashes are MurmurHash64A of its bytes, a with the seed 0xc6a4a7935bd1e995 and b
//     with a as the seed ("64-bit hashing", the FORCE64 option every filter of RedisBloom 2.x
//     has); its i-th bit in a layer of m bits is (a + i·b) mod m, computed in 64 bits;
//   - bit x of a layer is bit x%8 of byte x/8 of the layer's bytes: the little-endian bytes of
//     our words;
//   - a layer for n entries at error e has bpe = −ln(e)/ln(2)² bits per entry and
//     ⌊n·bpe⌋ bits (NOROUND: no rounding to a power of two), rounded up to whole 64-bit words,
//     and ⌈ln(2)·bpe⌉ hashes; the modulus is the rounded count;
//   - a scaling filter's first layer holds capacity entries at error·0.5, each next one growth
//     times the entries of the one before at half its error; a non-scaling filter's one layer
//     holds capacity at error. A layer is added when the newest holds as many keys as entries.

const (
	redisBloomSeed       = 0xc6a4a7935bd1e995
	redisBloomLn2Squared = 0.480453013918201 // RedisBloom's own rounding of ln(2)², in its bpe
	redisBloomLn2        = 0.693147180559945 // and of ln(2), in its hashes
	redisBloomTightening = 0.5
)

// murmur64A is Austin Appleby's MurmurHash64A of key: 8-byte little-endian blocks, then the tail.
func murmur64A(key string, seed uint64) uint64 {
	const m, r = 0xc6a4a7935bd1e995, 47
	h := seed ^ uint64(len(key))*m
	blocks := len(key) / 8 * 8
	for i := 0; i < blocks; i += 8 {
		k := load64(key[i : i+8])
		k *= m
		k ^= k >> r
		k *= m
		h ^= k
		h *= m
	}
	if tail := key[blocks:]; len(tail) > 0 {
		for j := len(tail) - 1; j >= 0; j-- {
			h ^= uint64(tail[j]) << (8 * j)
		}
		h *= m
	}
	h ^= h >> r
	h *= m
	h ^= h >> r
	return h
}

// redisBloomHashes are RedisBloom's two 64-bit hashes of key.
func redisBloomHashes(key string) (a, b uint64) {
	a = murmur64A(key, redisBloomSeed)
	return a, murmur64A(key, a)
}

// redisBloomLocation is the i-th location of a key of hashes a and b, before the modulo.
func redisBloomLocation(a, b uint64, i uint) uint64 { return a + uint64(i)*b }

// RedisBloomBitsPerEntry is RedisBloom's bits per entry of a layer at error rate e.
func RedisBloomBitsPerEntry(e float64) float64 { return -(math.Log(e) / redisBloomLn2Squared) }

// RedisBloomLayerError is the error rate of layer i of a filter of these options, as RedisBloom
// computes it: halved once for the first layer of a scaling filter, then once per layer.
func (o Options) RedisBloomLayerError(i int) float64 {
	e := o.FPP
	if o.Scalable {
		for range i + 1 {
			e *= redisBloomTightening
		}
	}
	return e
}

// redisBloomShape is layer i's shape in LayoutRedisBloom.
func (o Options) redisBloomShape(i int) (LayerShape, error) {
	entries := o.Capacity
	if o.Scalable {
		for range i {
			hi, lo := bits.Mul64(entries, uint64(o.Growth))
			if hi != 0 || lo > math.MaxInt64 {
				return LayerShape{}, fmt.Errorf("%w: layer %d would hold more entries than a layer may", ErrTooLarge, i)
			}
			entries = lo
		}
	}
	e := o.RedisBloomLayerError(i)
	bpe := RedisBloomBitsPerEntry(e)
	exact := float64(entries) * bpe
	if e <= 0 || exact > maxLayerBits {
		return LayerShape{}, fmt.Errorf("%w: layer %d would need %s, more than the %s one layer may hold",
			ErrTooLarge, i, formatFloatBytes(exact/8), FormatBytes(maxLayerBits/8))
	}
	m := max(1, uint64(exact))
	m = (m + 63) / 64 * 64
	return LayerShape{Capacity: entries, Bits: uint(m), Hashes: uint(math.Ceil(redisBloomLn2 * bpe))}, nil
}
