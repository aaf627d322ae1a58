package filter

import (
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLoadBinaryRoundTrip(t *testing.T) {
	for _, l := range []Load{
		{Head: []LoadHead{{Layers: 3, Items: 7000, NewestItems: 4000}, {Layers: 0}}},
		{Partition: 3, Layer: 47, Offset: 1 << 40, Bytes: []byte{1, 2, 3}},
		{Bytes: []byte{}},
	} {
		b := append(l.AppendBinary([]byte("prefix")), "trailer"...)
		got, n, err := DecodeLoad(b[len("prefix"):])
		if err != nil || n != len(b)-len("prefix")-len("trailer") || !reflect.DeepEqual(got, l) {
			t.Errorf("%+v: decoded %+v, %d bytes, %v", l, got, n, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":           nil,
		"unknown kind":    {3},
		"no partitions":   {loadHead, 0},
		"a torn head":     {loadHead, 2, 1, 0, 0},
		"too many layers": {loadHead, 1, MaxLayers + 1, 0, 0},
		"bytes past end":  {loadBytes, 0, 0, 0, 5, 1, 2},
		"layer too high":  {loadBytes, 0, MaxLayers, 0, 0},
		"torn varint":     {loadBytes, 0x80},
	} {
		if _, _, err := DecodeLoad(b); !errors.Is(err, ErrMalformedLoad) {
			t.Errorf("%s: %v, want ErrMalformedLoad", name, err)
		}
	}
}

// A dump's head adds its layers and starts the load's progress; its bytes, ORed in any order and
// in pieces, make the loaded filter answer every key of the dumped one, and end the progress once
// all are loaded.
func TestLoadPiecesMakeTheDumpedFilter(t *testing.T) {
	opts := Options{Capacity: 100, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: LayoutRedisBloom}
	s := NewStore(Limits{}, nil)
	src, _, _ := s.Create("src", opts, false)
	keys := make([]string, 500) // three layers
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	if err := src.AddMany(keys); err != nil {
		t.Fatal(err)
	}
	st := src.State()
	dst, _, _ := s.Create("dst", opts, false)
	if err := dst.Load(LoadHeadOf(st)); err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, l := range st.AllLayers() {
		total += uint64(l.WordCount()) * 8
	}
	if done, all, loading := dst.LoadProgress(); !loading || done != 0 || all != total {
		t.Fatalf("after the head: %d of %d loaded, loading %t; want 0 of %d", done, all, loading, total)
	}
	if got := dst.Info().Items; got != src.Info().Items {
		t.Errorf("the head's items: %d, want %d", got, src.Info().Items)
	}
	layers := st.Parts[0].Layers
	for i, layer := range slices.Backward(layers) { // the last layer first, in two uneven pieces
		b := wordBytes(layer.Words)
		for _, piece := range [][2]int{{5, len(b)}, {0, 5}} {
			if err := dst.Load(Load{Layer: i, Offset: uint64(piece[0]), Bytes: b[piece[0]:piece[1]]}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, loading := dst.LoadProgress(); loading != (i > 0) {
			t.Errorf("layers %d and up loaded: loading %t", i, loading)
		}
	}
	for i, present := range dst.CheckMany(keys) {
		if !present {
			t.Fatalf("key %q answers false once loaded", keys[i])
		}
	}
	if !reflect.DeepEqual(dst.State().Parts, st.Parts) {
		t.Error("the loaded filter's bits differ from the dumped one's")
	}
}

func TestLoadRefusesPiecesThatDoNotFit(t *testing.T) {
	s := NewStore(Limits{}, nil)
	// RedisBloom's layers are whole words (m = 960 here); bits-and-blooms' need not be (m = 959).
	fixed, _, _ := s.Create("fixed", Options{Capacity: 100, FPP: 0.01, Layout: LayoutRedisBloom}, false)
	odd, _, _ := s.Create("odd", Options{Capacity: 100, FPP: 0.01}, false)
	shape, _ := odd.Options().LayerShape(0)
	size := int(shape.Bits+63) / 64 * 8
	for name, tc := range map[string]struct {
		f    *Filter
		l    Load
		want error
	}{
		"a second layer of a fixed filter": {fixed, Load{Layer: 1, Bytes: []byte{1}}, ErrNoSuchLayer},
		"a partition it lacks":             {fixed, Load{Partition: 1, Bytes: []byte{1}}, ErrNoSuchLayer},
		"past the layer's end":             {fixed, Load{Offset: 119, Bytes: []byte{1, 1}}, ErrInvalidOptions},
		"bits past m":                      {odd, Load{Offset: uint64(size - 1), Bytes: []byte{0x80}}, ErrInvalidOptions},
		"a head of two partitions":         {fixed, Load{Head: make([]LoadHead, 2)}, ErrInvalidOptions},
		"a head of two layers, fixed":      {fixed, Load{Head: []LoadHead{{Layers: 2}}}, ErrInvalidOptions},
		"more newest items than items":     {fixed, Load{Head: []LoadHead{{Layers: 1, Items: 1, NewestItems: 2}}}, ErrInvalidOptions},
	} {
		if err := tc.f.Load(tc.l); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if err := odd.Load(Load{Offset: uint64(size - 1), Bytes: []byte{0x7f}}); err != nil {
		t.Errorf("the last bits below m: %v", err)
	}
}

// A merge that brings bits ends a load's progress: a pod that missed a piece is repaired by
// anti-entropy, and would otherwise answer LOADING for good.
func TestMergeEndsALoad(t *testing.T) {
	opts := Options{Capacity: 100, FPP: 0.01, Layout: LayoutRedisBloom}
	s := NewStore(Limits{}, nil)
	src, _, _ := s.Create("src", opts, false)
	_ = src.Add("x")
	dst, _, _ := s.Create("dst", opts, false)
	if err := dst.Load(Load{Head: []LoadHead{{Layers: 1, Items: 1, NewestItems: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.MergeBits(src.State()); err != nil {
		t.Fatal(err)
	}
	if _, _, loading := dst.LoadProgress(); loading {
		t.Error("still loading after a merge brought the bits")
	}
}

// A load copies its pieces where the layer is known to be zero and ORs them elsewhere: into an
// empty filter, one that held keys before the head, or one that takes a key between two pieces,
// every key answers present and the count of bits set stays exact (the copy relies on it).
func TestLoadCopiesOnlyOverZeros(t *testing.T) {
	opts := Options{Capacity: 1000, FPP: 0.01, Layout: LayoutRedisBloom}
	s := NewStore(Limits{}, nil)
	src, _, _ := s.Create("src", opts, false)
	keys := make([]string, 800)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	if err := src.AddMany(keys); err != nil {
		t.Fatal(err)
	}
	st := src.State()
	b := wordBytes(st.Parts[0].Layers[0].Words)
	const piece = 64
	for _, tc := range []struct {
		name   string
		before []string // added before the head
		midway []string // added after the first piece
	}{
		{name: "empty"},
		{name: "holding keys", before: []string{"own-1", "own-2", "own-3"}},
		{name: "a key added midway", midway: []string{"own-4", "own-5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, _, err := s.Create(strings.ReplaceAll(tc.name, " ", "-"), opts, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := dst.AddMany(tc.before); err != nil {
				t.Fatal(err)
			}
			if err := dst.Load(LoadHeadOf(st)); err != nil {
				t.Fatal(err)
			}
			for at := 0; at < len(b); at += piece {
				if err := dst.Load(Load{Offset: uint64(at), Bytes: b[at:min(at+piece, len(b))]}); err != nil {
					t.Fatal(err)
				}
				if at == 0 {
					if err := dst.AddMany(tc.midway); err != nil {
						t.Fatal(err)
					}
				}
			}
			own := append(slices.Clone(tc.before), tc.midway...)
			for i, present := range dst.CheckMany(append(slices.Clone(keys), own...)) {
				if !present {
					t.Fatalf("key %d answers false once loaded", i)
				}
			}
			p := dst.partList()[0]
			if got, want := p.ones[0], countOnes(p.layers[0].BitSet().Words()); got != want {
				t.Errorf("%d bits counted as set, %d are", got, want)
			}
			if len(own) == 0 && !reflect.DeepEqual(dst.State().Parts, st.Parts) {
				t.Error("the loaded filter's bits differ from the dumped one's")
			}
		})
	}
}

// BenchmarkLoad loads a layer of 128 MiB in pieces of 10 MiB, as BF.LOADCHUNK does, into a new
// filter (copied: the layer is zero) or into the same filter again (ORed); MB/s are of the bytes
// loaded.
func BenchmarkLoad(b *testing.B) {
	opts := Options{Capacity: 112_000_000, FPP: 0.001, Layout: LayoutRedisBloom}
	shape, err := opts.LayerShape(0)
	if err != nil {
		b.Fatal(err)
	}
	size := int(shape.Bits+63) / 64 * 8
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 131)
	}
	data[size-1] = 0 // no bit past m
	head := Load{Head: []LoadHead{{Layers: 1, Items: 1, NewestItems: 1}}}
	load := func(f *Filter) {
		for at := 0; at < size; at += 10 << 20 {
			if err := f.Load(Load{Offset: uint64(at), Bytes: data[at:min(at+10<<20, size)]}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("new", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; b.Loop(); i++ {
			s := NewStore(Limits{}, nil)
			f, _, _ := s.Create("f", opts, false)
			if err := f.Load(head); err != nil {
				b.Fatal(err)
			}
			load(f)
			if _, _, err := s.Delete("f"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("again", func(b *testing.B) {
		f, _, _ := NewStore(Limits{}, nil).Create("f", opts, false)
		load(f)
		b.SetBytes(int64(size))
		for b.Loop() {
			load(f)
		}
	})
}

// populate maps pages without changing a byte of them, wherever the range starts and ends.
func TestPopulateKeepsTheBytes(t *testing.T) {
	words, release, err := allocWords(3 * 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b := wordBytes(words)
	for i := range b {
		b[i] = byte(i)
	}
	populate(b[3 : len(b)-5])
	populate(b[:1])
	for i, v := range b {
		if v != byte(i) {
			t.Fatalf("byte %d is %d, was %d", i, v, byte(i))
		}
	}
}

// copyCounting copies and counts pieces of any length, across its blocks.
func TestCopyCounting(t *testing.T) {
	src := make([]byte, 100_003)
	for i := range src {
		src[i] = byte(i * 131)
	}
	for _, n := range []int{0, 1, 31, 32, 33, 32 << 10, 32<<10 + 7, len(src)} {
		dst := make([]byte, n)
		var want uint64
		for _, v := range src[:n] {
			want += uint64(bits.OnesCount8(v))
		}
		if got := copyCounting(dst, src[:n]); got != want || !slices.Equal(dst, src[:n]) {
			t.Errorf("%d bytes: counted %d, want %d; copied alike %t", n, got, want, slices.Equal(dst, src[:n]))
		}
	}
}

// ViewLayerBytes hands the layer's own bytes, fewer at its end and none past it.
func TestViewLayerBytes(t *testing.T) {
	f, _, err := NewStore(Limits{}, nil).Create("f", Options{Capacity: 100, FPP: 0.01, Layout: LayoutRedisBloom}, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Add("x")
	want := wordBytes(f.State().Parts[0].Layers[0].Words)
	for _, tc := range []struct {
		offset    uint64
		n, length int
	}{{0, 16, 16}, {8, len(want), len(want) - 8}, {uint64(len(want)), 8, 0}, {uint64(len(want)) + 8, 8, 0}} {
		var got []byte
		if err := f.ViewLayerBytes(0, tc.offset, tc.n, func(b []byte) { got = slices.Clone(b) }); err != nil {
			t.Fatal(err)
		}
		at := min(tc.offset, uint64(len(want)))
		if len(got) != tc.length || !slices.Equal(got, want[at:at+uint64(len(got))]) {
			t.Errorf("%d bytes at %d: %d bytes, want the layer's %d", tc.n, tc.offset, len(got), tc.length)
		}
	}
	if err := f.ViewLayerBytes(1, 0, 8, func([]byte) {}); !errors.Is(err, ErrNoSuchLayer) {
		t.Errorf("layer 1: %v, want ErrNoSuchLayer", err)
	}
}
