package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigEveryKey(t *testing.T) {
	path := writeConfig(t, `
internalPort: 18090
opsPort: 19090
respPort: 16379
respPasswordFile: /etc/bloomery/resp/password
internalTokenFile: /etc/bloomery/token
tlsCertFile: /etc/bloomery/tls/tls.crt
tlsKeyFile: /etc/bloomery/tls/tls.key
tlsCAFile: /etc/bloomery/tls/ca.crt
defaultExpectedInsertions: 2000000
defaultFalsePositiveProbability: 0.0002
defaultValidSecondsAfterCreate: 172800
maxHttpConnections: 2000
maxOpsConnections: 32
maxDumpBytes: 256Mi
maxHttpRequestLength: 5242880
maxRequestBytesInFlight: 32Mi
requestTimeoutSeconds: 6
idleTimeoutMillis: 1500
purgeFilterIntervalMillis: 200
gracefulShutdownTimeoutMillis: 4000
triggerPersistenceCriteria:
  - periodInSeconds: 60
    updatesMoreThan: 10
  - periodInSeconds: 3600
    updatesMoreThan: 1
persistentStorageDirectory: /var/lib/bloomery
snapshotLogBytes: 1Gi
allowStartWithLowDiskSpace: true
allowClientMerges: true
allowRecoverFromCorruptedPersistentFile: false
defaultChannelBufferSizeForFilterPersistence: 4096
channelOptions:
  SO_RCVBUF: 131072
  SO_SNDBUF: 262144
  SO_BACKLOG: 1024
  TCP_NODELAY: false
maxFilterBytes: 64Mi
maxTotalBytes: 1073741824
maxFilters: 5000
logSync: always
logLevel: debug
logFormat: text
shutdownDrainDelayMillis: 5000
metricsMaxLabelledFilters: 20
writeConsistency: all
awaitMembership: true
replicationTimeoutMillis: 750
homeLeaseSeconds: 12
antiEntropyIntervalSeconds: 120
respMaxClients: 500
respTimeoutSeconds: 0
respMaxBulkLength: 1Mi
respMaxCommandLength: 4Mi
respDisabledCommands: [flushall, keys]
respInitialSize: 1000
respErrorRate: 0.001
`)
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.InternalPort = 18090
	want.OpsPort = 19090
	want.RESPPort = 16379
	want.RESPPasswordFile = "/etc/bloomery/resp/password"
	want.InternalTokenFile = "/etc/bloomery/token"
	want.TLSCertFile = "/etc/bloomery/tls/tls.crt"
	want.TLSKeyFile = "/etc/bloomery/tls/tls.key"
	want.TLSCAFile = "/etc/bloomery/tls/ca.crt"
	want.DefaultExpectedInsertions = 2_000_000
	want.DefaultFPP = 0.0002
	want.DefaultValidAfterCreate = 48 * time.Hour
	want.MaxHTTPConnections = 2000
	want.MaxOpsConnections = 32
	want.MaxDumpBytes = 256 << 20
	want.MaxHTTPRequestLength = 5 << 20
	want.MaxRequestBytesInFlight = 32 << 20
	want.RequestTimeout = 6 * time.Second
	want.IdleTimeout = 1500 * time.Millisecond
	want.PurgeInterval = 200 * time.Millisecond
	want.GracefulShutdownTimeout = 4 * time.Second
	want.TriggerPersistenceCriteria = []TriggerPersistenceCriterion{
		{Period: time.Minute, UpdatesMoreThan: 10},
		{Period: time.Hour, UpdatesMoreThan: 1},
	}
	want.DataDir = "/var/lib/bloomery"
	want.SnapshotLogBytes = 1 << 30
	want.AllowStartWithLowDiskSpace = true
	want.AllowRecoverFromCorruptedPersistentFile = false
	want.ChannelBufferSizeForFilterPersistence = 4096
	want.ChannelOptions = ChannelOptions{SoRcvBuf: 128 << 10, SoSndBuf: 256 << 10, SoBacklog: 1024, TCPNoDelay: false}
	want.MaxFilterBytes = 64 << 20
	want.MaxTotalBytes = 1 << 30
	want.MaxFilters = 5000
	want.LogSync = "always"
	want.LogLevel = "debug"
	want.LogFormat = "text"
	want.ShutdownDrainDelay = 5 * time.Second
	want.MetricsMaxLabelledFilters = 20
	want.WriteConsistency = "all"
	want.AwaitMembership = true
	want.ReplicationTimeout = 750 * time.Millisecond
	want.HomeLease = 12 * time.Second
	want.AntiEntropyInterval = 2 * time.Minute
	want.RESPMaxClients = 500
	want.RESPTimeout = 0
	want.RESPMaxBulkLength = 1 << 20
	want.RESPMaxCommandLength = 4 << 20
	want.RESPInitialSize = 1000
	want.RESPErrorRate = 0.001
	want.AllowClientMerges = true
	want.RESPDisabledCommands = []string{"flushall", "keys"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", got, want)
	}
	// The lease is named after the pod, which the environment names (POD_NAME, POD_NAMESPACE).
	inPod := got
	inPod.PodName, inPod.PodNamespace = "example-0", "ns"
	if err := inPod.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if err := got.Validate(); err == nil || !strings.Contains(err.Error(), "homeLeaseSeconds: needs the pod's name and namespace") {
		t.Errorf("Validate without the pod's name: %v, want homeLeaseSeconds refused", err)
	}

	// The file above sets every key, so every field that a key fills must have left its default;
	// a field that did not is a key this test (or the loader) forgot.
	// PodName and PodNamespace come from the environment (POD_NAME, POD_NAMESPACE), not from the file.
	flagOnly := map[string]bool{"Port": true, "Address": true, "DocsEnabled": true, "InMemory": true, "PodName": true, "PodNamespace": true}
	def := reflect.ValueOf(Default())
	loaded := reflect.ValueOf(got)
	for i := range def.NumField() {
		name := def.Type().Field(i).Name
		if !flagOnly[name] && reflect.DeepEqual(def.Field(i).Interface(), loaded.Field(i).Interface()) {
			t.Errorf("Config.%s kept its default %v: no key of the test file set it", name, def.Field(i).Interface())
		}
	}
}

func TestLoadConfigDefaultsForEmptyFiles(t *testing.T) {
	for name, content := range map[string]string{
		"empty":              "",
		"comments only":      "# nothing set yet\n\n# still nothing\n",
		"document start":     "---\n",
		"null document":      "~\n",
		"document start end": "---\n...\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Load(writeConfig(t, content))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, Default()) {
				t.Errorf("got %+v, want the defaults", got)
			}
		})
	}
}

// maxWholeSeconds is the most seconds a time.Duration holds.
const maxWholeSeconds = math.MaxInt64 / int64(time.Second)

func TestLoadConfigAccepts(t *testing.T) {
	tests := []struct {
		name    string
		content string
		check   func(c Config) bool
	}{
		{"filter-service's own file", "---\n# comment\npurgeFilterIntervalMillis: 300\ndefaultRequestTimeoutSeconds: 5\n" +
			"channelOptions:\n  SO_BACKLOG: 2048\n  SO_RCVBUF: 2048\n  SO_SNDBUF: 2048\n  TCP_NODELAY: True\n",
			func(c Config) bool {
				return c.ChannelOptions == ChannelOptions{SoRcvBuf: 2048, SoSndBuf: 2048, SoBacklog: 2048, TCPNoDelay: true} &&
					c.RequestTimeout == 5*time.Second && c.PurgeInterval == 300*time.Millisecond
			}},
		{"TCP_NODELAY False as filter-service writes it", "channelOptions:\n  TCP_NODELAY: False\n",
			func(c Config) bool { return !c.ChannelOptions.TCPNoDelay }},
		{"channelOptions partly set keeps the rest", "channelOptions:\n  SO_BACKLOG: 10\n",
			func(c Config) bool { return c.ChannelOptions == ChannelOptions{SoBacklog: 10, TCPNoDelay: true} }},
		{"filters that never expire", "defaultValidSecondsAfterCreate: 0",
			func(c Config) bool { return c.DefaultValidAfterCreate == 0 }},
		{"no graceful shutdown wait", "gracefulShutdownTimeoutMillis: 0",
			func(c Config) bool { return c.GracefulShutdownTimeout == 0 }},
		{"alias of requestTimeoutSeconds", "defaultRequestTimeoutSeconds: 9",
			func(c Config) bool { return c.RequestTimeout == 9*time.Second }},
		{"no periodic snapshot", "triggerPersistenceCriteria: []",
			func(c Config) bool { return len(c.TriggerPersistenceCriteria) == 0 }},
		{"null criteria as filter-service reads them", "triggerPersistenceCriteria:\n",
			func(c Config) bool { return len(c.TriggerPersistenceCriteria) == 0 }},
		{"unlimited memory", "maxFilterBytes: 0\nmaxTotalBytes: 0",
			func(c Config) bool { return c.MaxFilterBytes == 0 && c.MaxTotalBytes == 0 }},
		{"probability in exponent notation", "defaultFalsePositiveProbability: 1e-3",
			func(c Config) bool { return c.DefaultFPP == 0.001 }},
		{"integer spellings of YAML", "maxHttpConnections: 0x10\nmaxHttpRequestLength: 1_000_000",
			func(c Config) bool { return c.MaxHTTPConnections == 16 && c.MaxHTTPRequestLength == 1_000_000 }},
		{"anchors and aliases", "maxHttpConnections: &n 33\ndefaultChannelBufferSizeForFilterPersistence: *n\n",
			func(c Config) bool {
				return c.MaxHTTPConnections == 33 && c.ChannelBufferSizeForFilterPersistence == 33
			}},
		{"largest whole-second duration", fmt.Sprintf("defaultValidSecondsAfterCreate: %d", maxWholeSeconds),
			func(c Config) bool { return c.DefaultValidAfterCreate == time.Duration(maxWholeSeconds)*time.Second }},
		{"every log level", "logLevel: warn", func(c Config) bool { return c.LogLevel == "warn" }},
		{"writes answered by one pod", "writeConsistency: one", func(c Config) bool { return c.WriteConsistency == "one" }},
		{"no anti-entropy", "antiEntropyIntervalSeconds: 0", func(c Config) bool { return c.AntiEntropyInterval == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(writeConfig(t, tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(got) {
				t.Errorf("unexpected configuration from %q: %+v", tt.content, got)
			}
		})
	}
}

func TestLoadConfigByteSizes(t *testing.T) {
	tests := []struct {
		value string
		want  uint64
	}{
		{"0", 0},
		{"1048576", 1 << 20},
		{`"1048576"`, 1 << 20},
		{`"512Ki"`, 512 << 10},
		{`"512Mi"`, 512 << 20},
		{"2Gi", 2 << 30},
		{"3Ti", 3 << 40},
		{"1Pi", 1 << 50},
		{"15Ei", 15 << 60},
		{"2k", 2000},
		{"5M", 5_000_000},
		{"1G", 1_000_000_000},
		{"1T", 1e12},
		{"1P", 1e15},
		{"18E", 18e18},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			got, err := Load(writeConfig(t, "maxFilterBytes: "+tt.value+"\nmaxTotalBytes: "+tt.value))
			if err != nil {
				t.Fatal(err)
			}
			if got.MaxFilterBytes != tt.want || got.MaxTotalBytes != tt.want {
				t.Errorf("maxFilterBytes %d, maxTotalBytes %d; want %d", got.MaxFilterBytes, got.MaxTotalBytes, tt.want)
			}
		})
	}
}

// oneKey writes a file that sets key (a path such as "channelOptions.SO_RCVBUF" or
// "triggerPersistenceCriteria[0].updatesMoreThan") to value, with valid siblings where a mapping
// needs them.
func oneKey(key, value string) string {
	switch {
	case strings.HasPrefix(key, "channelOptions."):
		return fmt.Sprintf("channelOptions:\n  %s: %s\n", strings.TrimPrefix(key, "channelOptions."), value)
	case strings.HasPrefix(key, "triggerPersistenceCriteria[0]."):
		item := map[string]string{"periodInSeconds": "60", "updatesMoreThan": "1"}
		item[strings.TrimPrefix(key, "triggerPersistenceCriteria[0].")] = value
		return fmt.Sprintf("triggerPersistenceCriteria:\n  - periodInSeconds: %s\n    updatesMoreThan: %s\n",
			item["periodInSeconds"], item["updatesMoreThan"])
	}
	return fmt.Sprintf("%s: %s\n", key, value)
}

func TestLoadConfigOutOfRange(t *testing.T) {
	type tc struct{ key, value, want string }
	var tests []tc
	for _, key := range []string{
		"defaultExpectedInsertions", "maxHttpConnections", "maxHttpRequestLength", "requestTimeoutSeconds",
		"defaultRequestTimeoutSeconds", "idleTimeoutMillis", "purgeFilterIntervalMillis",
		"defaultChannelBufferSizeForFilterPersistence",
		"channelOptions.SO_RCVBUF", "channelOptions.SO_SNDBUF", "channelOptions.SO_BACKLOG",
		"triggerPersistenceCriteria[0].periodInSeconds", "triggerPersistenceCriteria[0].updatesMoreThan",
		"replicationTimeoutMillis",
	} {
		tests = append(tests,
			tc{key, "0", "must be greater than 0, got 0"},
			tc{key, "-3", "must be greater than 0, got -3"})
	}
	for _, key := range []string{"defaultValidSecondsAfterCreate", "gracefulShutdownTimeoutMillis", "maxFilterBytes", "maxTotalBytes",
		"shutdownDrainDelayMillis", "metricsMaxLabelledFilters", "antiEntropyIntervalSeconds"} {
		tests = append(tests, tc{key, "-1", "must be 0 or greater, got -1"})
	}
	for value, got := range map[string]string{"0": "0", "1": "1", "1.5": "1.5", "-0.1": "-0.1", ".nan": "NaN", ".inf": "+Inf"} {
		tests = append(tests, tc{"defaultFalsePositiveProbability", value, "must be greater than 0 and less than 1, got " + got})
	}
	tests = append(tests,
		tc{"defaultValidSecondsAfterCreate", "9300000000", "must be at most 9223372036, got 9300000000"},
		tc{"requestTimeoutSeconds", "9300000000", "must be at most 9223372036, got 9300000000"},
		tc{"idleTimeoutMillis", "9300000000000", "must be at most 9223372036854, got 9300000000000"},
		tc{"triggerPersistenceCriteria[0].periodInSeconds", "9300000000", "must be at most 9223372036, got 9300000000"},
		tc{"maxTotalBytes", "16Ei", `invalid byte size "16Ei": more than 18446744073709551615 bytes`},
		tc{"maxTotalBytes", `"18446744073709551616"`, `invalid byte size "18446744073709551616": more than 18446744073709551615 bytes`},
		tc{"maxTotalBytes", "18446744073709551616", `expected an integer, got 18446744073709551616, which is out of range`},
		tc{"logLevel", "verbose", `must be one of debug, info, warn, error; got "verbose"`},
		tc{"logSync", "sometimes", `must be one of always, everysec, no; got "sometimes"`},
		tc{"logFormat", "xml", `must be one of json, text; got "xml"`},
		tc{"replicationTimeoutMillis", "9300000000000", "must be at most 9223372036854, got 9300000000000"},
		tc{"antiEntropyIntervalSeconds", "9300000000", "must be at most 9223372036, got 9300000000"},
		tc{"writeConsistency", "majority", `must be one of one, quorum, all; got "majority"`},
		tc{"writeConsistency", `""`, `must be one of one, quorum, all; got ""`},
		tc{"persistentStorageDirectory", "7", "expected a string, got integer 7"},
	)
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			path := writeConfig(t, oneKey(tt.key, tt.value))
			_, err := Load(path)
			wantMsg := fmt.Sprintf("config %s: key %q: %s", path, tt.key, tt.want)
			if err == nil || !strings.HasPrefix(err.Error(), wantMsg) {
				t.Fatalf("Load(%q) = %v\nwant an error starting %q", oneKey(tt.key, tt.value), err, wantMsg)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tt.key || ce.Line == 0 {
				t.Errorf("error %#v: want a *Error with Key %q and a line", err, tt.key)
			}
		})
	}
}

func TestLoadConfigWrongType(t *testing.T) {
	tests := []struct{ key, value, want string }{
		{"maxHttpConnections", `abc`, `expected an integer, got string "abc"`},
		{"maxHttpConnections", `"1000"`, `expected an integer, got string "1000"`},
		{"maxHttpConnections", `1.5`, `expected an integer, got number 1.5`},
		{"maxHttpConnections", `1e3`, `expected an integer, got number 1e3`},
		{"maxHttpRequestLength", `true`, `expected an integer, got boolean true`},
		{"idleTimeoutMillis", ``, `expected an integer, got nothing (null)`},
		{"purgeFilterIntervalMillis", `[1]`, `expected an integer, got a list`},
		{"requestTimeoutSeconds", `{seconds: 1}`, `expected an integer, got a mapping`},
		{"defaultValidSecondsAfterCreate", `2020-01-01`, `expected an integer, got timestamp 2020-01-01`},
		{"defaultExpectedInsertions", `99999999999999999999`, `expected an integer, got 99999999999999999999, which is out of range`},
		{"allowRecoverFromCorruptedPersistentFile", `1`, `expected a boolean (true or false), got integer 1`},
		{"allowRecoverFromCorruptedPersistentFile", `"true"`, `expected a boolean (true or false), got string "true"`},
		{"channelOptions.TCP_NODELAY", `yes`, `expected a boolean (true or false), got string "yes"`},
		{"channelOptions.SO_RCVBUF", `"2048"`, `expected an integer, got string "2048"`},
		{"defaultFalsePositiveProbability", `"0.01"`, `expected a number, got string "0.01"`},
		{"persistentStorageDirectory", `42`, `expected a string, got integer 42`},
		{"persistentStorageDirectory", `[a, b]`, `expected a string, got a list`},
		{"logLevel", `{a: 1}`, `expected a string, got a mapping`},
		{"logFormat", `~`, `expected a string, got nothing (null)`},
		{"triggerPersistenceCriteria", `5`, `expected a list of {periodInSeconds, updatesMoreThan} mappings, got integer 5`},
		{"triggerPersistenceCriteria", `{periodInSeconds: 1, updatesMoreThan: 1}`, `expected a list of {periodInSeconds, updatesMoreThan} mappings, got a mapping`},
		{"triggerPersistenceCriteria[0].updatesMoreThan", `many`, `expected an integer, got string "many"`},
		{"channelOptions", `true`, `expected a mapping, got boolean true`},
		{"channelOptions", ``, `expected a mapping, got nothing (null)`},
		{"maxTotalBytes", `1.5`, `expected a byte size (an integer, or a string such as "512Mi" or "2Gi"), got number 1.5`},
		{"maxFilterBytes", `lots`, `invalid byte size "lots": expected a whole number`},
		{"maxFilterBytes", `512MB`, `invalid byte size "512MB": expected a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E (powers of 1000)`},
		{"maxFilterBytes", `-1Gi`, `invalid byte size "-1Gi": expected a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E (powers of 1000)`},
		{"maxFilterBytes", `1.5Gi`, `invalid byte size "1.5Gi": expected a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E (powers of 1000)`},
		{"maxFilterBytes", `true`, `expected a byte size (an integer, or a string such as "512Mi" or "2Gi"), got boolean true`},
		{"writeConsistency", `2`, `expected a string, got integer 2`},
		{"writeConsistency", `~`, `expected a string, got nothing (null)`},
		{"awaitMembership", `yes`, `expected a boolean (true or false), got string "yes"`},
		{"awaitMembership", `1`, `expected a boolean (true or false), got integer 1`},
		{"replicationTimeoutMillis", `"2000"`, `expected an integer, got string "2000"`},
		{"replicationTimeoutMillis", `1.5`, `expected an integer, got number 1.5`},
		{"antiEntropyIntervalSeconds", `30s`, `expected an integer, got string "30s"`},
		{"antiEntropyIntervalSeconds", `[30]`, `expected an integer, got a list`},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			path := writeConfig(t, oneKey(tt.key, tt.value))
			_, err := Load(path)
			wantMsg := fmt.Sprintf("config %s: key %q: %s", path, tt.key, tt.want)
			if err == nil || !strings.HasPrefix(err.Error(), wantMsg) {
				t.Fatalf("Load(%q) = %v\nwant an error starting %q", oneKey(tt.key, tt.value), err, wantMsg)
			}
		})
	}
}

func TestLoadConfigTypeErrorForListElement(t *testing.T) {
	path := writeConfig(t, "triggerPersistenceCriteria:\n  - periodInSeconds: 1\n    updatesMoreThan: 1\n  - 5\n")
	_, err := Load(path)
	want := fmt.Sprintf(`config %s: key "triggerPersistenceCriteria[1]": expected a mapping, got integer 5 (line 4)`, path)
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestLoadConfigUnknownKeys(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"unrelated", "foo: 1\n", `unknown key "foo" (line 1)`},
		{"typo", "maxHttpConection: 5\n", `unknown key "maxHttpConection"; did you mean "maxHttpConnections"? (line 1)`},
		{"case", "\n\nMaxHTTPConnections: 5\n", `unknown key "MaxHTTPConnections"; did you mean "maxHttpConnections"? (line 3)`},
		{"unit left out", "purgeFilterInterval: 5\n", `unknown key "purgeFilterInterval"; did you mean "purgeFilterIntervalMillis"? (line 1)`},
		{"ambiguous prefix", "maxHttp: 5\n", `unknown key "maxHttp" (line 1)`},
		{"nested", "channelOptions:\n  SO_BACKLOG: 5\n  SO_KEEPALIVE: true\n", `unknown key "channelOptions.SO_KEEPALIVE" (line 3)`},
		{"nested typo", "channelOptions:\n  SO_RCVBUFF: 5\n", `unknown key "channelOptions.SO_RCVBUFF"; did you mean "channelOptions.SO_RCVBUF"? (line 2)`},
		{"in a criterion", "triggerPersistenceCriteria:\n  - periodInSeconds: 1\n    updatesMoreThan: 1\n  - periodInSeconds: 1\n    updatesMorethan: 1\n",
			`unknown key "triggerPersistenceCriteria[1].updatesMorethan"; did you mean "triggerPersistenceCriteria[1].updatesMoreThan"? (line 5)`},
		{"port is a flag", "port: 8080\n", `unknown key "port" (line 1)`},
		{"merge key", "<<: {maxHttpConnections: 1}\n", `unknown key "<<" (line 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.content)
			_, err := Load(path)
			want := fmt.Sprintf("config %s: %s", path, tt.want)
			if err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
		})
	}
}

func TestLoadConfigFileProblems(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"alias conflict", "requestTimeoutSeconds: 5\nidleTimeoutMillis: 10\ndefaultRequestTimeoutSeconds: 6\n",
			`keys "requestTimeoutSeconds" (line 1) and "defaultRequestTimeoutSeconds" (line 3) are the same setting; keep one (line 3)`},
		{"duplicate key", "maxHttpConnections: 5\nmaxHttpConnections: 6\n", `key "maxHttpConnections" is set twice, at lines 1 and 2 (line 2)`},
		{"duplicate nested key", "channelOptions:\n  SO_RCVBUF: 5\n  SO_RCVBUF: 6\n", `key "channelOptions.SO_RCVBUF" is set twice, at lines 2 and 3 (line 3)`},
		{"criterion without updatesMoreThan", "triggerPersistenceCriteria:\n  - periodInSeconds: 5\n",
			`key "triggerPersistenceCriteria[0]": missing "updatesMoreThan" (line 2)`},
		{"criterion without periodInSeconds", "triggerPersistenceCriteria:\n  - {updatesMoreThan: 5}\n",
			`key "triggerPersistenceCriteria[0]": missing "periodInSeconds" (line 2)`},
		{"list at the top", "- maxHttpConnections: 5\n", "expected a mapping of configuration keys at the top level, got a list (line 1)"},
		{"scalar at the top", "maxHttpConnections\n", `expected a mapping of configuration keys at the top level, got string "maxHttpConnections" (line 1)`},
		{"two documents", "maxHttpConnections: 5\n---\nmaxHttpConnections: 6\n", "holds more than one YAML document; the configuration must be a single mapping (line 2)"},
		{"syntax", "maxHttpConnections: [1\n", "invalid YAML: line 1: did not find expected ',' or ']'"},
		{"tab indentation", "channelOptions:\n\tSO_RCVBUF: 5\n", "invalid YAML: line 2: found character that cannot start any token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.content)
			_, err := Load(path)
			want := fmt.Sprintf("config %s: %s", path, tt.want)
			if err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
		})
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct{ path, want string }{
		{missing, "config " + missing + ": cannot read the file: no such file or directory"},
		{dir, "config " + dir + ": cannot read the file: is a directory"},
		{"", `config "": no file name given`},
	}
	for _, tt := range tests {
		_, err := Load(tt.path)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Load(%q) = %v, want %s", tt.path, err, tt.want)
		}
	}
	if _, err := Load(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want an error that is os.ErrNotExist", err)
	}
}

// filter-service's files start Bloomery unchanged: its spelling of a key, keys Bloomery has no
// use for (named by Ignored), a data directory left to the default, and enums in any case or in
// the BloomCluster CRD's spelling.
func TestFilterServiceFiles(t *testing.T) {
	got, file, err := LoadWithFile(writeConfig(t, `
metricsPrefix: filter_service
maxWorkerThreadPoolSize: 16
gracefulShutdownQuietPeriodMillis: 0
channelBufferSizeForFilterPersistence: 4096
persistentStorageDirectory: ~
logSync: EverySecond
writeConsistency: Quorum
logLevel: INFO
logFormat: JSON
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.ChannelBufferSizeForFilterPersistence = 4096
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", got, want)
	}
	ignored := file.Ignored()
	if len(ignored) != 3 || ignored["metricsPrefix"] == "" || ignored["maxWorkerThreadPoolSize"] == "" || ignored["gracefulShutdownQuietPeriodMillis"] == "" {
		t.Errorf("Ignored() = %v, want the three keys Bloomery has no use for", ignored)
	}
	for _, empty := range []string{`""`, "~", "null"} {
		if got, err := Load(writeConfig(t, "persistentStorageDirectory: "+empty+"\n")); err != nil || got.DataDir != Default().DataDir {
			t.Errorf("persistentStorageDirectory: %s = %q, %v; want the default %q", empty, got.DataDir, err, Default().DataDir)
		}
	}
	if _, err := Load(writeConfig(t, "channelBufferSizeForFilterPersistence: 1\ndefaultChannelBufferSizeForFilterPersistence: 2\n")); err == nil ||
		!strings.Contains(err.Error(), "are the same setting; keep one") {
		t.Errorf("both spellings of the channel buffer: %v, want them refused as one setting", err)
	}
}
