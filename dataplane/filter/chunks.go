package filter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// A filter's bits can be read and loaded a byte range of one layer at a time, for dumps that are
// taken and loaded in chunks (RedisBloom's BF.SCANDUMP and BF.LOADCHUNK): a layer's bytes are
// its words' little-endian bytes, bit x being bit x%8 of byte x/8, which is RedisBloom's layout
// too. Layers are numbered across the partitions in AllLayers' order by readers, and by
// partition and index in a partition by a Load, which a pod holding some partitions only applies.

// ErrNoSuchLayer refuses a chunk whose layer the filter does not have (or this pod does not hold).
var ErrNoSuchLayer = errors.New("no such layer")

// layerAt is the partition holding layer i in AllLayers' order, and its index there; nil when
// the filter has no such layer or this pod does not hold every partition.
func (f *Filter) layerAt(i int) (*partition, int) {
	if i < 0 {
		return nil, 0
	}
	for _, p := range f.partList() {
		if p == nil {
			return nil, 0
		}
		p.mu.RLock()
		n := len(p.layers)
		p.mu.RUnlock()
		if i < n {
			return p, i
		}
		i -= n
	}
	return nil, 0
}

// ViewLayerBytes hands view the bytes of layer i from offset, at most n of them: fewer at the
// layer's end, none past it. view runs under the partition's read lock, which writers wait for,
// on the layer's own memory, so that a chunk of a dump is copied once, where it goes: view
// copies what it keeps and does not block. ErrNoSuchLayer when there is no layer i.
func (f *Filter) ViewLayerBytes(i int, offset uint64, n int, view func([]byte)) error {
	p, j := f.layerAt(i)
	if p == nil {
		return fmt.Errorf("%w: filter %q has no layer %d here", ErrNoSuchLayer, f.name, i)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	b := wordBytes(p.layers[j].BitSet().Words())
	offset = min(offset, uint64(len(b)))
	view(b[offset:][:min(uint64(n), uint64(len(b))-offset)])
	return nil
}

// Load is one piece of a dump loaded into a filter, a write of its own that is journaled and
// replicated as adds are: either the dump's head (Head set), which adds the layers the filter
// lacks, empty, raises its item counts to the dump's and starts tracking the load's progress
// (LoadProgress), or Bytes ORed into layer Layer of partition Partition from byte Offset. Bits
// are only ever set, so pieces apply in any order, twice, or beside adds, to the same bits.
type Load struct {
	// Head is each partition's layer count and item counts, as the dump's head says.
	Head []LoadHead `json:"head,omitempty"`
	// Partition, Layer, Offset and Bytes are a piece of bits.
	Partition int    `json:"partition,omitempty"`
	Layer     int    `json:"layer,omitempty"`
	Offset    uint64 `json:"offset,omitempty"`
	Bytes     []byte `json:"bytes,omitempty"`
}

// LoadHead is one partition's share of a dump's head.
type LoadHead struct {
	Layers      int    `json:"layers"`
	Items       uint64 `json:"items"`
	NewestItems uint64 `json:"newestItems"`
}

// LoadHeadOf is the head of st as a Load.
func LoadHeadOf(st State) Load {
	l := Load{Head: make([]LoadHead, len(st.Parts))}
	for i, p := range st.Parts {
		l.Head[i] = LoadHead{Layers: len(p.Layers), Items: p.Items, NewestItems: p.NewestItems}
	}
	return l
}

// ErrMalformedLoad refuses a Load's binary form that does not decode.
var ErrMalformedLoad = errors.New("malformed load")

// Binary form of a Load, in the log and between pods: a byte, 1 for a head and 2 for bytes; a
// head is then a uvarint count of partitions and, for each, its layers, items and newest layer's
// items as uvarints; bytes are the partition, layer and offset as uvarints, then the bytes'
// count as a uvarint and the bytes.
const (
	loadHead  = 1
	loadBytes = 2
)

// AppendBinary appends l's binary form to dst.
func (l Load) AppendBinary(dst []byte) []byte {
	if l.Head != nil {
		dst = append(dst, loadHead)
		dst = binary.AppendUvarint(dst, uint64(len(l.Head)))
		for _, h := range l.Head {
			dst = binary.AppendUvarint(dst, uint64(h.Layers))
			dst = binary.AppendUvarint(dst, h.Items)
			dst = binary.AppendUvarint(dst, h.NewestItems)
		}
		return dst
	}
	dst = append(dst, loadBytes)
	dst = binary.AppendUvarint(dst, uint64(l.Partition))
	dst = binary.AppendUvarint(dst, uint64(l.Layer))
	dst = binary.AppendUvarint(dst, l.Offset)
	dst = binary.AppendUvarint(dst, uint64(len(l.Bytes)))
	return append(dst, l.Bytes...)
}

// DecodeLoad reads a Load's binary form from the start of b and answers how many bytes it took.
// Its Bytes are b's, not a copy. Counts past the filter limits (MaxPartitions, MaxLayers) and
// lengths past b's end are refused before anything is allocated for them.
func DecodeLoad(b []byte) (Load, int, error) {
	var l Load
	at := 0
	fail := func(format string, args ...any) (Load, int, error) {
		return Load{}, 0, fmt.Errorf("%w at byte %d: %s", ErrMalformedLoad, at, fmt.Sprintf(format, args...))
	}
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b[at:])
		if n <= 0 {
			return 0, false
		}
		at += n
		return v, true
	}
	if len(b) == 0 {
		return fail("empty")
	}
	kind := b[0]
	at++
	switch kind {
	case loadHead:
		n, ok := uvarint()
		if !ok || n == 0 || n > MaxPartitions {
			return fail("a head of %d partitions, want 1 to %d", n, MaxPartitions)
		}
		l.Head = make([]LoadHead, n)
		for i := range l.Head {
			layers, ok1 := uvarint()
			items, ok2 := uvarint()
			newest, ok3 := uvarint()
			if !ok1 || !ok2 || !ok3 || layers > MaxLayers {
				return fail("partition %d: not three varints, or more than %d layers", i, MaxLayers)
			}
			l.Head[i] = LoadHead{Layers: int(layers), Items: items, NewestItems: newest}
		}
	case loadBytes:
		partition, ok1 := uvarint()
		layer, ok2 := uvarint()
		offset, ok3 := uvarint()
		size, ok4 := uvarint()
		if !ok1 || !ok2 || !ok3 || !ok4 || partition >= MaxPartitions || layer >= MaxLayers {
			return fail("not four varints, or partition %d or layer %d out of range", partition, layer)
		}
		if size > uint64(len(b)-at) {
			return fail("%d bytes declared, %d left", size, len(b)-at)
		}
		l.Partition, l.Layer, l.Offset, l.Bytes = int(partition), int(layer), offset, b[at:at+int(size)]
		at += int(size)
	default:
		return fail("kind %d, want %d (head) or %d (bytes)", kind, loadHead, loadBytes)
	}
	return l, at, nil
}

// Load applies a piece of a dump to f, journaled first as adds are: what the journal cannot
// record is not applied. Pieces that do not fit f (a layer it cannot have, bytes past a layer's
// end or setting bits past its m) are refused with ErrInvalidOptions before anything is
// journaled; a piece of a partition this pod does not hold with ErrNotHeld.
func (f *Filter) Load(l Load) error {
	if err := f.checkLoad(l); err != nil {
		return err
	}
	if j := f.store.currentJournal(); j != nil {
		if err := j.Loaded(f.name, f.Generation(), l); err != nil {
			return err
		}
		defer j.Applied()
	}
	return f.applyLoad(l, false)
}

// ReplayLoad applies a piece read back from a journal, without journaling it again; a piece of
// a partition given up since is skipped.
func (f *Filter) ReplayLoad(l Load) error {
	if err := f.checkLoad(l); err != nil {
		return err
	}
	return f.applyLoad(l, true)
}

// checkLoad refuses a piece that cannot apply to f.
func (f *Filter) checkLoad(l Load) error {
	if l.Head != nil {
		if len(l.Head) != f.opts.PartitionCount() {
			return fmt.Errorf("%w: a head of %d partitions for %q, of %d", ErrInvalidOptions, len(l.Head), f.name, f.opts.PartitionCount())
		}
		for i, h := range l.Head {
			part := PartState{Items: h.Items, NewestItems: h.NewestItems, Layers: make([]LayerState, h.Layers)}
			if h.Layers > 1 && !f.opts.Scalable || h.Layers > MaxLayers {
				return fmt.Errorf("%w: %d layers in partition %d of %q", ErrInvalidOptions, h.Layers, i, f.name)
			}
			if err := part.validateCounts(f.opts); err != nil {
				return fmt.Errorf("%w: partition %d of %q: %w", ErrInvalidOptions, i, f.name, err)
			}
		}
		return nil
	}
	if l.Partition < 0 || l.Partition >= f.opts.PartitionCount() || l.Layer < 0 || l.Layer >= MaxLayers || l.Layer > 0 && !f.opts.Scalable {
		return fmt.Errorf("%w: %q has no layer %d of partition %d", ErrNoSuchLayer, f.name, l.Layer, l.Partition)
	}
	shape, err := f.opts.LayerShape(l.Layer)
	if err != nil {
		return err
	}
	size := (uint64(shape.Bits) + 63) / 64 * 8
	if l.Offset > size || uint64(len(l.Bytes)) > size-l.Offset {
		return fmt.Errorf("%w: %d bytes at %d do not fit layer %d of %q, of %d bytes", ErrInvalidOptions, len(l.Bytes), l.Offset, l.Layer, f.name, size)
	}
	if m := uint64(shape.Bits); m%64 != 0 {
		// Bits past m, in the last word, are set by no key and tested by none: a merge refuses them.
		valid := uint64(1)<<(m%64) - 1
		lastWord := size - 8
		for at := max(l.Offset, lastWord); at < l.Offset+uint64(len(l.Bytes)); at++ {
			if l.Bytes[at-l.Offset]&^byte(valid>>(8*(at-lastWord))) != 0 {
				return fmt.Errorf("%w: the chunk sets bits past layer %d's m=%d", ErrInvalidOptions, l.Layer, m)
			}
		}
	}
	return nil
}

// applyLoad applies a piece checkLoad accepted.
func (f *Filter) applyLoad(l Load, replay bool) error {
	if l.Head != nil {
		return f.loadHead(l.Head)
	}
	p := f.partList()[l.Partition]
	if p == nil {
		if replay {
			return nil
		}
		return fmt.Errorf("%w: filter %q partition %d", ErrNotHeld, f.name, l.Partition)
	}
	if err := p.orBytes(l.Layer, l.Offset, l.Bytes); err != nil {
		return err
	}
	if pr := f.loading.Load(); pr != nil && pr.loaded(l) {
		f.loading.CompareAndSwap(pr, nil)
	}
	return nil
}

// loadHead adds the layers the head lists that f lacks, raises its counts, and tracks the load
// of the held partitions' bytes.
func (f *Filter) loadHead(head []LoadHead) error {
	st := State{Name: f.name, Options: f.opts, Created: f.created, LastAccess: f.created, Parts: make([]PartState, len(head))}
	pr := &loadProgress{starts: make([][]uint64, len(head))}
	for i, h := range head {
		if !f.Holds(i) {
			continue // not held here: a merge would hold it
		}
		st.Parts[i] = PartState{Items: h.Items, NewestItems: h.NewestItems, Layers: make([]LayerState, h.Layers)}
		for j := range st.Parts[i].Layers {
			shape, err := f.opts.LayerShape(j)
			if err != nil {
				return err
			}
			st.Parts[i].Layers[j] = LayerState{Bits: shape.Bits, Hashes: shape.Hashes}
			pr.starts[i] = append(pr.starts[i], pr.total)
			pr.total += (uint64(shape.Bits) + 63) / 64 * 8
		}
	}
	if _, err := f.merge(st); err != nil {
		return err
	}
	if pr.total > 0 {
		f.loading.Store(pr)
	}
	return nil
}

// orBytes ORs src into layer i's bytes from offset, under p's write lock, adding the layers up
// to i that p lacks (empty: the piece came before its head, or its head is in a snapshot that
// did not hold the layers yet). Where the layer is known to be zero (zeroFrom) src is copied
// instead: ORing reads each page of a fresh layer before writing it, which faults the page in
// twice and took twice as long as a copy.
func (p *partition) orBytes(i int, offset uint64, src []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f.dropped || p.released {
		return nil
	}
	for len(p.layers) <= i {
		shape, err := p.f.opts.LayerShape(len(p.layers))
		if err != nil {
			return err
		}
		if err := p.addLayer(shape, nil); err != nil {
			return err
		}
	}
	words := p.layers[i].BitSet().Words()
	zeroFrom := p.zeroFrom(i, uint64(len(words))*8)
	var added uint64
	switch {
	case offset >= zeroFrom:
		dst := wordBytes(words)[offset:][:len(src)]
		populate(dst)
		added = copyCounting(dst, src)
	case offset%8 == 0 && len(src)%8 == 0:
		// Whole words, the case of every chunk of a layer's bytes taken from its start.
		added = orWordBytes(words[offset/8:][:len(src)/8], src)
	default:
		b := wordBytes(words)
		for k, v := range src {
			at := offset + uint64(k)
			added += uint64(bits.OnesCount8(v &^ b[at]))
			b[at] |= v
		}
	}
	p.ones[i] += added
	p.loaded = loadedTail{layer: i, zeroFrom: max(zeroFrom, offset+uint64(len(src))), ones: p.ones[i]}
	return nil
}

// loadedTail is what the last piece loaded into a partition (orBytes) leaves known of its layer:
// its bytes from zeroFrom on are zero while the layer's count of bits set is still ones. Every
// bit set in a layer, by an add, a merge or a load, is counted in ones, so a bit set elsewhere
// since voids it. A load writes a layer's bytes in order, from an empty layer: each piece then
// lands past the zeroFrom of the one before.
type loadedTail struct {
	layer          int
	zeroFrom, ones uint64
}

// zeroFrom is the offset from which layer i, of size bytes, is known to be zero: 0 when no bit
// of it is set, the last piece's end when only loads set bits in it since, size (nothing known)
// otherwise. The caller holds mu.
func (p *partition) zeroFrom(i int, size uint64) uint64 {
	switch t := p.loaded; {
	case p.ones[i] == 0:
		return 0
	case t.layer == i && t.ones == p.ones[i]:
		return t.zeroFrom
	default:
		return size
	}
}

// orWordBytes ORs src, little-endian words, into dst of as many words, and answers how many bits
// it set that were not.
func orWordBytes(dst []uint64, src []byte) uint64 {
	var added uint64
	for k := range dst {
		v := binary.LittleEndian.Uint64(src[8*k:])
		added += uint64(bits.OnesCount64(v &^ dst[k]))
		dst[k] |= v
	}
	return added
}

// copyCounting copies src into dst, as long, and answers how many bits it set, a block at a time:
// the block is counted while the copy left it in the cache. Counting the whole piece after the
// copy read it from memory again and took as long as the copy.
func copyCounting(dst, src []byte) uint64 {
	const block = 32 << 10
	var n uint64
	for len(src) > 0 {
		k := copy(dst, src[:min(block, len(src))])
		n += onesInBytes(src[:k])
		dst, src = dst[k:], src[k:]
	}
	return n
}

// onesInBytes counts the bits set in b, four words at a time into four sums, which the CPU adds
// up side by side.
func onesInBytes(b []byte) uint64 {
	var n0, n1, n2, n3 int
	for ; len(b) >= 32; b = b[32:] {
		n0 += bits.OnesCount64(binary.LittleEndian.Uint64(b[0:8]))
		n1 += bits.OnesCount64(binary.LittleEndian.Uint64(b[8:16]))
		n2 += bits.OnesCount64(binary.LittleEndian.Uint64(b[16:24]))
		n3 += bits.OnesCount64(binary.LittleEndian.Uint64(b[24:32]))
	}
	for _, v := range b {
		n0 += bits.OnesCount8(v)
	}
	return uint64(n0 + n1 + n2 + n3)
}

// loadProgress is which bytes of a load this pod applied, from its head on. The bytes of every
// held partition's layers are numbered in AllLayers' order; done are disjoint ranges
// [start, end) of them.
type loadProgress struct {
	mu     sync.Mutex
	total  uint64
	starts [][]uint64 // per partition, per layer: the number of its first byte
	done   [][2]uint64
}

// loaded records the bytes of l, and reports whether all are now loaded.
func (pr *loadProgress) loaded(l Load) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if l.Partition >= len(pr.starts) || l.Layer >= len(pr.starts[l.Partition]) || len(l.Bytes) == 0 {
		return false
	}
	start := pr.starts[l.Partition][l.Layer] + l.Offset
	end := start + uint64(len(l.Bytes))
	merged := make([][2]uint64, 0, len(pr.done)+1)
	for _, r := range pr.done {
		if r[1] < start || r[0] > end { // disjoint and not touching
			merged = append(merged, r)
			continue
		}
		start, end = min(start, r[0]), max(end, r[1])
	}
	merged = append(merged, [2]uint64{start, end})
	pr.done = merged
	return pr.sum() >= pr.total
}

func (pr *loadProgress) sum() uint64 {
	var n uint64
	for _, r := range pr.done {
		n += r[1] - r[0]
	}
	return n
}

// LoadProgress reports, while a load whose head this pod applied is not finished, how many of
// its bytes this pod holds of how many (loading true). A load ends when every byte was applied,
// or when bits merged from elsewhere (anti-entropy, a merge) changed the filter: its progress is
// then unknown, and the filter is served as it is. A restart keeps it only as far as the log
// replays the head and the pieces after it: a snapshot keeps the bits, not the progress.
func (f *Filter) LoadProgress() (done, total uint64, loading bool) {
	pr := f.loading.Load()
	if pr == nil {
		return 0, 0, false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.sum(), pr.total, true
}

// wordBytes views words as their little-endian bytes without copying: every platform the data
// plane is built for is little endian, as the persistence's files also assume.
func wordBytes(words []uint64) []byte {
	if len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}
