package config

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// fileFields are the fields of a File struct and of the structs under it.
func fileFields(t reflect.Type) []reflect.StructField {
	var fields []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		fields = append(fields, f)
		inner := f.Type
		for inner.Kind() == reflect.Pointer || inner.Kind() == reflect.Slice {
			inner = inner.Elem()
		}
		if inner.Kind() == reflect.Struct {
			fields = append(fields, fileFields(inner)...)
		}
	}
	return fields
}

// A misspelt rule would be skipped without a word.
func TestFileCheckTags(t *testing.T) {
	rules := []string{"", "positive", "nonNegative", "probability", "nonEmpty", "port"}
	for _, f := range fileFields(reflect.TypeFor[File]()) {
		if rule := f.Tag.Get("check"); !slices.Contains(rules, rule) {
			t.Errorf("%s: unknown check %q", f.Name, rule)
		}
	}
}

// fileKeys are the keys of a File struct and of the structs under it, as paths such as
// "channelOptions.SO_RCVBUF".
func fileKeys(t reflect.Type, parent string) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		key := joinKey(parent, yamlKey(f))
		keys = append(keys, key)
		inner := f.Type
		for inner.Kind() == reflect.Pointer || inner.Kind() == reflect.Slice {
			inner = inner.Elem()
		}
		if inner.Kind() == reflect.Struct {
			keys = append(keys, fileKeys(inner, key)...)
		}
	}
	return keys
}

// A configuration written as a file and loaded back is the same: the units survive, and a key
// set to its zero value is written rather than left to the default.
func TestFileRoundTrip(t *testing.T) {
	c := Default()
	c.DefaultValidAfterCreate = 0
	c.MaxTotalBytes = 1 << 30
	c.IdleTimeout = 1500 * time.Millisecond
	c.RESPDisabledCommands = []string{"flushall", "KEYS"}
	c.ChannelOptions = ChannelOptions{SoRcvBuf: 1 << 16, SoSndBuf: 1 << 17, SoBacklog: 64, TCPNoDelay: false}
	c.TriggerPersistenceCriteria = []TriggerPersistenceCriterion{{Period: time.Hour, UpdatesMoreThan: 1}, {Period: time.Minute, UpdatesMoreThan: 50}}
	c.AllowRecoverFromCorruptedPersistentFile = false
	c.LogSync, c.WriteConsistency, c.LogLevel, c.LogFormat = LogSyncNo, wire.ConsistencyAll, "debug", LogFormatText
	data, err := yaml.Marshal(c.file())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(writeConfig(t, string(data)))
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("loaded back\n%+v\nwant\n%+v\nfrom\n%s", got, c, data)
	}
}

// A File leaves out what it does not set, so that the operator's file holds only its own keys.
func TestFileOmitsUnsetKeys(t *testing.T) {
	data, err := yaml.Marshal(File{AwaitMembership: new(false), TriggerPersistenceCriteria: new([]FileCriterion{})})
	if err != nil {
		t.Fatal(err)
	}
	if want := "triggerPersistenceCriteria: []\nawaitMembership: false\n"; string(data) != want {
		t.Errorf("got\n%s\nwant\n%s", data, want)
	}
}

// The names Validate gives its problems are the file's keys, or flags.
func TestValidateNamesFileKeys(t *testing.T) {
	c := Config{
		DefaultValidAfterCreate: -1, GracefulShutdownTimeout: -1, ShutdownDrainDelay: -1, AntiEntropyInterval: -1,
		MetricsMaxLabelledFilters: -1, ChannelOptions: ChannelOptions{SoRcvBuf: -1, SoSndBuf: -1, SoBacklog: -1},
		TriggerPersistenceCriteria: []TriggerPersistenceCriterion{{}},
	}
	var problems configProblems
	if !errors.As(c.Validate(), &problems) {
		t.Fatalf("Validate() = %v, want problems", c.Validate())
	}
	keys := map[string]bool{}
	for _, key := range fileKeys(reflect.TypeFor[File](), "") {
		keys[key] = true
	}
	for _, p := range problems {
		name, _, _ := strings.Cut(p.Error(), ": ")
		name = strings.TrimSuffix(regexp.MustCompile(`\[\d+\]`).ReplaceAllString(name, ""), " (or --data-dir)")
		if !keys[name] && !strings.HasPrefix(name, "--") {
			t.Errorf("Validate names %q, which is neither a key of the file nor a flag: %v", name, p)
		}
	}
}
