package filter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// Defaults of a scalable filter, as in bloomd and RedisBloom.
const (
	DefaultGrowth     = 2
	DefaultTightening = 0.5
)

// MaxGrowth bounds Growth: RedisBloom's largest expansion. A layer past the memory limits is
// refused when the filter would grow into it, whatever the growth.
const MaxGrowth = 32768

// MaxLayers bounds how far a scalable filter may grow. Each layer doubles (by default) the
// capacity of the one before, so 48 layers is far beyond any memory a machine has; the bound only
// keeps error rates of deep layers away from float underflow.
const MaxLayers = 48

// MaxHashes bounds the hash functions of one layer, and so the work of every check and set of a
// key: each halves the false positive rate, so 64 reach about 5e-20, and more would make every
// request pay for a rate no one can observe.
const MaxHashes = 64

// checkHashes refuses a layer whose shape needs more than MaxHashes hash functions. It guards new
// layers only: a layer that exists keeps serving whatever its shape.
func checkHashes(i int, shape LayerShape) error {
	if shape.Hashes <= MaxHashes {
		return nil
	}
	return fmt.Errorf("layer %d would need %d hash functions per key, more than the %d a layer may use", i, shape.Hashes, MaxHashes)
}

// maxLayerBits bounds one layer before anything is allocated: 2^40 bits is 128 GiB.
const maxLayerBits = 1 << 40

// Options define a filter. The shape-defining fields (Capacity, FPP, Scalable, Growth,
// Tightening) never change after creation.
type Options struct {
	// Capacity is the number of items the first layer holds at rate FPP (filter-service's
	// expectedInsertions).
	Capacity uint64
	// FPP is the false positive probability the filter keeps while it holds no more items
	// than it was sized for; a scalable filter keeps it at any size.
	FPP float64
	// Scalable filters add a layer when the newest is full; fixed filters have one layer whose
	// error rate rises past Capacity.
	Scalable bool
	// Growth is the capacity factor from one layer to the next (s); used when Scalable.
	Growth uint
	// Tightening is the error factor from one layer to the next (r); used when Scalable.
	Tightening float64
	// ValidAfterCreate expires the filter this long after creation; 0 means never.
	ValidAfterCreate time.Duration
	// ValidAfterAccess expires the filter this long after the last check or set; 0 means no
	// sliding expiry. When set it governs expiry and ValidAfterCreate is ignored, as in
	// filter-service.
	ValidAfterAccess time.Duration
	// Partitions splits the filter's keys by a hash of the key (PartitionOf) into that
	// many partitions, each a filter of ⌈Capacity/Partitions⌉ keys at FPP; 0 and 1 both mean one.
	Partitions uint32
	// Layout is how keys are hashed and layers sized (see Layout); the zero value is the layout
	// of every filter made before there were others.
	Layout Layout
	// Owner is who made the filter, as its creator chose to say (the operator: its BloomFilter's
	// UID), so that the filter can be told apart from one of the same name made by someone else;
	// the zero value is no one. The engine never reads it.
	Owner OwnerID
}

// OwnerID is a filter's Owner: a UUID, in its 16 bytes.
type OwnerID [16]byte

// IsZero reports whether the ID names no owner.
func (id OwnerID) IsZero() bool { return id == OwnerID{} }

// MaxPartitions bounds the partitions of one filter: enough to spread a filter over many pods
// many times over, few enough that a multi-key request's split stays cheap.
const MaxPartitions = 1024

// PartitionCount is how many partitions the filter has: Partitions, or 1 when it is 0.
func (o Options) PartitionCount() int { return max(1, int(o.Partitions)) }

// Binary encoding sizes: OptionsBinarySize bytes hold the options of a filter of one partition
// and no owner, and tell whether optionsPartitionsSize and optionsOwnerSize more follow; no
// encoding is longer than OptionsBinaryMaxLen.
const (
	OptionsBinarySize     = 8 + 8 + 1 + 8 + 8 + 8 + 8
	optionsPartitionsSize = 4
	optionsOwnerSize      = len(OwnerID{})
	OptionsBinaryMaxLen   = OptionsBinarySize + optionsPartitionsSize + optionsOwnerSize
	// flagScalable, flagPartitioned, flagRedisBloom and flagOwned are the bits of the options'
	// flags byte.
	flagScalable    = 1
	flagPartitioned = 2
	flagRedisBloom  = 4
	flagOwned       = 8
	knownFlags      = flagScalable | flagPartitioned | flagRedisBloom | flagOwned
)

// OptionsBinaryLen is the length of the encoding whose first OptionsBinarySize bytes are head.
func OptionsBinaryLen(head []byte) int {
	n := OptionsBinarySize
	if len(head) <= 16 {
		return n
	}
	if head[16]&flagPartitioned != 0 {
		n += optionsPartitionsSize
	}
	if head[16]&flagOwned != 0 {
		n += optionsOwnerSize
	}
	return n
}

// AppendBinary appends the binary encoding of the options, which snapshots, the log and the
// batches replicated to peers share: a change of it is a change of all three formats. Capacity,
// FPP (float64 bits), a flags byte (flagScalable, flagPartitioned, flagRedisBloom, flagOwned),
// Growth, Tightening (float64 bits), ValidAfterCreate and ValidAfterAccess (nanoseconds), each in
// 8 bytes, little endian, but the flags; then, for a filter of more than one partition only,
// Partitions in 4 bytes; then, for a filter with an owner only, its 16 bytes. Files written before
// partitions existed read as filters of one partition, those written before layouts existed as
// LayoutBitsAndBlooms (no flagRedisBloom), and those written before owners existed as filters of
// no owner; a version without a flag refuses options that have it as unknown flags rather than
// read them as something else. It never fails.
func (o Options) AppendBinary(b []byte) ([]byte, error) {
	var flags byte
	if o.Scalable {
		flags |= flagScalable
	}
	if o.Partitions > 1 {
		flags |= flagPartitioned
	}
	if o.Layout == LayoutRedisBloom {
		flags |= flagRedisBloom
	}
	if !o.Owner.IsZero() {
		flags |= flagOwned
	}
	b = binary.LittleEndian.AppendUint64(b, o.Capacity)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.FPP))
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.Growth))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.Tightening))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.ValidAfterCreate))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.ValidAfterAccess))
	if o.Partitions > 1 {
		b = binary.LittleEndian.AppendUint32(b, o.Partitions)
	}
	if !o.Owner.IsZero() {
		b = append(b, o.Owner[:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes what AppendBinary encoded, exactly OptionsBinaryLen bytes. It checks
// the encoding only; Validate checks the values.
func (o *Options) UnmarshalBinary(b []byte) error {
	if len(b) < OptionsBinarySize || len(b) != OptionsBinaryLen(b) {
		return fmt.Errorf("options take %d bytes, got %d", OptionsBinaryLen(b), len(b))
	}
	u64 := func(at int) uint64 { return binary.LittleEndian.Uint64(b[at:]) }
	if flags := b[16]; flags&^knownFlags != 0 {
		return fmt.Errorf("options flags %#x has unknown bits", flags)
	}
	if growth := u64(17); growth > math.MaxUint32 {
		return fmt.Errorf("growth %d out of range", growth)
	}
	*o = Options{
		Capacity:         u64(0),
		FPP:              math.Float64frombits(u64(8)),
		Scalable:         b[16]&flagScalable != 0,
		Growth:           uint(u64(17)),
		Tightening:       math.Float64frombits(u64(25)),
		ValidAfterCreate: time.Duration(u64(33)),
		ValidAfterAccess: time.Duration(u64(41)),
	}
	if b[16]&flagRedisBloom != 0 {
		o.Layout = LayoutRedisBloom
	}
	rest := b[OptionsBinarySize:]
	if b[16]&flagPartitioned != 0 {
		if o.Partitions = binary.LittleEndian.Uint32(rest); o.Partitions < 2 {
			return fmt.Errorf("partitions %d flagged on options of one partition", o.Partitions)
		}
		rest = rest[optionsPartitionsSize:]
	}
	if b[16]&flagOwned != 0 {
		if o.Owner = OwnerID(rest); o.Owner.IsZero() {
			return errors.New("an owner of zeros flagged on options")
		}
	}
	return nil
}

// ErrInvalidOptions wraps every validation failure of Options.
var ErrInvalidOptions = errors.New("invalid filter options")

// Validate reports the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.Capacity == 0:
		return fmt.Errorf("%w: capacity must be > 0", ErrInvalidOptions)
	case !(o.FPP > 0 && o.FPP < 1):
		return fmt.Errorf("%w: fpp must be > 0 and < 1, got %v", ErrInvalidOptions, o.FPP)
	case o.ValidAfterCreate < 0 || o.ValidAfterAccess < 0:
		return fmt.Errorf("%w: validity periods must not be negative", ErrInvalidOptions)
	case o.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions must be between 1 and %d, got %d", ErrInvalidOptions, MaxPartitions, o.Partitions)
	case o.Layout > LayoutRedisBloom:
		return fmt.Errorf("%w: unknown layout %d", ErrInvalidOptions, o.Layout)
	case o.Layout == LayoutRedisBloom && o.Partitions > 1:
		// RedisBloom's filter is one chain of layers: its dump has no place for partitions.
		return fmt.Errorf("%w: a filter of layout %s has one partition, got %d", ErrInvalidOptions, o.Layout, o.Partitions)
	case o.Layout == LayoutRedisBloom && o.Scalable && o.Tightening != redisBloomTightening:
		return fmt.Errorf("%w: a filter of layout %s tightens by %v, got %v", ErrInvalidOptions, o.Layout, redisBloomTightening, o.Tightening)
	}
	if o.Scalable {
		if o.Growth < 1 || o.Growth > MaxGrowth {
			return fmt.Errorf("%w: growth must be between 1 and %d, got %d", ErrInvalidOptions, MaxGrowth, o.Growth)
		}
		if !(o.Tightening > 0 && o.Tightening < 1) {
			return fmt.Errorf("%w: tightening must be > 0 and < 1, got %v", ErrInvalidOptions, o.Tightening)
		}
	}
	if _, err := o.LayerShape(0); err != nil {
		return err
	}
	return nil
}

// smallestFPP is the smallest fpp whose first layer needs no more than MaxHashes hash functions.
func (o Options) smallestFPP() float64 {
	p := math.Exp2(-MaxHashes)
	if o.Scalable {
		p /= 1 - o.Tightening // the first layer's rate is fpp·(1−r)
	}
	return p
}

// LayerShape is a layer's capacity and its bloom parameters (m bits, k hashes).
type LayerShape struct {
	Capacity uint64
	Bits     uint
	Hashes   uint
}

// SizeBytes is the memory the layer's bit array takes.
func (l LayerShape) SizeBytes() uint64 { return uint64((l.Bits+63)/64) * 8 }

// LayerShape is the shape of layer i of every partition. It is a pure function of the
// shape-defining options and the index, so two replicas that grew independently hold layers of
// identical shape, which makes them mergeable with OR. A partition holds ⌈Capacity/Partitions⌉
// keys at FPP: a key is tested in its partition only, so the filter's rate is the partitions'.
//
// A filter of LayoutRedisBloom has RedisBloom's shapes instead (redisBloomShape).
func (o Options) LayerShape(i int) (LayerShape, error) {
	if o.Layout == LayoutRedisBloom {
		return o.redisBloomShape(i)
	}
	capacity, fpp := float64(o.partitionCapacity()), o.FPP
	if o.Scalable {
		// p0 = p·(1−r) and p_i = p0·r^i: the compound error of all layers stays under p.
		capacity *= math.Pow(float64(o.Growth), float64(i))
		fpp = o.FPP * (1 - o.Tightening) * math.Pow(o.Tightening, float64(i))
	}
	bits := -capacity * math.Log(fpp) / (math.Ln2 * math.Ln2)
	if fpp <= 0 || bits > maxLayerBits || capacity > math.MaxInt64 {
		return LayerShape{}, fmt.Errorf("%w: layer %d would need %s, more than the %s one layer may hold",
			ErrTooLarge, i, formatFloatBytes(bits/8), FormatBytes(maxLayerBits/8))
	}
	m, k := bloom.EstimateParameters(uint(capacity), fpp)
	return LayerShape{Capacity: uint64(capacity), Bits: m, Hashes: k}, nil
}

// partitionCapacity is the first layer's capacity of one partition: ⌈Capacity/Partitions⌉.
func (o Options) partitionCapacity() uint64 {
	p := uint64(o.PartitionCount())
	return o.Capacity/p + min(1, o.Capacity%p)
}

// AutoPartitions is the fewest partitions, a power of two, whose partitions' first layers fit
// maxPartitionBytes (0: no limit), or MaxPartitions when none do; always one for a layout that
// has no partitions.
func (o Options) AutoPartitions(maxPartitionBytes uint64) uint32 {
	p := uint32(1)
	if o.Layout == LayoutRedisBloom {
		return p
	}
	for ; p < MaxPartitions && maxPartitionBytes > 0; p *= 2 {
		o.Partitions = p
		if shape, err := o.LayerShape(0); err == nil && shape.SizeBytes() <= maxPartitionBytes {
			break
		}
	}
	return p
}

// formatFloatBytes writes sizes that may not fit in an integer.
func formatFloatBytes(n float64) string {
	if n < math.MaxInt64 {
		return FormatBytes(uint64(n))
	}
	return fmt.Sprintf("%.3g bytes", n)
}
