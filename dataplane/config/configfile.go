package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ConfigError is a problem with a configuration file. Its message names the file, the key (as a
// path such as "triggerPersistenceCriteria[1].updatesMoreThan") and the line where known.
type ConfigError struct {
	Path string // the file, as given
	Key  string // empty for problems with the file as a whole
	Line int    // 0 when unknown
	Msg  string // the problem, starting with the key when there is one
	Err  error  // the underlying error (file system, YAML syntax), if any
}

func (e *ConfigError) Error() string {
	msg := "config " + e.Path + ": " + e.Msg
	if e.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", e.Line)
	}
	return msg
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Load reads a YAML configuration file over Default: keys the file leaves out keep their
// defaults, and an empty file is the defaults. Unknown keys, values of the wrong YAML type (a
// quoted "1000" is a string, not a number) and values out of range are refused with a
// *ConfigError naming the key. It checks only what the file sets; Validate checks the whole.
func Load(path string) (Config, error) {
	cfg, _, err := LoadWithKeys(path)
	return cfg, err
}

// LoadWithKeys is Load, and the top-level keys the file set: a flag's default may depend on
// whether the file chose (see --log-format).
func LoadWithKeys(path string) (Config, map[string]*yaml.Node, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil, &ConfigError{Path: `""`, Msg: "no file name given"}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			msg = pe.Err.Error() // the path is already in the message
		}
		return cfg, nil, &ConfigError{Path: path, Msg: "cannot read the file: " + msg, Err: err}
	}
	root, err := parseYAML(path, data)
	if err != nil || root == nil {
		return cfg, nil, err
	}
	seen, err := decodeMapping(yamlField{path: path, n: root}, configKeys, &cfg)
	if err != nil {
		return cfg, nil, err
	}
	if a, b := seen["requestTimeoutSeconds"], seen["defaultRequestTimeoutSeconds"]; a != nil && b != nil {
		later := max(a.Line, b.Line)
		return cfg, nil, &ConfigError{Path: path, Key: "requestTimeoutSeconds", Line: later,
			Msg: fmt.Sprintf(`keys "requestTimeoutSeconds" (line %d) and "defaultRequestTimeoutSeconds" (line %d) `+
				"are the same setting; keep one", a.Line, b.Line)}
	}
	return cfg, seen, nil
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
		return nil, &ConfigError{Path: path, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, &ConfigError{Path: path, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	default:
		return nil, &ConfigError{Path: path, Line: next.Line, Msg: "holds more than one YAML document; " +
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
		return nil, &ConfigError{Path: path, Line: root.Line,
			Msg: "expected a mapping of configuration keys at the top level, got " + describeNode(root)}
	}
	return root, nil
}

// configKeys are the top-level keys: filter-service's, then ours.
var configKeys = map[string]keySetter[Config]{
	"defaultExpectedInsertions": intSetter(rulePositive[int64], func(c *Config) *uint64 { return &c.DefaultExpectedInsertions }),
	"defaultFalsePositiveProbability": func(f yamlField, c *Config) error {
		v, err := f.float(ruleProbability)
		if err != nil {
			return err
		}
		c.DefaultFPP = v
		return nil
	},
	// Unlike filter-service, 0 is allowed: filters created without an expiry never expire.
	"defaultValidSecondsAfterCreate": durationSetter(time.Second, ruleNonNegative[int64], func(c *Config) *time.Duration { return &c.DefaultValidAfterCreate }),
	"maxHttpConnections":             intSetter(rulePositive[int64], func(c *Config) *int { return &c.MaxHTTPConnections }),
	"maxHttpRequestLength":           intSetter(rulePositive[int64], func(c *Config) *int64 { return &c.MaxHTTPRequestLength }),
	"requestTimeoutSeconds":          durationSetter(time.Second, rulePositive[int64], func(c *Config) *time.Duration { return &c.RequestTimeout }),
	"defaultRequestTimeoutSeconds":   durationSetter(time.Second, rulePositive[int64], func(c *Config) *time.Duration { return &c.RequestTimeout }),
	"idleTimeoutMillis":              durationSetter(time.Millisecond, rulePositive[int64], func(c *Config) *time.Duration { return &c.IdleTimeout }),
	"purgeFilterIntervalMillis":      durationSetter(time.Millisecond, rulePositive[int64], func(c *Config) *time.Duration { return &c.PurgeInterval }),
	"gracefulShutdownTimeoutMillis":  durationSetter(time.Millisecond, ruleNonNegative[int64], func(c *Config) *time.Duration { return &c.GracefulShutdownTimeout }),
	"channelOptions": func(f yamlField, c *Config) error {
		_, err := decodeMapping(f, channelOptionKeys, &c.ChannelOptions)
		return err
	},
	"triggerPersistenceCriteria": decodeCriteria,
	"persistentStorageDirectory": func(f yamlField, c *Config) error {
		v, err := f.string()
		if err != nil {
			return err
		}
		if v == "" {
			return f.errorf("must not be empty")
		}
		c.DataDir = v
		return nil
	},
	"allowRecoverFromCorruptedPersistentFile":      boolSetter(func(c *Config) *bool { return &c.AllowRecoverFromCorruptedPersistentFile }),
	"defaultChannelBufferSizeForFilterPersistence": intSetter(rulePositive[int64], func(c *Config) *int { return &c.ChannelBufferSizeForFilterPersistence }),

	"maxFilterBytes": byteSizeSetter(func(c *Config) *uint64 { return &c.MaxFilterBytes }),
	"maxTotalBytes":  byteSizeSetter(func(c *Config) *uint64 { return &c.MaxTotalBytes }),
	"logLevel":       enumSetter(logLevels, func(c *Config) *string { return &c.LogLevel }),
	"logSync":        enumSetter(logSyncPolicies, func(c *Config) *string { return &c.LogSync }),
	"logFormat":      enumSetter(logFormats, func(c *Config) *string { return &c.LogFormat }),

	"shutdownDrainDelayMillis":  durationSetter(time.Millisecond, ruleNonNegative[int64], func(c *Config) *time.Duration { return &c.ShutdownDrainDelay }),
	"metricsMaxLabelledFilters": intSetter(ruleNonNegative[int64], func(c *Config) *int { return &c.MetricsMaxLabelledFilters }),

	"writeConsistency":           enumSetter(consistencyLevels, func(c *Config) *string { return &c.WriteConsistency }),
	"awaitMembership":            boolSetter(func(c *Config) *bool { return &c.AwaitMembership }),
	"replicationTimeoutMillis":   durationSetter(time.Millisecond, rulePositive[int64], func(c *Config) *time.Duration { return &c.ReplicationTimeout }),
	"antiEntropyIntervalSeconds": durationSetter(time.Second, ruleNonNegative[int64], func(c *Config) *time.Duration { return &c.AntiEntropyInterval }),
}

var channelOptionKeys = map[string]keySetter[ChannelOptions]{
	"SO_RCVBUF":   intSetter(rulePositive[int64], func(o *ChannelOptions) *int { return &o.SoRcvBuf }),
	"SO_SNDBUF":   intSetter(rulePositive[int64], func(o *ChannelOptions) *int { return &o.SoSndBuf }),
	"SO_BACKLOG":  intSetter(rulePositive[int64], func(o *ChannelOptions) *int { return &o.SoBacklog }),
	"TCP_NODELAY": boolSetter(func(o *ChannelOptions) *bool { return &o.TCPNoDelay }),
}

var criterionKeys = map[string]keySetter[TriggerPersistenceCriterion]{
	"periodInSeconds": durationSetter(time.Second, rulePositive[int64], func(tc *TriggerPersistenceCriterion) *time.Duration { return &tc.Period }),
	"updatesMoreThan": intSetter(rulePositive[int64], func(tc *TriggerPersistenceCriterion) *int64 { return &tc.UpdatesMoreThan }),
}

// decodeCriteria replaces the default criteria by the file's list. An empty list, and for
// filter-service's sake a null one, turns periodic snapshots off.
func decodeCriteria(f yamlField, c *Config) error {
	if f.n.Kind == yaml.ScalarNode && f.n.ShortTag() == "!!null" {
		c.TriggerPersistenceCriteria = nil
		return nil
	}
	if f.n.Kind != yaml.SequenceNode {
		return f.wrongType("a list of {periodInSeconds, updatesMoreThan} mappings")
	}
	criteria := make([]TriggerPersistenceCriterion, len(f.n.Content))
	for i, item := range f.n.Content {
		elem := f.child(fmt.Sprintf("%s[%d]", f.key, i), item)
		seen, err := decodeMapping(elem, criterionKeys, &criteria[i])
		if err != nil {
			return err
		}
		for _, required := range []string{"periodInSeconds", "updatesMoreThan"} {
			if seen[required] == nil {
				return elem.errorf("missing %q", required)
			}
		}
	}
	c.TriggerPersistenceCriteria = criteria
	return nil
}

// A keySetter decodes one key's value into its place in T.
type keySetter[T any] func(f yamlField, dst *T) error

// decodeMapping applies a YAML mapping to dst, key by key. It returns the key nodes it saw, by
// name, for checks that span keys.
func decodeMapping[T any](f yamlField, keys map[string]keySetter[T], dst *T) (map[string]*yaml.Node, error) {
	if f.n.Kind != yaml.MappingNode {
		return nil, f.wrongType("a mapping")
	}
	seen := make(map[string]*yaml.Node, len(f.n.Content)/2)
	for i := 0; i+1 < len(f.n.Content); i += 2 {
		keyNode, valueNode := resolveAlias(f.n.Content[i]), f.n.Content[i+1]
		name := keyNode.Value
		child := f.child(joinKey(f.key, name), valueNode)
		set, ok := keys[name]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", child.key)
			if s := suggestKey(name, keys); s != "" {
				msg += fmt.Sprintf(`; did you mean "%s"?`, joinKey(f.key, s))
			}
			return nil, &ConfigError{Path: f.path, Key: child.key, Line: keyNode.Line, Msg: msg}
		}
		// The YAML library keeps duplicate keys in a node, and a silent "last one wins" would hide
		// which value is in effect.
		if prev := seen[name]; prev != nil {
			return nil, &ConfigError{Path: f.path, Key: child.key, Line: keyNode.Line,
				Msg: fmt.Sprintf("key %q is set twice, at lines %d and %d", child.key, prev.Line, keyNode.Line)}
		}
		seen[name] = keyNode
		if err := set(child, dst); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func intSetter[T any, V int | int64 | uint64](rule func(int64) error, get func(*T) *V) keySetter[T] {
	return func(f yamlField, dst *T) error {
		v, err := f.int(rule)
		if err != nil {
			return err
		}
		if limit := maxOf[V](); v > limit { // only where int is 32 bits
			return f.errorf("must be at most %d, got %d", limit, v)
		}
		*get(dst) = V(v)
		return nil
	}
}

func maxOf[V int | int64 | uint64]() int64 {
	var v V
	switch any(v).(type) {
	case int:
		return math.MaxInt
	default: // int64, and uint64 which the file fills from a YAML int64
		return math.MaxInt64
	}
}

// durationSetter reads an integer count of unit; the key's name says the unit.
func durationSetter[T any](unit time.Duration, rule func(int64) error, get func(*T) *time.Duration) keySetter[T] {
	return func(f yamlField, dst *T) error {
		v, err := f.int(rule)
		if err != nil {
			return err
		}
		if limit := int64(math.MaxInt64 / unit); v > limit {
			return f.errorf("must be at most %d, got %d", limit, v)
		}
		*get(dst) = time.Duration(v) * unit
		return nil
	}
}

func boolSetter[T any](get func(*T) *bool) keySetter[T] {
	return func(f yamlField, dst *T) error {
		if f.n.ShortTag() != "!!bool" {
			return f.wrongType("a boolean (true or false)")
		}
		var v bool
		if err := f.n.Decode(&v); err != nil {
			return f.errorf("%s", err)
		}
		*get(dst) = v
		return nil
	}
}

func enumSetter[T any](allowed []string, get func(*T) *string) keySetter[T] {
	return func(f yamlField, dst *T) error {
		v, err := f.string()
		if err != nil {
			return err
		}
		if err := ruleOneOf(v, allowed); err != nil {
			return f.errorf("%s", err)
		}
		*get(dst) = v
		return nil
	}
}

// byteSizeSetter takes a count of bytes: an integer, or a string with a Kubernetes-style suffix
// ("512Mi", "2Gi", "1G") as a BloomCluster's limits are written.
func byteSizeSetter[T any](get func(*T) *uint64) keySetter[T] {
	return func(f yamlField, dst *T) error {
		const expected = `a byte size (an integer, or a string such as "512Mi" or "2Gi")`
		switch tag := f.n.ShortTag(); {
		case tag == "!!int" || tag == "!!float" && isDecimalInteger(strings.TrimLeft(f.n.Value, "+-")):
			v, err := f.int(ruleNonNegative[int64])
			if err != nil {
				return err
			}
			*get(dst) = uint64(v)
			return nil
		case tag == "!!str":
			v, err := parseByteSize(f.n.Value)
			if err != nil {
				return f.errorf("invalid byte size %q: %s", f.n.Value, err)
			}
			*get(dst) = v
			return nil
		default:
			return f.wrongType(expected)
		}
	}
}

var byteSizePattern = regexp.MustCompile(`^([0-9]+)([KMGTPE]i|[kMGTPE])?$`)

var byteSizeMultipliers = map[string]uint64{
	"":  1,
	"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// parseByteSize reads "1048576", "512Mi" (binary suffixes Ki, Mi, Gi, Ti, Pi, Ei) or "1G" (decimal
// k, M, G, T, P, E): the suffixes of Kubernetes quantities.
func parseByteSize(s string) (uint64, error) {
	m := byteSizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New("expected a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) " +
			"or k, M, G, T, P, E (powers of 1000)")
	}
	tooLarge := fmt.Errorf("more than %d bytes", uint64(math.MaxUint64))
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, tooLarge
	}
	hi, lo := bits.Mul64(n, byteSizeMultipliers[m[2]])
	if hi != 0 {
		return 0, tooLarge
	}
	return lo, nil
}

// yamlField is one value being decoded, with what its errors must name.
type yamlField struct {
	path string // the file
	key  string // the full key path, "" for the top level
	n    *yaml.Node
}

// child is the value n of key, a path below f.
func (f yamlField) child(key string, n *yaml.Node) yamlField {
	return yamlField{path: f.path, key: key, n: resolveAlias(n)}
}

func (f yamlField) errorf(format string, args ...any) *ConfigError {
	msg := fmt.Sprintf(format, args...)
	if f.key != "" {
		msg = fmt.Sprintf("key %q: %s", f.key, msg)
	}
	return &ConfigError{Path: f.path, Key: f.key, Line: f.n.Line, Msg: msg}
}

func (f yamlField) wrongType(expected string) *ConfigError {
	return f.errorf("expected %s, got %s", expected, describeNode(f.n))
}

// int reads a YAML integer (not a float, not a quoted string) and checks it against rule.
func (f yamlField) int(rule func(int64) error) (int64, error) {
	switch f.n.ShortTag() {
	case "!!int":
	case "!!float":
		// The YAML library gives integers beyond int64 the float tag; say what is wrong with them.
		if isDecimalInteger(strings.TrimLeft(f.n.Value, "+-")) {
			return 0, f.errorf("expected an integer, got %s, which is out of range", f.n.Value)
		}
		return 0, f.wrongType("an integer")
	default:
		return 0, f.wrongType("an integer")
	}
	var v int64
	if err := f.n.Decode(&v); err != nil {
		return 0, f.errorf("expected an integer, got %s, which is out of range", f.n.Value)
	}
	if err := rule(v); err != nil {
		return 0, f.errorf("%s", err)
	}
	return v, nil
}

// float reads a YAML number; an integer such as 1 is a number too.
func (f yamlField) float(rule func(float64) error) (float64, error) {
	if tag := f.n.ShortTag(); tag != "!!float" && tag != "!!int" {
		return 0, f.wrongType("a number")
	}
	var v float64
	if err := f.n.Decode(&v); err != nil {
		return 0, f.errorf("expected a number, got %s", describeNode(f.n))
	}
	if err := rule(v); err != nil {
		return 0, f.errorf("%s", err)
	}
	return v, nil
}

func (f yamlField) string() (string, error) {
	if f.n.Kind != yaml.ScalarNode || f.n.ShortTag() != "!!str" {
		return "", f.wrongType("a string")
	}
	return f.n.Value, nil
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

func isDecimalInteger(s string) bool {
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
func suggestKey[T any](unknown string, keys map[string]keySetter[T]) string {
	lower := strings.ToLower(unknown)
	var prefixed []string
	best, bestDistance, tie := "", math.MaxInt, false
	for name := range keys {
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
