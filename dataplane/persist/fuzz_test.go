package persist

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// The decoders must return an error, never panic and never allocate beyond the input, on any
// bytes. `make test` runs these briefly; `make fuzz` runs them longer.

func FuzzSnapshot(f *testing.F) {
	st, _ := filter.EmptyState("seed", filter.Options{Capacity: 10, FPP: 0.1, Scalable: true, Growth: 2, Tightening: 0.5}, time.Unix(1, 0))
	var seed bytes.Buffer
	seed.Write(appendRecord(nil, encodeHeader(snapshotHeader{Taken: time.Unix(2, 0), FirstSegment: 3})))
	st.Parts[0].Layers[0].Words = make([]uint64, st.Parts[0].Layers[0].WordCount())
	seed.Write(appendRecord(nil, encodeExpiry("seed", st.Created.UnixNano(), filter.Expiry{Mode: filter.ExpiryNever, Stamp: 9, Origin: "a"})))
	seed.Write(appendRecord(nil, append(encodeFilterHead(st), wordBytes(st.Parts[0].Layers[0].Words)...)))
	split, _ := filter.EmptyState("split", filter.Options{Capacity: 10, FPP: 0.1, Partitions: 3}, time.Unix(1, 0))
	record := encodeFilterHead(split)
	for _, l := range split.AllLayers() {
		record = append(record, wordBytes(make([]uint64, l.WordCount()))...)
	}
	seed.Write(appendRecord(nil, record))
	f.Add(seed.Bytes())
	f.Add(seed.Bytes()[:20])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Whatever was accepted must be restorable.
		store := filter.NewStore(filter.Limits{}, nil)
		if _, err := decodeSnapshot(bytes.NewReader(data), int64(len(data)), keepAll, store.RestoreFilling); err != nil {
			t.Errorf("an accepted filter cannot be restored: %v", err)
		}
	})
}

func FuzzLog(f *testing.F) {
	var seed []byte
	seed = appendRecord(seed, encodeCreate("f", filter.Options{Capacity: 10, FPP: 0.1}, time.Unix(1, 0), nil))
	seed = appendRecord(seed, encodeCreate("g", filter.Options{Capacity: 10, FPP: 0.1, Partitions: 9}, time.Unix(1, 0), []bool{true, false, false, true, false, false, false, false, true}))
	seed = appendRecord(seed, appendAdd(nil, "f", []string{"a", "", "日本"}))
	seed = appendRecord(seed, encodeAccess("f", time.Unix(5, 0)))
	seed = appendRecord(seed, encodeExpiry("f", 1e9, filter.Expiry{Mode: filter.ExpiryAt, At: time.Unix(60, 0), Stamp: 6, Origin: "pod-0"}))
	seed = appendRecord(seed, encodeLoad("f", 1e9, filter.Load{Head: []filter.LoadHead{{Layers: 1, Items: 3, NewestItems: 3}}}))
	seed = appendRecord(seed, encodeLoad("f", 1e9, filter.Load{Offset: 8, Bytes: []byte{1, 2, 3, 4, 5, 6, 7, 8}}))
	seed = appendRecord(seed, encodeDelete("f"))
	seed = appendRecord(seed, encodeTombstone(filter.Tombstone{Name: "f", Generation: 7, DeletedAt: time.Unix(8, 0)}))
	f.Add(seed)
	f.Add(seed[:len(seed)-2])
	f.Fuzz(func(t *testing.T, data []byte) {
		rr := &recordReader{r: bytes.NewReader(data), remaining: int64(len(data))}
		store := filter.NewStore(filter.Limits{}, nil)
		for {
			b, err := rr.next()
			if errors.Is(err, io.EOF) || errors.Is(err, ErrCorrupt) {
				return
			}
			if err != nil {
				t.Fatalf("unexpected error kind: %v", err)
			}
			d := decoder{r: b, left: b.length}
			c := d.change()
			if err := b.verify(); err != nil {
				return
			}
			if d.err == nil {
				_ = apply(store, c)
			}
		}
	})
}

// FuzzDump feeds ReadDump, which reads what a peer or a client sends, arbitrary bytes: it must
// answer a valid state or an error, never panic, and never allocate beyond its input.
func FuzzDump(f *testing.F) {
	st, _ := filter.EmptyState("seed", filter.Options{Capacity: 10, FPP: 0.1, Scalable: true, Growth: 2, Tightening: 0.5}, time.Unix(1, 0))
	var seed bytes.Buffer
	if err := WriteDump(&seed, st); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Add(seed.Bytes()[:30])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, err := ReadDump(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if err := filter.NewStore(filter.Limits{}, nil).Restore(got); err != nil {
			t.Errorf("accepted dump of %q cannot be restored: %v", got.Name, err)
		}
	})
}

// FuzzMerge merges what a client may send into a filter of the dump's own options: the body of a
// dump's record, framed with its checksum so that the fuzzer reaches past it. A merge either
// fails and leaves every bit and the memory in use as they were, or succeeds and leaves a filter
// whose description is a probability (a NaN made every later GET answer 500).
func FuzzMerge(f *testing.F) {
	opts := filter.Options{Capacity: 10, FPP: 0.1, Scalable: true, Growth: 2, Tightening: 0.5}
	src := filter.NewStore(filter.Limits{}, nil)
	seedFilter, _, err := src.Create("seed", opts, false)
	if err != nil {
		f.Fatal(err)
	}
	if err := seedFilter.AddMany([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}); err != nil {
		f.Fatal(err)
	}
	st := seedFilter.State()
	body := encodeFilterHead(st)
	for _, l := range st.AllLayers() {
		body = append(body, wordBytes(l.Words)...)
	}
	f.Add(body)
	// Every bit of the last layer set, and those past its m: a fill ratio above 1.
	poisoned := bytes.Clone(body)
	all := st.AllLayers()
	for i := len(poisoned) - all[len(all)-1].WordCount()*8; i < len(poisoned); i++ {
		poisoned[i] = 0xff
	}
	f.Add(poisoned)
	f.Fuzz(func(t *testing.T, body []byte) {
		record := appendRecord(nil, body)
		got, release, err := ReadDump(bytes.NewReader(record), int64(len(record)))
		if err != nil {
			return
		}
		defer release()
		store := filter.NewStore(filter.Limits{TotalBytes: 1 << 20}, nil)
		dst, _, err := store.Create("dst", got.Options, false)
		if err != nil {
			return
		}
		before, used := dst.Digest(), store.UsedBytes()
		if _, err := dst.MergeBits(got); err != nil {
			if after := dst.Digest(); !slices.EqualFunc(before.Parts, after.Parts, slices.Equal) || store.UsedBytes() != used {
				t.Fatalf("a refused merge (%v) changed the filter", err)
			}
			return
		}
		info := dst.Info()
		for _, x := range []float64{info.FillRatio, info.EstimatedFPP} {
			if !(x >= 0 && x <= 1) {
				t.Fatalf("after a merge the filter describes fill %v, fpp %v", info.FillRatio, info.EstimatedFPP)
			}
		}
	})
}
