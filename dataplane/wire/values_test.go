package wire

import (
	"encoding/json"
	"slices"
	"testing"
)

// Values that are all UTF-8 go as JSON strings, as a client's; any other makes every value go as
// base64, which decodes to the same bytes.
func TestPeerValuesBody(t *testing.T) {
	plain, err := json.Marshal(PeerValuesBody([]string{"a", "é", ""}))
	if err != nil || string(plain) != `{"values":["a","é",""]}` {
		t.Fatalf("UTF-8 values: %s, %v", plain, err)
	}
	values := []string{"\xff\xfe", "ok", "\xed\xa0\x80"}
	raw, err := json.Marshal(PeerValuesBody(values))
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string][][]byte
	if err := json.Unmarshal(raw, &decoded); err != nil || len(decoded) != 1 {
		t.Fatalf("%s: %v", raw, err)
	}
	got := make([]string, 0, len(values))
	for _, v := range decoded[Base64ValuesField] {
		got = append(got, string(v))
	}
	if !slices.Equal(got, values) {
		t.Fatalf("%s decodes to %q, want %q", raw, got, values)
	}
}
