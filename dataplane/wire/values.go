package wire

import (
	"slices"
	"unicode/utf8"
)

// A value is bytes: RESP's items may be any, but a JSON string holds only UTF-8 (an encoder
// replaces what is not, which would make a pod check or add another value than it was given). A
// pod that sends another the values of a multi- request therefore sends them as base64 when some
// are not UTF-8. Only the internal port takes that field, and from peers only (ForwardedHeader).

// Base64ValuesField is the field of a multi- request from a peer that carries its values as
// base64, in place of "values".
const Base64ValuesField = "base64Values"

// PeerValuesBody is the body of a multi- request of values that a pod sends another: the values
// as JSON strings when all are UTF-8, else all of them, as base64, in Base64ValuesField.
func PeerValuesBody(values []string) any {
	if !slices.ContainsFunc(values, func(v string) bool { return !utf8.ValidString(v) }) {
		return struct {
			Values []string `json:"values"`
		}{values}
	}
	raw := make([][]byte, len(values)) // encoding/json writes a []byte as base64
	for i, v := range values {
		raw[i] = []byte(v)
	}
	return struct {
		Base64Values [][]byte `json:"base64Values"`
	}{raw}
}
