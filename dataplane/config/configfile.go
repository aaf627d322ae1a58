package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Error is a problem with a configuration file. Its message names the file, the key (as a
// path such as "triggerPersistenceCriteria[1].updatesMoreThan") and the line where known.
type Error struct {
	Path string // the file, as given
	Key  string // empty for problems with the file as a whole
	Line int    // 0 when unknown
	Msg  string // the problem, starting with the key when there is one
	Err  error  // the underlying error (file system, YAML syntax), if any
}

func (e *Error) Error() string {
	msg := "config " + e.Path + ": " + e.Msg
	if e.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", e.Line)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads a YAML configuration file over Default: keys the file leaves out keep their
// defaults, and an empty file is the defaults. Unknown keys, values of the wrong YAML type (a
// quoted "1000" is a string, not a number) and values out of range are refused with a
// *Error naming the key. It checks only what the file sets; Validate checks the whole.
func Load(path string) (Config, error) {
	cfg, _, err := LoadWithFile(path)
	return cfg, err
}

// LoadWithFile is Load, and the keys the file set: a flag's default may depend on whether the
// file chose (see --log-format).
func LoadWithFile(path string) (Config, File, error) {
	cfg, f := Default(), File{}
	if path == "" {
		return cfg, f, &Error{Path: `""`, Msg: "no file name given"}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			msg = pe.Err.Error() // the path is already in the message
		}
		return cfg, f, &Error{Path: path, Msg: "cannot read the file: " + msg, Err: err}
	}
	root, err := parseYAML(path, data)
	if err != nil || root == nil {
		return cfg, f, err
	}
	if err := (decoder{path: path}).mapping("", root, reflect.ValueOf(&f).Elem()); err != nil {
		return cfg, File{}, err
	}
	f.apply(&cfg)
	return cfg, f, nil
}

// parseYAML returns the top-level mapping of a one-document file, or nil for a file with no
// content (empty, only comments, or a null document).
func parseYAML(path string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &Error{Path: path, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, &Error{Path: path, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	default:
		return nil, &Error{Path: path, Line: next.Line, Msg: "holds more than one YAML document; " +
			"the configuration must be a single mapping"}
	}
	root := resolveAlias(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolveAlias(root.Content[0])
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Path: path, Line: root.Line,
			Msg: "expected a mapping of configuration keys at the top level, got " + describeNode(root)}
	}
	return root, nil
}

// decoder fills a File from the file's YAML tree, naming each problem by its key and line. It
// walks the tree itself, rather than leave it to yaml.v3's Decode, because yaml.v3 takes 1.5 for
// an integer, "yes" for a boolean and 42 for a string, and its errors name neither the key nor a
// likely fix.
type decoder struct{ path string }

// value fills v, the field of key, from n; rule is the field's check tag.
func (d decoder) value(key string, n *yaml.Node, v reflect.Value, rule string) error {
	n = resolveAlias(n)
	if v.Kind() == reflect.Pointer {
		v.Set(reflect.New(v.Type().Elem()))
		v = v.Elem()
	}
	var err error
	switch u, custom := reflect.TypeAssert[yaml.Unmarshaler](v.Addr()); {
	case custom:
		err = u.UnmarshalYAML(n)
	case v.Kind() == reflect.Struct:
		return d.mapping(key, n, v)
	case v.Kind() == reflect.Slice:
		return d.list(key, n, v)
	default:
		err = decodeScalar(n, v)
	}
	if err == nil {
		canonical(v)
		err = checkValue(v.Interface(), rule)
	}
	if err != nil {
		return d.errorf(key, n, "%s", err)
	}
	return nil
}

// mapping fills the struct v from n: its pointer fields are optional keys, the others required.
func (d decoder) mapping(key string, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return d.errorf(key, n, "%s", wrongType("a mapping", n))
	}
	fields := fieldsByKey(v.Type())
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		keyNode, valueNode := resolveAlias(n.Content[i]), n.Content[i+1]
		name := keyNode.Value
		child := joinKey(key, name)
		field, ok := fields[name]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", child)
			if s := suggestKey(name, keysOf(v.Type())); s != "" {
				msg += fmt.Sprintf(`; did you mean "%s"?`, joinKey(key, s))
			}
			return &Error{Path: d.path, Key: child, Line: keyNode.Line, Msg: msg}
		}
		// The YAML library keeps duplicate keys in a node, and a silent "last one wins" would hide
		// which value is in effect.
		if prev := seen[name]; prev != nil {
			return &Error{Path: d.path, Key: child, Line: keyNode.Line,
				Msg: fmt.Sprintf("key %q is set twice, at lines %d and %d", child, prev.Line, keyNode.Line)}
		}
		seen[name] = keyNode
		if err := d.value(child, valueNode, v.FieldByIndex(field.Index), field.Tag.Get("check")); err != nil {
			return err
		}
	}
	return d.complete(key, n, v.Type(), seen)
}

// complete checks that seen has every required key of t and at most one name of each setting.
func (d decoder) complete(key string, n *yaml.Node, t reflect.Type, seen map[string]*yaml.Node) error {
	for _, field := range reflect.VisibleFields(t) {
		name := yamlKey(field)
		if field.Type.Kind() != reflect.Pointer && seen[name] == nil {
			return d.errorf(key, n, "missing %q", name)
		}
		other := field.Tag.Get("aliasOf")
		if a, b := seen[other], seen[name]; a != nil && b != nil {
			return &Error{Path: d.path, Key: joinKey(key, other), Line: max(a.Line, b.Line),
				Msg: fmt.Sprintf(`keys %q (line %d) and %q (line %d) are the same setting; keep one`,
					joinKey(key, other), a.Line, joinKey(key, name), b.Line)}
		}
	}
	return nil
}

// list fills the slice v from n; a null is an empty list, as filter-service reads one.
func (d decoder) list(key string, n *yaml.Node, v reflect.Value) error {
	if n.ShortTag() == "!!null" {
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		expected := fmt.Sprintf("a list of {%s} mappings", strings.Join(keysOf(v.Type().Elem()), ", "))
		return d.errorf(key, n, "%s", wrongType(expected, n))
	}
	v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
	for i, item := range n.Content {
		if err := d.value(fmt.Sprintf("%s[%d]", key, i), item, v.Index(i), ""); err != nil {
			return err
		}
	}
	return nil
}

func (d decoder) errorf(key string, n *yaml.Node, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = fmt.Sprintf("key %q: %s", key, msg)
	}
	return &Error{Path: d.path, Key: key, Line: n.Line, Msg: msg}
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// fieldsByKey are the fields of a File struct by YAML key.
func fieldsByKey(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField, t.NumField())
	for _, f := range reflect.VisibleFields(t) {
		fields[yamlKey(f)] = f
	}
	return fields
}

// keysOf are the keys of a File struct, in the order of its fields.
func keysOf(t reflect.Type) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		keys = append(keys, yamlKey(f))
	}
	return keys
}

// yamlKey is the key a field of a File struct is written under.
func yamlKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// canonical spells an enum's value as Validate knows it: the file may write it in any case, and
// in the BloomCluster CRD's spelling (EverySecond, Quorum).
func canonical(v reflect.Value) {
	if !v.CanAddr() {
		return
	}
	switch e := v.Addr().Interface().(type) {
	case *LogSync:
		if *e = LogSync(strings.ToLower(string(*e))); *e == "everysecond" {
			*e = LogSyncEverySecond
		}
	case *wire.Consistency:
		*e = wire.Consistency(strings.ToLower(string(*e)))
	case *LogLevel:
		*e = LogLevel(strings.ToLower(string(*e)))
	case *LogFormat:
		*e = LogFormat(strings.ToLower(string(*e)))
	}
}

// decodeScalar reads a plain value, strictly: the YAML type must be the field's.
func decodeScalar(n *yaml.Node, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		i, err := decodeInt(n)
		if err != nil {
			return err
		}
		if v.OverflowInt(i) {
			return outOfRange(n)
		}
		v.SetInt(i)
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			return wrongType("a string", n)
		}
		v.SetString(n.Value)
		return nil
	case reflect.Bool:
		if n.ShortTag() != "!!bool" {
			return wrongType("a boolean (true or false)", n)
		}
	case reflect.Float64: // an integer such as 1 is a number too
		if tag := n.ShortTag(); tag != "!!float" && tag != "!!int" {
			return wrongType("a number", n)
		}
	}
	return n.Decode(v.Addr().Interface())
}

// decodeInt reads a YAML integer: not a float, not a quoted string.
func decodeInt(n *yaml.Node) (int64, error) {
	switch n.ShortTag() {
	case "!!int":
	case "!!float":
		// The YAML library gives integers beyond int64 the float tag; say what is wrong with them.
		if isDecimalInteger(n.Value) {
			return 0, outOfRange(n)
		}
		return 0, wrongType("an integer", n)
	default:
		return 0, wrongType("an integer", n)
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		return 0, outOfRange(n)
	}
	return v, nil
}

// checkValue checks a value the file set against its field's check tag, and an enum against its
// values.
func checkValue(v any, rule string) error {
	switch v := v.(type) {
	case int:
		return checkCount(v, rule)
	case int64:
		return checkCount(v, rule)
	case Seconds:
		return checkCount(v, rule)
	case Millis:
		return checkCount(v, rule)
	case float64:
		if rule == "probability" {
			return ruleProbability(v)
		}
	case string:
		if rule == "nonEmpty" {
			return ruleNonEmpty(v)
		}
	case LogSync:
		return ruleOneOf(v, LogSyncPolicies)
	case wire.Consistency:
		return ruleOneOf(v, consistencyLevels)
	case LogLevel:
		return ruleOneOf(v, logLevels)
	case LogFormat:
		return ruleOneOf(v, logFormats)
	}
	return nil
}

func checkCount[T ~int | ~int64](v T, rule string) error {
	switch rule {
	case "positive":
		return rulePositive(v)
	case "nonNegative":
		return ruleNonNegative(v)
	case "port":
		return rulePort(int(v))
	}
	return nil
}

func wrongType(expected string, n *yaml.Node) error {
	return fmt.Errorf("expected %s, got %s", expected, describeNode(n))
}

func outOfRange(n *yaml.Node) error {
	return fmt.Errorf("expected an integer, got %s, which is out of range", n.Value)
}

// resolveAlias follows YAML aliases (*name) to the anchored node.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describeNode names what the file holds, for "expected X, got Y" messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
	default:
		return "a YAML document"
	}
	value := n.Value
	if len(value) > 60 {
		value = value[:57] + "..."
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing (null)"
	case "!!str":
		return "string " + strconv.Quote(value)
	case "!!int":
		return "integer " + value
	case "!!float":
		return "number " + value
	case "!!bool":
		return "boolean " + value
	case "!!timestamp":
		return "timestamp " + value
	default:
		return n.ShortTag() + " " + strconv.Quote(value)
	}
}

// isDecimalInteger tells an integer too large for int64, which the YAML library tags as a float,
// from a real fraction.
func isDecimalInteger(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// suggestKey returns the known key that an unknown one was most likely meant to be, or "" when no
// single key stands out.
func suggestKey(unknown string, keys []string) string {
	lower := strings.ToLower(unknown)
	var prefixed []string
	best, bestDistance, tie := "", math.MaxInt, false
	for _, name := range keys {
		known := strings.ToLower(name)
		if known == lower {
			return name
		}
		// A unit suffix left out or added: "purgeFilterInterval" for "purgeFilterIntervalMillis".
		if len(lower) >= 6 && (strings.HasPrefix(known, lower) || strings.HasPrefix(lower, known)) {
			prefixed = append(prefixed, name)
		}
		switch d := keyEditDistance(lower, known); {
		case d < bestDistance:
			best, bestDistance, tie = name, d, false
		case d == bestDistance:
			tie = true
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	if !tie && bestDistance <= max(2, len(unknown)/5) {
		return best
	}
	return ""
}

// keyEditDistance is the Levenshtein distance between a and b.
func keyEditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
