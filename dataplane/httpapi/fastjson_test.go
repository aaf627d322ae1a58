package httpapi

import (
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
