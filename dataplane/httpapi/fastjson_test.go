package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
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
			want, err := b.strings("values")
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("fastValues(%q) = %q, strict path %q, %v", raw, got, want, err)
			}
		}
	}
	for raw, fast := range map[string]bool{`{"value":"a"}`: true, ` { "value" : "a b" } `: true, `{"value":"é"}`: false, `{"value":"a","value":"b"}`: false} {
		if _, ok := fastValue([]byte(raw)); ok != fast {
			t.Errorf("fastValue(%q) took the fast path: %v, want %v", raw, ok, fast)
		}
	}
}

// strictArrays are bodies whose values hold elements of every kind, nested ones with brackets
// and quotes inside strings among them.
var strictArrays = []string{
	`{"values":["a",{"x":"]","y":[1,{"z":"}"}]},[1,[2,"[\"]"]],"b\"c",null,true,false,-1.5e3,"d",""]}`,
	`{"values":[ 1 , "a" ,{} , [ ] ,"\u00e9\n" ]}`, `{"values":[7]}`, `{"values":[]}`,
}

// stringsByUnmarshal is what body.strings answers, computed the slow way: every element decoded;
// first is the index of the first element that is not a string, -1 for none.
func stringsByUnmarshal(t *testing.T, arr []byte) (strs []string, first int) {
	t.Helper()
	var elems []json.RawMessage
	if err := json.Unmarshal(arr, &elems); err != nil {
		t.Fatalf("%s: %v", arr, err)
	}
	for i, elem := range elems {
		if elem[0] != '"' {
			return nil, i
		}
		var s string
		if err := json.Unmarshal(elem, &s); err != nil {
			t.Fatalf("%s: %v", elem, err)
		}
		strs = append(strs, s)
	}
	return strs, -1
}

// checkStrictArray compares body.strings with stringsByUnmarshal on any body the strict path reads.
func checkStrictArray(t *testing.T, raw string) {
	t.Helper()
	b, err := decodeBody([]byte(raw))
	if err != nil {
		return
	}
	arr, ok := b.field("values")
	if !ok || arr[0] != '[' {
		return
	}
	strs, err := b.strings("values")
	wantStrs, first := stringsByUnmarshal(t, arr)
	if first >= 0 {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("element %d is not a string", first)) {
			t.Fatalf("strings(%s) = %q, %v; want an error naming element %d", arr, strs, err, first)
		}
		return
	}
	if err != nil || !slices.Equal(strs, wantStrs) {
		t.Fatalf("strings(%s) = %q, %v; want %q", arr, strs, err, wantStrs)
	}
}

func TestStrictArrays(t *testing.T) {
	for _, raw := range append(slices.Clone(fastBodies), strictArrays...) {
		checkStrictArray(t, raw)
	}
}

// A body of a million numbers is refused at its first element, and costs no more than its bytes.
func TestStrictArrayOfNumbers(t *testing.T) {
	raw := []byte(`{"values":[1` + strings.Repeat(",1", 1<<19) + `]}`)
	b, err := decodeBody(raw)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	strs, err := b.strings("values")
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "element 0 is not a string but 1") || strs != nil {
		t.Fatalf("%d strings, %v; want the first element refused", len(strs), err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<10 {
		t.Errorf("%d bytes allocated to refuse a body of %d bytes", allocated, len(raw))
	}
}

func FuzzFastPath(f *testing.F) {
	for _, raw := range append(slices.Clone(fastBodies), strictArrays...) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkStrictArray(t, raw)
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
			if want, err := b.strings("values"); err != nil || !slices.Equal(got, want) {
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
