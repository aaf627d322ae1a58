package httpapi

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

var fastBodies = []string{
	`{"value":"a"}`, ` { "value" : "a b" } `, "{\n\t\"value\":\"\"}\r\n", `{"value":"x\u0041"}`, `{"value":"é"}`,
	`{"value":"a","value":"b"}`, `{"value":"a",}`, `{"value":1}`, `{"value":null}`, `{"valuex":"a"}`,
	`{"value":"a"} x`, `{"value":"a"`, `{"value":"tab	"}`, `{"values":[]}`, `{"values":["a","b"]}`,
	` {"values" : [ "a" , "" ,"c" ] } `, `{"values":["a",1]}`, `{"values":["a",]}`, `{"values":[,]}`,
	`{"values":["a"]]}`, `{"values":["a"}`, `{"values":"a"}`, `{"values":["a\"b"]}`, `{"values":["a"],"x":1}`,
	"\f{\"value\":\"a\"}", `{"values":[ ]}`, `[]`, ``, `{}`,
}

// Whatever the fast path accepts, the strict path reads as the same values.
func TestFastPathAgreesWithStrictPath(t *testing.T) {
	for _, raw := range fastBodies {
		if got, ok := fastValue([]byte(raw)); ok {
			b, err := decodeBody([]byte(raw))
			if err != nil || b.only("value") != nil {
				t.Errorf("fastValue accepted %q, which the strict path refuses: %v", raw, err)
				continue
			}
			if want, err := b.string("value"); err != nil || got != want {
				t.Errorf("fastValue(%q) = %q, strict path %q, %v", raw, got, want, err)
			}
		}
		if got, ok := fastValues([]byte(raw)); ok {
			b, err := decodeBody([]byte(raw))
			if err != nil || b.only("values") != nil {
				t.Errorf("fastValues accepted %q, which the strict path refuses: %v", raw, err)
				continue
			}
			want, _, all, err := b.strings("values")
			if err != nil || !all || !slices.Equal(got, want) {
				t.Errorf("fastValues(%q) = %q, strict path %q (all strings %v), %v", raw, got, want, all, err)
			}
		}
	}
	for raw, fast := range map[string]bool{`{"value":"a"}`: true, ` { "value" : "a b" } `: true, `{"value":"é"}`: false, `{"value":"a","value":"b"}`: false} {
		if _, ok := fastValue([]byte(raw)); ok != fast {
			t.Errorf("fastValue(%q) took the fast path: %v, want %v", raw, ok, fast)
		}
	}
}

func FuzzFastPath(f *testing.F) {
	for _, raw := range fastBodies {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if got, ok := fastValue([]byte(raw)); ok {
			b, err := decodeBody([]byte(raw))
			if err != nil || b.only("value") != nil {
				t.Fatalf("fastValue accepted %q, which the strict path refuses: %v", raw, err)
			}
			if want, err := b.string("value"); err != nil || got != want {
				t.Fatalf("fastValue(%q) = %q, strict path %q, %v", raw, got, want, err)
			}
		}
		if got, ok := fastValues([]byte(raw)); ok {
			b, err := decodeBody([]byte(raw))
			if err != nil || b.only("values") != nil {
				t.Fatalf("fastValues accepted %q, which the strict path refuses: %v", raw, err)
			}
			if want, _, all, err := b.strings("values"); err != nil || !all || !slices.Equal(got, want) {
				t.Fatalf("fastValues(%q) = %q, strict path %q, %v", raw, got, want, err)
			}
		}
	})
}

// trickle gives its bytes a few at a time, as a slow client's body arrives.
type trickle struct{ data []byte }

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.data[:min(len(t.data), 7)])
	t.data = t.data[n:]
	return n, nil
}

// A body is read into memory as its bytes arrive: a declared length does not allocate by itself.
func TestReadDeclaredGrowsWithTheBytes(t *testing.T) {
	const declared = 10 << 20
	got, err := readDeclared(&trickle{data: []byte(`{"value":"x"}`)}, nil, declared)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body shorter than declared: %v, want io.ErrUnexpectedEOF", err)
	}
	if string(got) != `{"value":"x"}` || cap(got) > 64<<10 {
		t.Errorf("read %q into %d bytes of buffer for a %d-byte declaration", got, cap(got), declared)
	}

	want := bytes.Repeat([]byte("0123456789"), 100_000)
	got, err = readDeclared(&trickle{data: want}, make([]byte, 0, 16), int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a whole body of %d bytes: %d bytes, %v", len(want), len(got), err)
	}
	if cap(got) > 4*len(want) {
		t.Errorf("%d bytes of buffer for %d bytes of body", cap(got), len(want))
	}
	// Bytes after the declared length are left for whoever reads next.
	rest := &trickle{data: []byte("abcdef")}
	if got, err := readDeclared(rest, nil, 3); err != nil || string(got) != "abc" {
		t.Errorf("3 declared bytes: %q, %v", got, err)
	}
}
