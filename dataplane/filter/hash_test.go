package filter

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
)

// TestLocationsMatchBloom compares the engine's locations with bloom.Locations for keys of every
// length around the 16-byte blocks of the hash (where the appended byte may complete a block),
// for Unicode and for random bytes.
func TestLocationsMatchBloom(t *testing.T) {
	var keys []string
	for n := range 70 {
		keys = append(keys, strings.Repeat("k", n))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		keys = append(keys, string(b))
	}
	keys = append(keys, "日本語", "😀👩‍👩‍👧", "e\u0301", "\x00", "\xff\xff")
	for _, key := range keys {
		want := bloom.Locations([]byte(key), 40)
		if got := appendLocations(nil, key, 40); !slices.Equal(got, want) {
			t.Fatalf("key %q (%d bytes): locations differ from bloom.Locations\n got %v\nwant %v", key, len(key), got[:4], want[:4])
		}
	}
}

// FuzzLocations checks the same on any key; `make fuzz` runs it.
func FuzzLocations(f *testing.F) {
	for _, seed := range []string{"", "a", "0123456789abcde", "0123456789abcdef", "日本語"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if got, want := appendLocations(nil, key, 24), bloom.Locations([]byte(key), 24); !slices.Equal(got, want) {
			t.Fatalf("key %q: got %v, want %v", key, got, want)
		}
	})
}

func BenchmarkLocations(b *testing.B) {
	key := "user-1234567890"
	b.Run("bloom.Locations", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = bloom.Locations([]byte(key), 10)
		}
	})
	b.Run("appendLocations", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]uint64, 0, 10)
		for b.Loop() {
			dst = appendLocations(dst[:0], key, 10)
		}
	})
}
