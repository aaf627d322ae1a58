// Package config is the data plane's configuration: the Config type, its defaults, its validation
// and the YAML file both roles share, File (the operator fills and renders it, the data plane
// loads it).
package config

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Config is the data plane's effective configuration: Default, then what the file sets (see File
// for the keys), then the flags.
type Config struct {
	// Port is where the HTTP API listens (flag -p); 0 asks the kernel for a free port, which the
	// "Listening" log line then names.
	Port int
	// Address is the IP address to listen on (flag --bind-address); empty means every interface. The
	// end-to-end node agent runs each pod on its own loopback address with it.
	Address string
	// DocsEnabled serves the API documentation under /v1/docs (flag -d).
	DocsEnabled bool
	// InternalPort serves the endpoints only the operator and peers call (wire.InternalBasePath),
	// to callers with the token of InternalTokenFile; without a token file it is not opened.
	InternalPort int
	// InternalTokenFile holds the bearer token of the internal port, shared by the cluster's
	// pods and the operator. Empty runs a single server, which no membership can be pushed to.
	InternalTokenFile string
	// TLSCertFile and TLSKeyFile, when set, serve the client and internal ports over TLS; TLSCAFile
	// is the CA that peers' and the operator's certificates must chain to (flags --tls-*-file).
	// The files are re-read when they change.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// OpsPort serves the probes and /metrics alone, with a connection budget of its own, so that
	// clients exhausting the API's connections cannot starve the kubelet and Prometheus.
	OpsPort int
	// RESPPort serves RedisBloom's BF.* commands over the Redis protocol (package resp) on the same
	// filters as the HTTP API; 0, the default, opens no such port. Unlike Port, 0 means off, not a
	// free port: a process run by hand speaks HTTP alone unless asked.
	RESPPort int
	// RESPPasswordFile holds the password of the RESP port's default user: with it, a connection
	// must AUTH before any command but AUTH, HELLO and QUIT (flag --resp-password-file). Empty
	// leaves the port open to whoever reaches it, as a Redis without requirepass.
	RESPPasswordFile string
	// RESPMaxClients bounds the RESP port's connections (Redis's maxclients): one more is
	// answered "max number of clients reached" and closed.
	RESPMaxClients int
	// RESPTimeout closes a RESP connection idle this long (Redis's timeout); 0 never does.
	RESPTimeout time.Duration
	// RESPMaxBulkLength and RESPMaxCommandLength bound one argument of a RESP command and the
	// whole command as sent (Redis's proto-max-bulk-len and client-query-buffer-limit); 0 is
	// MaxHTTPRequestLength, what one HTTP request may carry. See RESPCommandLimits.
	RESPMaxBulkLength    int64
	RESPMaxCommandLength int64
	// RESPDisabledCommands are RESP commands answered as unknown, as Redis's rename-command to ""
	// makes them: an operator's way to turn off FLUSHALL, FLUSHDB or KEYS. The RESP server
	// checks that each is one of its commands.
	RESPDisabledCommands []string
	// RESPInitialSize and RESPErrorRate are the capacity and error rate of a filter that BF.ADD,
	// BF.MADD or BF.INSERT creates without them, RedisBloom's INITIAL_SIZE and ERROR_RATE module
	// arguments; HTTP's creates take DefaultExpectedInsertions and DefaultFPP instead.
	RESPInitialSize uint64
	RESPErrorRate   float64

	// Filter defaults, used when a create request leaves a field out.
	DefaultExpectedInsertions uint64
	DefaultFPP                float64
	// DefaultValidAfterCreate is the expiry of a filter created without one; 0 means never.
	DefaultValidAfterCreate time.Duration

	// Memory limits; 0 means unlimited.
	MaxFilterBytes uint64 // the most one partition of a filter may hold, all layers together
	MaxTotalBytes  uint64 // the most all filters together may hold
	// MaxFilters bounds the filters a pod holds: each costs memory and a share of every scrape and
	// snapshot beyond its bits.
	MaxFilters int

	// HTTP.
	// MaxHTTPConnections is the connection budget of the client port and, apart, of the internal
	// port; MaxOpsConnections the ops port's (docs/security.md#connection-budgets).
	MaxHTTPConnections int
	MaxOpsConnections  int
	// MaxDumpBytes bounds the bits one dump copies (a dump's checksum precedes its bits); a dump
	// of more answers 507. 0 is unbounded.
	MaxDumpBytes         uint64
	MaxHTTPRequestLength int64 // bytes
	// MaxRequestBytesInFlight bounds the bytes of request bodies the client port holds at once;
	// a request past it answers 503. 0 is unlimited.
	MaxRequestBytesInFlight uint64
	RequestTimeout          time.Duration
	IdleTimeout             time.Duration // keep-alive connections idle this long are closed
	ChannelOptions          ChannelOptions

	PurgeInterval           time.Duration
	GracefulShutdownTimeout time.Duration
	// ShutdownDrainDelay is how long /readyz answers 503 at the start of a graceful shutdown while
	// the API still serves, before the server stops accepting connections. Load balancers and
	// Kubernetes endpoints take a few seconds to stop sending traffic to a pod; a few seconds here
	// lets them, where a pod is behind one. 0, the default, stops at once, as a process run by hand
	// should (the precedent is kube-apiserver's --shutdown-delay-duration); whoever deploys the
	// data plane behind a Service sets it.
	ShutdownDrainDelay time.Duration

	// MetricsMaxLabelledFilters caps the filters that get /metrics series of their own, labelled
	// with their names; the others count only in the totals.
	MetricsMaxLabelledFilters int

	// Persistence. InMemory turns it off (flag --in-memory, for tests and benchmarks).
	InMemory                   bool
	DataDir                    string // flag --data-dir wins over the file
	TriggerPersistenceCriteria []TriggerPersistenceCriterion
	// SnapshotLogBytes snapshots once the log written since the last snapshot exceeds it, so that
	// the log cannot outgrow the volume; 0 turns that trigger off.
	SnapshotLogBytes                        uint64
	AllowRecoverFromCorruptedPersistentFile bool
	// AllowStartWithLowDiskSpace starts, with a warning, on a volume without room for one more
	// snapshot, which the start otherwise refuses.
	AllowStartWithLowDiskSpace bool
	// LogSync is when the log of updates reaches the disk (flag --log-sync wins over the file).
	LogSync LogSync
	// ChannelBufferSizeForFilterPersistence is filter-service's buffer between its filters and its
	// persistence thread. It is accepted and validated so that an existing configuration.yaml keeps
	// working, but nothing reads it: our snapshot and log writers size their own buffers.
	ChannelBufferSizeForFilterPersistence int

	// Replication across the pods of a cluster (docs/replication.md).
	// WriteConsistency is how many pods must hold a write before it is answered, unless the
	// request asks otherwise.
	WriteConsistency wire.Consistency
	// PodName is the pod's name when it runs in Kubernetes (env POD_NAME): a membership that
	// calls this pod by another name is refused.
	PodName string
	// PodNamespace is the pod's namespace when it runs in Kubernetes (env POD_NAMESPACE): where
	// its home lease lives.
	PodNamespace string
	// AwaitMembership keeps /readyz at 503 until the operator has told the pod its peers and the
	// pod has caught up from them. A pod run by hand is ready alone.
	AwaitMembership bool
	// HomeLease is the duration of the pod's home lease, a coordination.k8s.io Lease named after
	// the pod that it renews (docs/replication.md#the-homes-lease); 0, the default of a data
	// plane run without Kubernetes, renews none.
	HomeLease time.Duration
	// ReplicationTimeout bounds how long a write waits for its peers.
	ReplicationTimeout time.Duration
	// AntiEntropyInterval is the period of the pass that compares filters with a peer and merges
	// what differs; 0 turns it off.
	AntiEntropyInterval time.Duration
	// AllowClientMerges serves merges of dumps on the client port, to anyone who reaches it; the
	// internal port serves them to the token's holders whatever it says.
	AllowClientMerges bool

	LogLevel  LogLevel  // flag --log-level wins over the file
	LogFormat LogFormat // flag --log-format wins over the file
}

// LogSync says when the log of updates reaches the disk; the values are Redis's appendfsync.
type LogSync string

// The log sync policies.
const (
	LogSyncAlways      LogSync = "always"   // fsync before a write is answered
	LogSyncEverySecond LogSync = "everysec" // fsync about once a second
	LogSyncNo          LogSync = "no"       // fsync left to the kernel
)

// LogSyncPolicies are LogSync's values.
var LogSyncPolicies = []LogSync{LogSyncAlways, LogSyncEverySecond, LogSyncNo}

// LogLevel is the least severe level logged, as slog.Level reads it.
type LogLevel string

// LogFormat is how a log line is written.
type LogFormat string

// The log formats.
const (
	LogFormatJSON LogFormat = "json"
	LogFormatText LogFormat = "text"
)

var (
	logLevels         = []LogLevel{"debug", "info", "warn", "error"}
	logFormats        = []LogFormat{LogFormatJSON, LogFormatText}
	consistencyLevels = []wire.Consistency{wire.ConsistencyOne, wire.ConsistencyQuorum, wire.ConsistencyAll}
)

// ChannelOptions are filter-service's socket options (channelOptions).
type ChannelOptions struct {
	// SO_RCVBUF and SO_SNDBUF, bytes, set on the listening socket so that accepted connections
	// inherit them; 0 leaves the kernel default. On Linux a fixed size turns off the kernel's
	// buffer autotuning, so small values (filter-service's sample has 2048) cost throughput.
	SoRcvBuf  int
	SoSndBuf  int
	SoBacklog int // SO_BACKLOG; accepted for compatibility, Go uses the kernel's somaxconn
	// TCPNoDelay is TCP_NODELAY. Go sets it on every TCP connection; false turns Nagle's algorithm
	// back on for each accepted connection.
	TCPNoDelay bool
}

// TriggerPersistenceCriterion asks for a snapshot when more than UpdatesMoreThan updates happened
// within Period. It mirrors the persister's criterion, which the operator, a user of this
// package, must not import.
type TriggerPersistenceCriterion struct {
	Period          time.Duration
	UpdatesMoreThan int64
}

// Default is the configuration used when no file sets a key. The filter defaults are
// filter-service's.
func Default() Config {
	return Config{
		Port:                      8080,
		InternalPort:              8090,
		OpsPort:                   9090,
		DefaultExpectedInsertions: 1_000_000,
		DefaultFPP:                0.0001,
		DefaultValidAfterCreate:   24 * time.Hour,
		MaxFilters:                100_000,
		RESPMaxClients:            10_000,
		RESPTimeout:               300 * time.Second,
		RESPInitialSize:           100,
		RESPErrorRate:             0.01,
		MaxHTTPConnections:        1000,
		MaxOpsConnections:         64,
		MaxDumpBytes:              1 << 30,
		MaxHTTPRequestLength:      10 << 20,
		MaxRequestBytesInFlight:   64 << 20,
		RequestTimeout:            5 * time.Second,
		IdleTimeout:               60 * time.Second,
		ChannelOptions:            ChannelOptions{TCPNoDelay: true},
		PurgeInterval:             300 * time.Millisecond,
		GracefulShutdownTimeout:   30 * time.Second,
		MetricsMaxLabelledFilters: 100,
		DataDir:                   "data",
		TriggerPersistenceCriteria: []TriggerPersistenceCriterion{
			{Period: 300 * time.Second, UpdatesMoreThan: 100},
		},
		SnapshotLogBytes:                        128 << 20,
		AllowRecoverFromCorruptedPersistentFile: true,
		ChannelBufferSizeForFilterPersistence:   102400,
		LogSync:                                 LogSyncEverySecond,
		WriteConsistency:                        wire.ConsistencyQuorum,
		ReplicationTimeout:                      2 * time.Second,
		AntiEntropyInterval:                     30 * time.Second,
		LogLevel:                                "info",
		LogFormat:                               LogFormatJSON,
	}
}

// Validate checks a configuration however it was built: Load has already checked what came
// from the file, with line numbers, so this catches the flags and configurations built in code.
// Every problem is reported, named by its flag or YAML key.
func (c Config) Validate() error {
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	check("--port", rulePort(c.Port))
	check("internalPort (or --internal-port)", rulePort(c.InternalPort))
	check("opsPort (or --ops-port)", rulePort(c.OpsPort))
	check("respPort (or --resp-port)", rulePort(c.RESPPort))
	check("ports", distinctPorts(c))
	if c.RESPPasswordFile != "" && c.RESPPort == 0 {
		check("respPasswordFile (or --resp-password-file)", errors.New("needs respPort: the password is the RESP port's, and no RESP port is open"))
	}
	check("tls", checkTLSFiles(c))
	if c.AwaitMembership && c.InternalTokenFile == "" {
		check("awaitMembership", errors.New("needs internalTokenFile: without it the internal port stays closed and no membership can reach the pod"))
	}
	if strings.Contains(c.Address, ":") && net.ParseIP(c.Address) == nil {
		check("--bind-address", fmt.Errorf("must be a host name or an IP address without a port, got %q", c.Address))
	}
	check("defaultExpectedInsertions", rulePositive(c.DefaultExpectedInsertions))
	check("defaultFalsePositiveProbability", ruleProbability(c.DefaultFPP))
	check("defaultValidSecondsAfterCreate", ruleNonNegative(c.DefaultValidAfterCreate))
	check("maxFilters", rulePositive(c.MaxFilters))
	check("maxHttpConnections", rulePositive(c.MaxHTTPConnections))
	check("maxOpsConnections", rulePositive(c.MaxOpsConnections))
	check("respMaxClients", rulePositive(c.RESPMaxClients))
	check("respDisabledCommands", ruleCommandNames(c.RESPDisabledCommands))
	check("respInitialSize", rulePositive(c.RESPInitialSize))
	check("respErrorRate", ruleProbability(c.RESPErrorRate))
	check("respTimeoutSeconds", ruleNonNegative(c.RESPTimeout))
	check("respMaxBulkLength", ruleNonNegative(c.RESPMaxBulkLength))
	check("respMaxCommandLength", ruleNonNegative(c.RESPMaxCommandLength))
	if _, command := c.RESPCommandLimits(); c.MaxRequestBytesInFlight > 0 && command > 0 && uint64(command) > c.MaxRequestBytesInFlight {
		check("respMaxCommandLength", fmt.Errorf("must be at most maxRequestBytesInFlight (%d), got %d: a command of the largest size could never be read",
			c.MaxRequestBytesInFlight, command))
	}
	check("maxHttpRequestLength", rulePositive(c.MaxHTTPRequestLength))
	if c.MaxRequestBytesInFlight > 0 && c.MaxHTTPRequestLength > 0 && c.MaxRequestBytesInFlight < uint64(c.MaxHTTPRequestLength) {
		check("maxRequestBytesInFlight", fmt.Errorf("must be 0 (unlimited) or at least maxHttpRequestLength (%d), got %d: a body of the largest size could never be read",
			c.MaxHTTPRequestLength, c.MaxRequestBytesInFlight))
	}
	check("requestTimeoutSeconds", rulePositive(c.RequestTimeout))
	check("idleTimeoutMillis", rulePositive(c.IdleTimeout))
	check("purgeFilterIntervalMillis", rulePositive(c.PurgeInterval))
	check("gracefulShutdownTimeoutMillis", ruleNonNegative(c.GracefulShutdownTimeout))
	check("shutdownDrainDelayMillis", ruleNonNegative(c.ShutdownDrainDelay))
	check("metricsMaxLabelledFilters", ruleNonNegative(c.MetricsMaxLabelledFilters))
	// 0 is the "not configured" value of the socket options, which the file cannot set.
	check("channelOptions.SO_RCVBUF", ruleNonNegative(c.ChannelOptions.SoRcvBuf))
	check("channelOptions.SO_SNDBUF", ruleNonNegative(c.ChannelOptions.SoSndBuf))
	check("channelOptions.SO_BACKLOG", ruleNonNegative(c.ChannelOptions.SoBacklog))
	check("persistentStorageDirectory (or --data-dir)", ruleNonEmpty(c.DataDir))
	for i, tc := range c.TriggerPersistenceCriteria {
		check(fmt.Sprintf("triggerPersistenceCriteria[%d].periodInSeconds", i), rulePositive(tc.Period))
		check(fmt.Sprintf("triggerPersistenceCriteria[%d].updatesMoreThan", i), rulePositive(tc.UpdatesMoreThan))
	}
	check("defaultChannelBufferSizeForFilterPersistence", rulePositive(c.ChannelBufferSizeForFilterPersistence))
	check("logSync", ruleOneOf(c.LogSync, LogSyncPolicies))
	check("writeConsistency", ruleOneOf(c.WriteConsistency, consistencyLevels))
	check("replicationTimeoutMillis", rulePositive(c.ReplicationTimeout))
	check("homeLeaseSeconds", ruleNonNegative(c.HomeLease))
	if c.HomeLease > 0 && (c.PodName == "" || c.PodNamespace == "") {
		check("homeLeaseSeconds", errors.New("needs the pod's name and namespace (environment variables POD_NAME and POD_NAMESPACE, which the operator's StatefulSet sets): the lease is named after the pod"))
	}
	check("antiEntropyIntervalSeconds", ruleNonNegative(c.AntiEntropyInterval))
	check("logLevel", ruleOneOf(c.LogLevel, logLevels))
	check("logFormat", ruleOneOf(c.LogFormat, logFormats))
	if len(errs) == 0 {
		return nil
	}
	return configProblems(errs)
}

// configProblems reads as one line, where errors.Join would print one line each.
type configProblems []error

func (p configProblems) Error() string {
	msgs := make([]string, len(p))
	for i, err := range p {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (p configProblems) Unwrap() []error { return p }

// The rules below are shared by Validate and Load. Their messages leave the naming of the key to
// the caller and print the value as its type does: a time.Duration as "1.5s", a File's Seconds
// as the file writes it.

// ruleCommandNames refuses a name that cannot be a command's: empty, or with white space.
func ruleCommandNames(names []string) error {
	for _, name := range names {
		if name == "" || strings.ContainsFunc(name, unicode.IsSpace) {
			return fmt.Errorf("%q is not a command's name", name)
		}
	}
	return nil
}

func rulePositive[T ~int | ~int64 | ~uint64](v T) error {
	if v <= 0 {
		return fmt.Errorf("must be greater than 0, got %v", v)
	}
	return nil
}

// checkTLSFiles wants a certificate and its key together, and a CA wherever peers must verify
// each other.
func checkTLSFiles(c Config) error {
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("tlsCertFile and tlsKeyFile go together: set both or neither")
	case c.TLSCAFile != "" && c.TLSCertFile == "":
		return errors.New("tlsCAFile needs tlsCertFile and tlsKeyFile")
	case c.TLSCertFile != "" && c.InternalTokenFile != "" && c.TLSCAFile == "":
		return errors.New("tlsCAFile is needed with tlsCertFile and internalTokenFile: the pods of a cluster verify each other against it")
	}
	return nil
}

func rulePort(p int) error {
	if p < 0 || p > 65535 {
		return fmt.Errorf("must be between 0 and 65535, got %d", p)
	}
	return nil
}

// distinctPorts refuses two listeners on one port, which would fail at start with a less clear
// "address already in use". Port 0 picks a free port for each.
func distinctPorts(c Config) error {
	ports := map[int]string{}
	for _, l := range []struct {
		name string
		port int
	}{{"--port", c.Port}, {"internalPort", c.InternalPort}, {"opsPort", c.OpsPort}, {"respPort", c.RESPPort}} {
		if l.name == "internalPort" && c.InternalTokenFile == "" || l.port == 0 {
			continue // not opened, or a free port (respPort 0 is not opened)
		}
		if other, taken := ports[l.port]; taken {
			return fmt.Errorf("%s and %s are both %d", other, l.name, l.port)
		}
		ports[l.port] = l.name
	}
	return nil
}

func ruleNonNegative[T ~int | ~int64](v T) error {
	if v < 0 {
		return fmt.Errorf("must be 0 or greater, got %v", v)
	}
	return nil
}

func ruleProbability(p float64) error {
	if !(p > 0 && p < 1) { // also refuses NaN
		return fmt.Errorf("must be greater than 0 and less than 1, got %v", p)
	}
	return nil
}

func ruleNonEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func ruleOneOf[T ~string](v T, allowed []T) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return fmt.Errorf("must be one of %s; got %q", strings.Join(names, ", "), v)
}

// LogValue presents the configuration under its YAML keys and in their units, so that the
// start-up log line reads like the file it came from. The flags come first, then the file's keys.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.Int("port", c.Port),
		slog.String("address", c.Address),
		slog.Bool("docs", c.DocsEnabled),
		slog.Bool("inMemory", c.InMemory),
		slog.String("podName", c.PodName),
		slog.String("podNamespace", c.PodNamespace),
	}
	f := c.file()
	return slog.GroupValue(append(attrs, fileAttrs(reflect.ValueOf(f))...)...)
}

// fileAttrs are the keys a File struct sets, under their names.
func fileAttrs(v reflect.Value) []slog.Attr {
	var attrs []slog.Attr
	for i := range v.NumField() {
		field := v.Field(i)
		if field.Kind() == reflect.Pointer {
			if field.IsNil() {
				continue
			}
			field = field.Elem()
		}
		attrs = append(attrs, slog.Attr{Key: yamlKey(v.Type().Field(i)), Value: fileLogValue(field)})
	}
	return attrs
}

func fileLogValue(v reflect.Value) slog.Value {
	switch v.Kind() {
	case reflect.Struct:
		return slog.GroupValue(fileAttrs(v)...)
	case reflect.Slice:
		items := make([]logObject, v.Len())
		for i := range items {
			items[i] = fileAttrs(v.Index(i))
		}
		return slog.AnyValue(items)
	default:
		return slog.AnyValue(v.Interface())
	}
}

// logObject is a mapping inside a list, which slog's groups cannot express: it writes itself as
// a JSON object, and as "{key: value, ...}" in text logs.
type logObject []slog.Attr

func (o logObject) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, a := range o {
		if i > 0 {
			b = append(b, ',')
		}
		v, err := json.Marshal(a.Value.Resolve().Any())
		if err != nil {
			return nil, err
		}
		b = append(strconv.AppendQuote(b, a.Key), ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

func (o logObject) String() string {
	parts := make([]string, len(o))
	for i, a := range o {
		parts[i] = fmt.Sprintf("%s: %v", a.Key, a.Value.Resolve())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// CheckLogLevel checks a --log-level value.
func CheckLogLevel(v string) error { return ruleOneOf(LogLevel(v), logLevels) }

// CheckLogFormat checks a --log-format value.
func CheckLogFormat(v string) error { return ruleOneOf(LogFormat(v), logFormats) }

// RESPCommandLimits are the bytes one argument of a RESP command, and the whole command as sent,
// may take: RESPMaxBulkLength and RESPMaxCommandLength, MaxHTTPRequestLength where they are 0, and
// an argument no larger than its command.
func (c Config) RESPCommandLimits() (bulk, command int64) {
	command = cmp.Or(c.RESPMaxCommandLength, c.MaxHTTPRequestLength)
	bulk = min(cmp.Or(c.RESPMaxBulkLength, c.MaxHTTPRequestLength), command)
	return bulk, command
}
