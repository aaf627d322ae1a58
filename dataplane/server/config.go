package server

import (
	"time"
)

// Config is the data plane's effective configuration. Its YAML keys are filter-service's where
// filter-service has one, so an existing configuration.yaml keeps working.
type Config struct {
	// Port is where the HTTP API listens (flag -p).
	Port int
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

	// Persistence.
	DataDir                                 string                        // persistentStorageDirectory (flag --data-dir wins)
	TriggerPersistenceCriteria              []TriggerPersistenceCriterion // triggerPersistenceCriteria
	AllowRecoverFromCorruptedPersistentFile bool                          // allowRecoverFromCorruptedPersistentFile

	// Logging.
	LogLevel  string // logLevel: debug, info, warn, error
	LogFormat string // logFormat: json or text
}

// ChannelOptions are filter-service's socket options (channelOptions).
type ChannelOptions struct {
	SoRcvBuf   int  // SO_RCVBUF, bytes; 0 leaves the kernel default
	SoSndBuf   int  // SO_SNDBUF, bytes; 0 leaves the kernel default
	SoBacklog  int  // SO_BACKLOG; accepted for compatibility, Go uses the kernel's somaxconn
	TCPNoDelay bool // TCP_NODELAY
}

// TriggerPersistenceCriterion asks for a snapshot when more than UpdatesMoreThan updates happened
// within Period.
type TriggerPersistenceCriterion struct {
	Period          time.Duration // periodInSeconds
	UpdatesMoreThan int64         // updatesMoreThan
}

// DefaultConfig is the configuration used when no file sets a key. The filter defaults are
// filter-service's.
func DefaultConfig() Config {
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
		DataDir:                   "data",
		TriggerPersistenceCriteria: []TriggerPersistenceCriterion{
			{Period: 300 * time.Second, UpdatesMoreThan: 100},
		},
		AllowRecoverFromCorruptedPersistentFile: true,
		LogLevel:                                "info",
		LogFormat:                               "json",
	}
}
