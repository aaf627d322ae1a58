// Package config is the data plane's configuration: the Config type, its defaults, its validation
// and the YAML file both roles share (the operator renders it, the data plane loads it).
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"
)

// Config is the data plane's effective configuration. Its YAML keys are filter-service's where
// filter-service has one, so an existing configuration.yaml keeps working.
type Config struct {
	// Port is where the HTTP API listens (flag -p); 0 asks the kernel for a free port, which the
	// "Listening" log line then names.
	Port int
	// Address is the IP address to listen on (flag --bind-address); empty means every interface. The
	// end-to-end node agent runs each pod on its own loopback address with it.
	Address string
	// DocsEnabled serves the API documentation under /v1/docs (flag -d).
	DocsEnabled bool

	// Filter defaults, used when a create request leaves a field out.
	DefaultExpectedInsertions uint64  // defaultExpectedInsertions
	DefaultFPP                float64 // defaultFalsePositiveProbability
	// DefaultValidAfterCreate is the expiry of a filter created without one; 0 means never.
	DefaultValidAfterCreate time.Duration // defaultValidSecondsAfterCreate

	// Memory limits; 0 means unlimited.
	MaxFilterBytes uint64 // maxFilterBytes: the most one filter may hold, all layers together
	MaxTotalBytes  uint64 // maxTotalBytes: the most all filters together may hold

	// HTTP.
	MaxHTTPConnections   int           // maxHttpConnections
	MaxHTTPRequestLength int64         // maxHttpRequestLength, bytes
	RequestTimeout       time.Duration // requestTimeoutSeconds (alias defaultRequestTimeoutSeconds)
	IdleTimeout          time.Duration // idleTimeoutMillis: keep-alive connections idle this long are closed
	ChannelOptions       ChannelOptions

	PurgeInterval           time.Duration // purgeFilterIntervalMillis
	GracefulShutdownTimeout time.Duration // gracefulShutdownTimeoutMillis
	// ShutdownDrainDelay is how long /readyz answers 503 at the start of a graceful shutdown while
	// the API still serves, before the server stops accepting connections
	// (shutdownDrainDelayMillis). Load balancers and Kubernetes endpoints take a few seconds to
	// stop sending traffic to a pod; a few seconds here lets them, where a pod is behind one. 0,
	// the default, stops at once, as a process run by hand should (the precedent is
	// kube-apiserver's --shutdown-delay-duration); whoever deploys the data plane behind a Service
	// sets it.
	ShutdownDrainDelay time.Duration

	// MetricsMaxLabelledFilters caps the filters that get /metrics series of their own, labelled
	// with their names; the others count only in the totals (metricsMaxLabelledFilters).
	MetricsMaxLabelledFilters int

	// Persistence. InMemory turns it off (flag --in-memory, for tests and benchmarks).
	InMemory                                bool
	DataDir                                 string                        // persistentStorageDirectory (flag --data-dir wins)
	TriggerPersistenceCriteria              []TriggerPersistenceCriterion // triggerPersistenceCriteria
	AllowRecoverFromCorruptedPersistentFile bool
	// LogSync is when the log of updates reaches the disk: always, everysec or no (logSync,
	// flag --log-sync).
	LogSync string // allowRecoverFromCorruptedPersistentFile
	// ChannelBufferSizeForFilterPersistence is filter-service's
	// defaultChannelBufferSizeForFilterPersistence, the buffer between its filters and its
	// persistence thread. It is accepted and validated so that an existing configuration.yaml keeps
	// working, but nothing reads it: our snapshot and log writers size their own buffers.
	ChannelBufferSizeForFilterPersistence int

	// Replication across the pods of a cluster (docs/replication.md).
	// WriteConsistency is how many pods must hold a write before it is answered, unless the
	// request asks otherwise: one, quorum (a majority) or all (writeConsistency).
	WriteConsistency string
	// PodName is the pod's name when it runs in Kubernetes (env POD_NAME): a membership that
	// calls this pod by another name is refused.
	PodName string
	// AwaitMembership keeps /readyz at 503 until the operator has told the pod its peers and the
	// pod has caught up from them (awaitMembership). A pod run by hand is ready alone.
	AwaitMembership bool
	// ReplicationTimeout bounds how long a write waits for its peers (replicationTimeoutMillis).
	ReplicationTimeout time.Duration
	// AntiEntropyInterval is the period of the pass that compares filters with a peer and merges
	// what differs (antiEntropyIntervalSeconds); 0 turns it off.
	AntiEntropyInterval time.Duration

	// Logging.
	LogLevel  string // logLevel: debug, info, warn, error
	LogFormat string // logFormat: json or text
}

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
// within Period.
type TriggerPersistenceCriterion struct {
	Period          time.Duration // periodInSeconds
	UpdatesMoreThan int64         // updatesMoreThan
}

// Default is the configuration used when no file sets a key. The filter defaults are
// filter-service's.
func Default() Config {
	return Config{
		Port:                      8080,
		DefaultExpectedInsertions: 1_000_000,
		DefaultFPP:                0.0001,
		DefaultValidAfterCreate:   24 * time.Hour,
		MaxHTTPConnections:        1000,
		MaxHTTPRequestLength:      10 << 20,
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
		AllowRecoverFromCorruptedPersistentFile: true,
		ChannelBufferSizeForFilterPersistence:   102400,
		LogSync:                                 "everysec",
		WriteConsistency:                        "quorum",
		ReplicationTimeout:                      2 * time.Second,
		AntiEntropyInterval:                     30 * time.Second,
		LogLevel:                                "info",
		LogFormat:                               "json",
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
	if c.Port < 0 || c.Port > 65535 {
		check("--port", fmt.Errorf("must be between 0 and 65535, got %d", c.Port))
	}
	if strings.Contains(c.Address, ":") && net.ParseIP(c.Address) == nil {
		check("--bind-address", fmt.Errorf("must be a host name or an IP address without a port, got %q", c.Address))
	}
	check("defaultExpectedInsertions", rulePositive(c.DefaultExpectedInsertions))
	check("defaultFalsePositiveProbability", ruleProbability(c.DefaultFPP))
	check("defaultValidSecondsAfterCreate", ruleNonNegativeDuration(c.DefaultValidAfterCreate))
	check("maxHttpConnections", rulePositive(c.MaxHTTPConnections))
	check("maxHttpRequestLength", rulePositive(c.MaxHTTPRequestLength))
	check("requestTimeoutSeconds", rulePositiveDuration(c.RequestTimeout))
	check("idleTimeoutMillis", rulePositiveDuration(c.IdleTimeout))
	check("purgeFilterIntervalMillis", rulePositiveDuration(c.PurgeInterval))
	check("gracefulShutdownTimeoutMillis", ruleNonNegativeDuration(c.GracefulShutdownTimeout))
	check("shutdownDrainDelayMillis", ruleNonNegativeDuration(c.ShutdownDrainDelay))
	check("metricsMaxLabelledFilters", ruleNonNegative(c.MetricsMaxLabelledFilters))
	// 0 is the "not configured" value of the socket options, which the file cannot set.
	check("channelOptions.SO_RCVBUF", ruleNonNegative(c.ChannelOptions.SoRcvBuf))
	check("channelOptions.SO_SNDBUF", ruleNonNegative(c.ChannelOptions.SoSndBuf))
	check("channelOptions.SO_BACKLOG", ruleNonNegative(c.ChannelOptions.SoBacklog))
	if c.DataDir == "" {
		check("persistentStorageDirectory (or --data-dir)", errors.New("must not be empty"))
	}
	for i, tc := range c.TriggerPersistenceCriteria {
		check(fmt.Sprintf("triggerPersistenceCriteria[%d].periodInSeconds", i), rulePositiveDuration(tc.Period))
		check(fmt.Sprintf("triggerPersistenceCriteria[%d].updatesMoreThan", i), rulePositive(tc.UpdatesMoreThan))
	}
	check("defaultChannelBufferSizeForFilterPersistence", rulePositive(c.ChannelBufferSizeForFilterPersistence))
	check("logSync", ruleOneOf(c.LogSync, logSyncPolicies))
	check("writeConsistency", ruleOneOf(c.WriteConsistency, consistencyLevels))
	check("replicationTimeoutMillis", rulePositiveDuration(c.ReplicationTimeout))
	check("antiEntropyIntervalSeconds", ruleNonNegativeDuration(c.AntiEntropyInterval))
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

var (
	logLevels       = []string{"debug", "info", "warn", "error"}
	logSyncPolicies = []string{"always", "everysec", "no"}
	logFormats      = []string{"json", "text"}
	// consistencyLevels are api.Consistency's values.
	consistencyLevels = []string{"one", "quorum", "all"}
)

// The rules below are shared by Validate and Load; their messages leave the naming of the
// key to the caller.

func rulePositive[T int | int64 | uint64](v T) error {
	if v <= 0 {
		return fmt.Errorf("must be greater than 0, got %d", v)
	}
	return nil
}

func ruleNonNegative[T int | int64](v T) error {
	if v < 0 {
		return fmt.Errorf("must be 0 or greater, got %d", v)
	}
	return nil
}

func rulePositiveDuration(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be greater than 0, got %s", d)
	}
	return nil
}

func ruleNonNegativeDuration(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("must be 0 or greater, got %s", d)
	}
	return nil
}

func ruleProbability(p float64) error {
	if !(p > 0 && p < 1) { // also refuses NaN
		return fmt.Errorf("must be greater than 0 and less than 1, got %v", p)
	}
	return nil
}

func ruleOneOf(v string, allowed []string) error {
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("must be one of %s; got %q", strings.Join(allowed, ", "), v)
	}
	return nil
}

// LogValue presents the configuration under its YAML keys and in their units, so that the
// start-up log line reads like the file it came from.
func (c Config) LogValue() slog.Value {
	criteria := make([]criterionLog, len(c.TriggerPersistenceCriteria))
	for i, tc := range c.TriggerPersistenceCriteria {
		criteria[i] = criterionLog{PeriodInSeconds: secondsValue(tc.Period).Any(), UpdatesMoreThan: tc.UpdatesMoreThan}
	}
	return slog.GroupValue(
		slog.Int("port", c.Port),
		slog.String("address", c.Address),
		slog.Bool("docs", c.DocsEnabled),
		slog.Uint64("defaultExpectedInsertions", c.DefaultExpectedInsertions),
		slog.Float64("defaultFalsePositiveProbability", c.DefaultFPP),
		slog.Attr{Key: "defaultValidSecondsAfterCreate", Value: secondsValue(c.DefaultValidAfterCreate)},
		slog.Uint64("maxFilterBytes", c.MaxFilterBytes),
		slog.Uint64("maxTotalBytes", c.MaxTotalBytes),
		slog.Int("maxHttpConnections", c.MaxHTTPConnections),
		slog.Int64("maxHttpRequestLength", c.MaxHTTPRequestLength),
		slog.Attr{Key: "requestTimeoutSeconds", Value: secondsValue(c.RequestTimeout)},
		slog.Int64("idleTimeoutMillis", c.IdleTimeout.Milliseconds()),
		slog.Int64("purgeFilterIntervalMillis", c.PurgeInterval.Milliseconds()),
		slog.Int64("gracefulShutdownTimeoutMillis", c.GracefulShutdownTimeout.Milliseconds()),
		slog.Int64("shutdownDrainDelayMillis", c.ShutdownDrainDelay.Milliseconds()),
		slog.Int("metricsMaxLabelledFilters", c.MetricsMaxLabelledFilters),
		slog.Group("channelOptions",
			slog.Int("SO_RCVBUF", c.ChannelOptions.SoRcvBuf),
			slog.Int("SO_SNDBUF", c.ChannelOptions.SoSndBuf),
			slog.Int("SO_BACKLOG", c.ChannelOptions.SoBacklog),
			slog.Bool("TCP_NODELAY", c.ChannelOptions.TCPNoDelay),
		),
		slog.Bool("inMemory", c.InMemory),
		slog.String("persistentStorageDirectory", c.DataDir),
		slog.Any("triggerPersistenceCriteria", criteria),
		slog.Bool("allowRecoverFromCorruptedPersistentFile", c.AllowRecoverFromCorruptedPersistentFile),
		slog.Int("defaultChannelBufferSizeForFilterPersistence", c.ChannelBufferSizeForFilterPersistence),
		slog.String("logSync", c.LogSync),
		slog.String("writeConsistency", c.WriteConsistency),
		slog.String("podName", c.PodName),
		slog.Bool("awaitMembership", c.AwaitMembership),
		slog.Int64("replicationTimeoutMillis", c.ReplicationTimeout.Milliseconds()),
		slog.Attr{Key: "antiEntropyIntervalSeconds", Value: secondsValue(c.AntiEntropyInterval)},
		slog.String("logLevel", c.LogLevel),
		slog.String("logFormat", c.LogFormat),
	)
}

// criterionLog is a TriggerPersistenceCriterion as the file writes it, in JSON and in text logs.
type criterionLog struct {
	PeriodInSeconds any   `json:"periodInSeconds"`
	UpdatesMoreThan int64 `json:"updatesMoreThan"`
}

func (c criterionLog) String() string {
	return fmt.Sprintf("{periodInSeconds: %v, updatesMoreThan: %d}", c.PeriodInSeconds, c.UpdatesMoreThan)
}

// secondsValue is a whole number of seconds as an integer (large values would otherwise print as
// 1.2096e+06) and anything finer as a fraction.
func secondsValue(d time.Duration) slog.Value {
	if d%time.Second == 0 {
		return slog.Int64Value(int64(d / time.Second))
	}
	return slog.Float64Value(d.Seconds())
}

// CheckLogLevel checks a --log-level value.
func CheckLogLevel(v string) error { return ruleOneOf(v, logLevels) }

// CheckLogFormat checks a --log-format value.
func CheckLogFormat(v string) error { return ruleOneOf(v, logFormats) }
