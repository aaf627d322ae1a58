package resp

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// headerSeeds are headers of every kind: RedisBloom's, scaling and not, of one layer and of
// several, and Bloomery's own of a partitioned filter.
func headerSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, o := range []filter.Options{
		{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Layout: filter.LayoutRedisBloom},
		{Capacity: 100, FPP: 0.01, Scalable: true, Growth: 4, Tightening: 0.5, Layout: filter.LayoutRedisBloom},
		{Capacity: 200, FPP: 0.0001, Growth: 2, Layout: filter.LayoutRedisBloom},
		{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Partitions: 4},
	} {
		st, err := filter.EmptyState("k", o, time.Unix(0, 0))
		if err != nil {
			tb.Fatal(err)
		}
		if o.Scalable && o.Layout == filter.LayoutRedisBloom { // a second layer, the first full
			shape, _ := o.LayerShape(1)
			first, _ := o.LayerShape(0)
			st.Parts[0].Layers = append(st.Parts[0].Layers, filter.LayerState{Bits: shape.Bits, Hashes: shape.Hashes})
			st.Parts[0].Items, st.Parts[0].NewestItems = first.Capacity+3, 3
		}
		out = append(out, encodeHeader(st))
	}
	return out
}

// A header decodes to the state it was encoded from.
func TestHeaderRoundTrip(t *testing.T) {
	for i, b := range headerSeeds(t) {
		st, err := decodeHeader("k", b)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if again := encodeHeader(st); !bytes.Equal(again, b) {
			t.Errorf("seed %d: encodes back as %x, want %x", i, again, b)
		}
	}
}

// A dump leaves the filter's owner behind: the filter it is loaded into is someone else's.
func TestHeaderLeavesTheOwnerOut(t *testing.T) {
	o := filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5, Owner: filter.OwnerID{1, 15: 2}}
	st, err := filter.EmptyState("k", o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeHeader("k", encodeHeader(st))
	if err != nil {
		t.Fatal(err)
	}
	o.Owner = filter.OwnerID{}
	if back.Options != o {
		t.Errorf("the dump's options decode as %+v, want %+v: the owner left out", back.Options, o)
	}
}

// Headers RedisBloom would refuse, or that describe layers other than their options define, are
// refused before anything is created.
func TestHeaderRefusals(t *testing.T) {
	good := headerSeeds(t)[0]
	mutate := func(at int, v byte) []byte {
		b := bytes.Clone(good)
		b[at] = v
		return b
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"short":             good[:chainHeaderSize],
		"long":              append(bytes.Clone(good), 0),
		"no layers":         mutate(8, 0),
		"32-bit hashes":     mutate(12, optNoRound),
		"unknown option":    mutate(12, 0x25),
		"size not the sum":  mutate(0, 1),
		"bits of a layer":   mutate(chainHeaderSize+8, 1),
		"hashes of a layer": mutate(chainHeaderSize+40, 3),
		"power of two":      mutate(chainHeaderSize+52, 10),
		"bloomery flag":     mutate(14, 1),
		"older layer short": mutate(chainHeaderSize+16, 0xe7),
	} {
		if st, err := decodeHeader("k", b); err == nil {
			t.Errorf("%s: decoded as %+v, want an error", name, st)
		}
	}
}

// FuzzLoadChunk loads a header, then a data chunk, both arbitrary, through BF.LOADCHUNK: nothing
// panics, each answers one reply, and a header that loads encodes back to one that decodes to
// the same filter, whose dump answers one reply per chunk.
func FuzzLoadChunk(f *testing.F) {
	for _, h := range headerSeeds(f) {
		f.Add(h, int64(1+8), []byte("\xff\x00\x01\x02\x03\x04\x05\x06"))
		f.Add(h, int64(1<<20), []byte{})
	}
	s := newTestServer(f)
	n := 0
	f.Fuzz(func(t *testing.T, header []byte, iter int64, chunk []byte) {
		n++
		key := "fuzz" + strconv.Itoa(n)
		run := func(args ...[]byte) []byte {
			w := redcon.NewWriter(nil)
			s.Dispatch(t.Context(), &session{}, w, args)
			out := w.Buffer()
			if got, err := readReply(out); err != nil || got != len(out) {
				t.Fatalf("%q answered %q (%v)", args[0], out, err)
			}
			return out
		}
		run([]byte("BF.LOADCHUNK"), []byte(key), []byte("1"), header)
		run([]byte("BF.LOADCHUNK"), []byte(key), []byte(strconv.FormatInt(iter, 10)), chunk)
		st, err := decodeHeader(key, header)
		if err != nil {
			return
		}
		again, err := decodeHeader(key, encodeHeader(st))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(st) {
			t.Fatalf("header %x decodes as %+v, its encoding as %+v (%v)", header, st, again, err)
		}
		for it := int64(0); ; {
			out := run([]byte("BF.SCANDUMP"), []byte(key), []byte(strconv.FormatInt(it, 10)))
			if out[0] != '*' {
				return // the filter was not created: too large for the test's store
			}
			next, err := strconv.ParseInt(string(out[bytes.Index(out, []byte(":"))+1:bytes.Index(out, []byte("\r\n$"))]), 10, 64)
			if err != nil || next == 0 {
				break
			}
			it = next
		}
		_, _, _ = s.opts.Store.Delete(key)
	})
}
