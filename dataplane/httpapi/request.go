package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// body is a request's JSON object, field by field. Fields are read with the typed getters, which
// answer filter-service's messages: required parameter: "x", invalid parameter: "x". <why>.
type body map[string]json.RawMessage

// readBody reads at most limit bytes and decodes a JSON object. An empty body is an empty object,
// so `curl -X PUT .../name` creates a filter with the defaults.
func (s *Server) readBody(c echo.Context, limit int64) (body, error) {
	raw, err := s.readLimited(c, limit)
	if err != nil {
		return nil, err
	}
	return decodeBody(raw)
}

// readLimited reads a whole body of at most limit bytes; a larger one is a 413.
func (s *Server) readLimited(c echo.Context, limit int64) ([]byte, error) {
	req := c.Request()
	if req.ContentLength > limit {
		return nil, errBodyTooLarge(limit)
	}
	var raw []byte
	var err error
	if req.ContentLength >= 0 {
		// Grown by doubling from 4 KiB rather than from io.ReadAll's 512 bytes: a peer's batch
		// of tens of KiB is read in a few allocations.
		raw, err = readDeclared(req.Body, nil, req.ContentLength)
	} else {
		raw, err = io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, limit))
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, errBodyTooLarge(limit)
		}
		return nil, s.readError(c, err)
	}
	return raw, nil
}

// decodeBody decodes a whole request body read by readBody or readRaw; it copies what it keeps.
func decodeBody(raw []byte) (body, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return body{}, nil
	}
	if raw[0] != '{' {
		return nil, badRequest("invalid JSON body: expected an object")
	}
	var b body
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, badRequest("invalid JSON body: " + err.Error())
	}
	return b, nil
}

// only refuses fields outside known, so that a misspelt field is an error and not a silent default.
func (b body) only(known ...string) error {
	for name := range b {
		if !slices.Contains(known, name) {
			msg := fmt.Sprintf("unknown parameter: %q", name)
			if s := suggestField(name, known); s != "" {
				msg += fmt.Sprintf(`; did you mean %q?`, s)
			}
			return badRequest(msg)
		}
	}
	return nil
}

// fieldSynonyms are other APIs' words for our fields: RedisBloom's and the BloomFilter CRD's.
var fieldSynonyms = map[string][]string{
	"expectedInsertions":     {"capacity", "size", "expected_insertions"},
	"fpp":                    {"errorRate", "error_rate", "falsePositiveRate", "falsePositiveProbability"},
	"validPeriodAfterCreate": {"ttl", "expiry", "expireAfter"},
	"values":                 {"value", "items"},
	"value":                  {"values", "item"},
}

// suggestField is the known field that name most likely meant: the same word in another case, or
// another API's word for it; "" when none.
func suggestField(name string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
	}
	for _, k := range known {
		for _, synonym := range fieldSynonyms[k] {
			if strings.EqualFold(synonym, name) {
				return k
			}
		}
	}
	return ""
}

// field returns the raw value of name; null counts as absent.
func (b body) field(name string) (json.RawMessage, bool) {
	raw, ok := b[name]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

func invalidParameter(name, detail string) error {
	return badRequest(fmt.Sprintf("invalid parameter: %q. %s", name, detail))
}

func requiredParameter(name string) error {
	return badRequest(fmt.Sprintf("required parameter: %q", name))
}

// requiredField is requiredParameter, with a hint when the client put it in the query string:
// values go in the JSON body, as filter-service takes them.
func requiredField(c echo.Context, name string) error {
	if c.QueryParams().Has(name) {
		return badRequest(fmt.Sprintf(`required parameter: %q; it goes in the JSON body ({"%s": ...}), not in the query string`, name, name))
	}
	return requiredParameter(name)
}

// wrongType names the expected type and shows what came instead.
func wrongType(name, expected string, raw json.RawMessage) error {
	return invalidParameter(name, fmt.Sprintf("expected: %s, actual: %s %s", expected, jsonKind(raw), abbreviate(raw)))
}

func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func abbreviate(raw json.RawMessage) string {
	const limit = 40
	if len(raw) <= limit {
		return string(raw)
	}
	return string(raw[:limit]) + "…"
}

// string reads a required string field; wrong type answers filter-service's "expect string type".
func (b body) string(name string) (string, error) {
	raw, ok := b.field(name)
	if !ok {
		return "", requiredParameter(name)
	}
	if raw[0] != '"' {
		return "", invalidParameter(name, "expect string type")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", invalidParameter(name, err.Error())
	}
	return s, nil
}

// strings reads the array name of strings. An element that is not a string is a 400 naming its
// index: filter-service answers false for it and adds nothing, which an application sending
// numeric IDs would never notice.
func (b body) strings(name string) ([]string, error) {
	raw, present := b.field(name)
	if !present {
		return nil, requiredParameter(name)
	}
	if raw[0] != '[' {
		return nil, invalidParameter(name, "expect Json array")
	}
	// A first pass counts and checks, so that the slice is allocated once, at its size, and only
	// for a body that is all strings.
	n := 0
	err := arrayElements(raw, func(elem []byte) error {
		if elem[0] != '"' {
			return invalidParameter(name, fmt.Sprintf("element %d is not a string but %s: values are strings (send the number 12345 as \"12345\")",
				n, abbreviate(elem)))
		}
		n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	strs := make([]string, 0, n)
	err = arrayElements(raw, func(elem []byte) error {
		var s string
		if err := json.Unmarshal(elem, &s); err != nil {
			return invalidParameter(name, err.Error())
		}
		strs = append(strs, s)
		return nil
	})
	return strs, err
}

// arrayElements calls fn with each element of raw, a JSON array that decodeBody has already
// validated, so only the boundaries of its elements are looked for.
func arrayElements(raw []byte, fn func(elem []byte) error) error {
	i := skipSpace(raw, 1)
	if i >= len(raw) || raw[i] == ']' {
		return nil
	}
	for {
		end := skipValue(raw, i)
		if err := fn(raw[i:end]); err != nil {
			return err
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ',' {
			return nil
		}
		i = skipSpace(raw, i+1)
	}
}

// skipValue returns the index just past the valid JSON value that starts at raw[i].
func skipValue(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				j = skipString(raw, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(raw)
	}
	j := i // a number, true, false or null
	for j < len(raw) && raw[j] != ',' && raw[j] != ']' && raw[j] != '}' && !isSpace(raw[j]) {
		j++
	}
	return j
}

// skipString returns the index just past the string that starts at raw[i].
func skipString(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(raw)
}

// uint reads an optional integer in [lo, hi]. Integral numbers written as
// floats (1e6, 1000.0) are accepted; strings such as "1000" are not.
func (b body) uint(name string, def, lo, hi uint64) (uint64, error) {
	raw, ok := b.field(name)
	if !ok {
		return def, nil
	}
	if raw[0] == '"' || raw[0] == '{' || raw[0] == '[' || raw[0] == 't' || raw[0] == 'f' {
		return 0, wrongType(name, "integer", raw)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		// Not a plain non-negative integer: an integral float (1e6), a negative number, a
		// fraction, or a number beyond float64 (1e400, which ParseFloat calls out of range).
		f, ferr := strconv.ParseFloat(string(raw), 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange), ferr == nil && f != math.Trunc(f):
			return 0, wrongType(name, "integer", raw)
		case ferr != nil || f < 0 || f > float64(hi):
			return 0, outOfRange(name, lo, hi, string(raw))
		}
		n = uint64(f)
	}
	if n < lo || n > hi {
		return 0, outOfRange(name, lo, hi, string(raw))
	}
	return n, nil
}

func outOfRange(name string, lo, hi uint64, actual string) error {
	expected := fmt.Sprintf(">= %d && <= %d", lo, hi)
	if lo == 1 {
		expected = fmt.Sprintf("> 0 && <= %d", hi)
	}
	return invalidParameter(name, fmt.Sprintf("expected: %s, actual: %s", expected, actual))
}

// openUnitInterval reads an optional number in (0, 1), the range of fpp and tightening.
func (b body) openUnitInterval(name string, def float64) (float64, error) {
	raw, ok := b.field(name)
	if !ok {
		return def, nil
	}
	if jsonKind(raw) != "number" {
		return 0, wrongType(name, "number", raw)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || !(f > 0 && f < 1) {
		return 0, invalidParameter(name, "expected: > 0 && < 1, actual: "+string(raw))
	}
	return f, nil
}

// bool reads an optional boolean.
func (b body) bool(name string, def bool) (bool, error) {
	raw, ok := b.field(name)
	if !ok {
		return def, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, wrongType(name, "boolean", raw)
}

// seconds reads an optional period in whole seconds; 0 means none.
func (b body) seconds(name string, def time.Duration) (time.Duration, error) {
	const maxSeconds = math.MaxInt64 / uint64(time.Second)
	n, err := b.uint(name, uint64(def/time.Second), 0, maxSeconds)
	return time.Duration(n) * time.Second, err
}

// plainBodies refuses a body the client compressed: the API reads JSON as it is sent, and a
// compressed body would otherwise read as invalid JSON.
func plainBodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if enc := c.Request().Header.Get(echo.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
			return &apiError{http.StatusUnsupportedMediaType, wire.CodeBadParameter,
				fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", enc)}
		}
		return next(c)
	}
}
