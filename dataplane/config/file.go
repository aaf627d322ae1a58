package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// File is the YAML configuration file, one field a key. The keys are filter-service's where it
// has one, so that an existing configuration.yaml keeps working. A nil field is a key the file
// leaves out: the data plane takes it from Default, and the operator writes only the keys it
// means to set. The check tag names the rule a value must pass when it is loaded: positive,
// nonNegative, probability, nonEmpty or port. An enum must be one of its values.
type File struct {
	InternalPort              *int      `yaml:"internalPort,omitempty" check:"port"`
	OpsPort                   *int      `yaml:"opsPort,omitempty" check:"port"`
	RESPPort                  *int      `yaml:"respPort,omitempty" check:"port"`
	RESPPasswordFile          *string   `yaml:"respPasswordFile,omitempty" check:"nonEmpty"`
	RESPMaxClients            *int      `yaml:"respMaxClients,omitempty" check:"positive"`
	RESPTimeout               *Seconds  `yaml:"respTimeoutSeconds,omitempty" check:"nonNegative"`
	RESPMaxBulkLength         *ByteSize `yaml:"respMaxBulkLength,omitempty"`
	RESPMaxCommandLength      *ByteSize `yaml:"respMaxCommandLength,omitempty"`
	RESPDisabledCommands      *[]string `yaml:"respDisabledCommands,omitempty"`
	RESPInitialSize           *int64    `yaml:"respInitialSize,omitempty" check:"positive"`
	RESPErrorRate             *float64  `yaml:"respErrorRate,omitempty" check:"probability"`
	InternalTokenFile         *string   `yaml:"internalTokenFile,omitempty" check:"nonEmpty"`
	TLSCertFile               *string   `yaml:"tlsCertFile,omitempty" check:"nonEmpty"`
	TLSKeyFile                *string   `yaml:"tlsKeyFile,omitempty" check:"nonEmpty"`
	TLSCAFile                 *string   `yaml:"tlsCAFile,omitempty" check:"nonEmpty"`
	DefaultExpectedInsertions *int64    `yaml:"defaultExpectedInsertions,omitempty" check:"positive"`
	DefaultFPP                *float64  `yaml:"defaultFalsePositiveProbability,omitempty" check:"probability"`
	// Unlike filter-service, 0 is allowed: filters created without an expiry never expire.
	DefaultValidAfterCreate *Seconds  `yaml:"defaultValidSecondsAfterCreate,omitempty" check:"nonNegative"`
	MaxFilterBytes          *ByteSize `yaml:"maxFilterBytes,omitempty"`
	MaxTotalBytes           *ByteSize `yaml:"maxTotalBytes,omitempty"`
	MaxFilters              *int      `yaml:"maxFilters,omitempty" check:"positive"`
	MaxHTTPConnections      *int      `yaml:"maxHttpConnections,omitempty" check:"positive"`
	MaxOpsConnections       *int      `yaml:"maxOpsConnections,omitempty" check:"positive"`
	MaxDumpBytes            *ByteSize `yaml:"maxDumpBytes,omitempty"`
	MaxHTTPRequestLength    *int64    `yaml:"maxHttpRequestLength,omitempty" check:"positive"`
	MaxRequestBytesInFlight *ByteSize `yaml:"maxRequestBytesInFlight,omitempty"`
	RequestTimeout          *Seconds  `yaml:"requestTimeoutSeconds,omitempty" check:"positive"`
	// RequestTimeoutAlias is filter-service's older name of requestTimeoutSeconds; a file that sets
	// both is refused rather than have one silently win.
	RequestTimeoutAlias       *Seconds            `yaml:"defaultRequestTimeoutSeconds,omitempty" check:"positive" aliasOf:"requestTimeoutSeconds"`
	IdleTimeout               *Millis             `yaml:"idleTimeoutMillis,omitempty" check:"positive"`
	PurgeInterval             *Millis             `yaml:"purgeFilterIntervalMillis,omitempty" check:"positive"`
	GracefulShutdownTimeout   *Millis             `yaml:"gracefulShutdownTimeoutMillis,omitempty" check:"nonNegative"`
	ShutdownDrainDelay        *Millis             `yaml:"shutdownDrainDelayMillis,omitempty" check:"nonNegative"`
	MetricsMaxLabelledFilters *int                `yaml:"metricsMaxLabelledFilters,omitempty" check:"nonNegative"`
	ChannelOptions            *FileChannelOptions `yaml:"channelOptions,omitempty"`
	// DataDir null or "" is the default directory, as filter-service reads it.
	DataDir *OrDefault `yaml:"persistentStorageDirectory,omitempty"`
	// TriggerPersistenceCriteria replaces the default criteria. An empty list, and for
	// filter-service's sake a null one, turns periodic snapshots off.
	TriggerPersistenceCriteria              *[]FileCriterion `yaml:"triggerPersistenceCriteria,omitempty"`
	SnapshotLogBytes                        *ByteSize        `yaml:"snapshotLogBytes,omitempty"`
	AllowRecoverFromCorruptedPersistentFile *bool            `yaml:"allowRecoverFromCorruptedPersistentFile,omitempty"`
	AllowStartWithLowDiskSpace              *bool            `yaml:"allowStartWithLowDiskSpace,omitempty"`
	ChannelBufferSizeForFilterPersistence   *int             `yaml:"defaultChannelBufferSizeForFilterPersistence,omitempty" check:"positive"`
	// ChannelBufferSizeAlias is the name filter-service's shipped configuration.yaml uses.
	ChannelBufferSizeAlias *int `yaml:"channelBufferSizeForFilterPersistence,omitempty" check:"positive" aliasOf:"defaultChannelBufferSizeForFilterPersistence"`
	// Keys of filter-service that Bloomery has no use for: accepted, so that its files start
	// Bloomery unchanged, and named in a warning at start (Ignored).
	MetricsPrefix                     *string           `yaml:"metricsPrefix,omitempty" ignored:"Bloomery's metrics are named bloomery_*"`
	MaxWorkerThreadPoolSize           *int              `yaml:"maxWorkerThreadPoolSize,omitempty" ignored:"Go schedules the requests: there is no worker pool to size"`
	GracefulShutdownQuietPeriodMillis *Millis           `yaml:"gracefulShutdownQuietPeriodMillis,omitempty" ignored:"see shutdownDrainDelayMillis and gracefulShutdownTimeoutMillis"`
	LogSync                           *LogSync          `yaml:"logSync,omitempty"`
	WriteConsistency                  *wire.Consistency `yaml:"writeConsistency,omitempty"`
	AwaitMembership                   *bool             `yaml:"awaitMembership,omitempty"`
	ReplicationTimeout                *Millis           `yaml:"replicationTimeoutMillis,omitempty" check:"positive"`
	HomeLease                         *Seconds          `yaml:"homeLeaseSeconds,omitempty" check:"nonNegative"`
	AntiEntropyInterval               *Seconds          `yaml:"antiEntropyIntervalSeconds,omitempty" check:"nonNegative"`
	AllowClientMerges                 *bool             `yaml:"allowClientMerges,omitempty"`
	LogLevel                          *LogLevel         `yaml:"logLevel,omitempty"`
	LogFormat                         *LogFormat        `yaml:"logFormat,omitempty"`
}

// FileChannelOptions are the file's channelOptions. It cannot set 0, which in ChannelOptions
// means the kernel's default.
type FileChannelOptions struct {
	SoRcvBuf   *int  `yaml:"SO_RCVBUF,omitempty" check:"positive"`
	SoSndBuf   *int  `yaml:"SO_SNDBUF,omitempty" check:"positive"`
	SoBacklog  *int  `yaml:"SO_BACKLOG,omitempty" check:"positive"`
	TCPNoDelay *bool `yaml:"TCP_NODELAY,omitempty"`
}

// FileCriterion is one of the file's triggerPersistenceCriteria; both keys are required.
type FileCriterion struct {
	Period          Seconds `yaml:"periodInSeconds" check:"positive"`
	UpdatesMoreThan int64   `yaml:"updatesMoreThan" check:"positive"`
}

// apply sets over c the keys f sets.
func (f File) apply(c *Config) {
	set(&c.InternalPort, f.InternalPort)
	set(&c.OpsPort, f.OpsPort)
	set(&c.RESPPort, f.RESPPort)
	set(&c.RESPPasswordFile, f.RESPPasswordFile)
	set(&c.RESPMaxClients, f.RESPMaxClients)
	setDuration(&c.RESPTimeout, f.RESPTimeout)
	setByteLength(&c.RESPMaxBulkLength, f.RESPMaxBulkLength)
	setByteLength(&c.RESPMaxCommandLength, f.RESPMaxCommandLength)
	if f.RESPDisabledCommands != nil && len(*f.RESPDisabledCommands) > 0 { // [] is the default, none
		c.RESPDisabledCommands = slices.Clone(*f.RESPDisabledCommands)
	}
	if f.RESPInitialSize != nil {
		c.RESPInitialSize = uint64(*f.RESPInitialSize) // positive once loaded
	}
	set(&c.RESPErrorRate, f.RESPErrorRate)
	set(&c.InternalTokenFile, f.InternalTokenFile)
	set(&c.TLSCertFile, f.TLSCertFile)
	set(&c.TLSKeyFile, f.TLSKeyFile)
	set(&c.TLSCAFile, f.TLSCAFile)
	if f.DefaultExpectedInsertions != nil {
		c.DefaultExpectedInsertions = uint64(*f.DefaultExpectedInsertions) // positive once loaded
	}
	set(&c.DefaultFPP, f.DefaultFPP)
	setDuration(&c.DefaultValidAfterCreate, f.DefaultValidAfterCreate)
	setBytes(&c.MaxFilterBytes, f.MaxFilterBytes)
	setBytes(&c.MaxTotalBytes, f.MaxTotalBytes)
	set(&c.MaxFilters, f.MaxFilters)
	set(&c.MaxHTTPConnections, f.MaxHTTPConnections)
	set(&c.MaxOpsConnections, f.MaxOpsConnections)
	setBytes(&c.MaxDumpBytes, f.MaxDumpBytes)
	set(&c.MaxHTTPRequestLength, f.MaxHTTPRequestLength)
	setBytes(&c.MaxRequestBytesInFlight, f.MaxRequestBytesInFlight)
	setDuration(&c.RequestTimeout, f.RequestTimeoutAlias)
	setDuration(&c.RequestTimeout, f.RequestTimeout)
	setDuration(&c.IdleTimeout, f.IdleTimeout)
	setDuration(&c.PurgeInterval, f.PurgeInterval)
	setDuration(&c.GracefulShutdownTimeout, f.GracefulShutdownTimeout)
	setDuration(&c.ShutdownDrainDelay, f.ShutdownDrainDelay)
	set(&c.MetricsMaxLabelledFilters, f.MetricsMaxLabelledFilters)
	if o := f.ChannelOptions; o != nil {
		set(&c.ChannelOptions.SoRcvBuf, o.SoRcvBuf)
		set(&c.ChannelOptions.SoSndBuf, o.SoSndBuf)
		set(&c.ChannelOptions.SoBacklog, o.SoBacklog)
		set(&c.ChannelOptions.TCPNoDelay, o.TCPNoDelay)
	}
	if f.DataDir != nil && *f.DataDir != "" {
		c.DataDir = string(*f.DataDir)
	}
	if f.TriggerPersistenceCriteria != nil {
		c.TriggerPersistenceCriteria = make([]TriggerPersistenceCriterion, len(*f.TriggerPersistenceCriteria))
		for i, fc := range *f.TriggerPersistenceCriteria {
			c.TriggerPersistenceCriteria[i] = TriggerPersistenceCriterion{Period: time.Duration(fc.Period), UpdatesMoreThan: fc.UpdatesMoreThan}
		}
	}
	setBytes(&c.SnapshotLogBytes, f.SnapshotLogBytes)
	set(&c.AllowRecoverFromCorruptedPersistentFile, f.AllowRecoverFromCorruptedPersistentFile)
	set(&c.AllowStartWithLowDiskSpace, f.AllowStartWithLowDiskSpace)
	set(&c.ChannelBufferSizeForFilterPersistence, f.ChannelBufferSizeAlias)
	set(&c.ChannelBufferSizeForFilterPersistence, f.ChannelBufferSizeForFilterPersistence)
	set(&c.LogSync, f.LogSync)
	set(&c.WriteConsistency, f.WriteConsistency)
	set(&c.AwaitMembership, f.AwaitMembership)
	setDuration(&c.ReplicationTimeout, f.ReplicationTimeout)
	setDuration(&c.HomeLease, f.HomeLease)
	setDuration(&c.AntiEntropyInterval, f.AntiEntropyInterval)
	set(&c.AllowClientMerges, f.AllowClientMerges)
	set(&c.LogLevel, f.LogLevel)
	set(&c.LogFormat, f.LogFormat)
}

func set[T any](dst, src *T) {
	if src != nil {
		*dst = *src
	}
}

func setDuration[U Seconds | Millis](dst *time.Duration, src *U) {
	if src != nil {
		*dst = time.Duration(*src)
	}
}

func setBytes(dst *uint64, src *ByteSize) {
	if src != nil {
		*dst = uint64(*src)
	}
}

// setByteLength sets a length in bytes that Go holds as an int64, as slices' lengths are: a size
// beyond that is no limit at all, and is kept as the largest.
func setByteLength(dst *int64, src *ByteSize) {
	if src != nil {
		*dst = int64(min(uint64(*src), math.MaxInt64))
	}
}

// file is c as a file that sets every key but the alias, so that it logs under the file's keys.
func (c Config) file() File {
	criteria := make([]FileCriterion, len(c.TriggerPersistenceCriteria))
	for i, tc := range c.TriggerPersistenceCriteria {
		criteria[i] = FileCriterion{Period: Seconds(tc.Period), UpdatesMoreThan: tc.UpdatesMoreThan}
	}
	o := c.ChannelOptions
	return File{
		InternalTokenFile:         optionalPath(c.InternalTokenFile),
		TLSCertFile:               optionalPath(c.TLSCertFile),
		TLSKeyFile:                optionalPath(c.TLSKeyFile),
		TLSCAFile:                 optionalPath(c.TLSCAFile),
		InternalPort:              new(c.InternalPort),
		OpsPort:                   new(c.OpsPort),
		RESPPort:                  new(c.RESPPort),
		RESPPasswordFile:          optionalPath(c.RESPPasswordFile),
		RESPMaxClients:            new(c.RESPMaxClients),
		RESPTimeout:               new(Seconds(c.RESPTimeout)),
		RESPMaxBulkLength:         new(ByteSize(c.RESPMaxBulkLength)),
		RESPMaxCommandLength:      new(ByteSize(c.RESPMaxCommandLength)),
		RESPDisabledCommands:      new(append([]string{}, c.RESPDisabledCommands...)),
		RESPInitialSize:           new(int64(c.RESPInitialSize)),
		RESPErrorRate:             new(c.RESPErrorRate),
		DefaultExpectedInsertions: new(int64(c.DefaultExpectedInsertions)),
		DefaultFPP:                new(c.DefaultFPP),
		DefaultValidAfterCreate:   new(Seconds(c.DefaultValidAfterCreate)),
		MaxFilterBytes:            new(ByteSize(c.MaxFilterBytes)),
		MaxTotalBytes:             new(ByteSize(c.MaxTotalBytes)),
		MaxFilters:                new(c.MaxFilters),
		MaxHTTPConnections:        new(c.MaxHTTPConnections),
		MaxOpsConnections:         new(c.MaxOpsConnections),
		MaxDumpBytes:              new(ByteSize(c.MaxDumpBytes)),
		MaxHTTPRequestLength:      new(c.MaxHTTPRequestLength),
		MaxRequestBytesInFlight:   new(ByteSize(c.MaxRequestBytesInFlight)),
		RequestTimeout:            new(Seconds(c.RequestTimeout)),
		IdleTimeout:               new(Millis(c.IdleTimeout)),
		PurgeInterval:             new(Millis(c.PurgeInterval)),
		GracefulShutdownTimeout:   new(Millis(c.GracefulShutdownTimeout)),
		ShutdownDrainDelay:        new(Millis(c.ShutdownDrainDelay)),
		MetricsMaxLabelledFilters: new(c.MetricsMaxLabelledFilters),
		ChannelOptions: &FileChannelOptions{
			SoRcvBuf: new(o.SoRcvBuf), SoSndBuf: new(o.SoSndBuf), SoBacklog: new(o.SoBacklog), TCPNoDelay: new(o.TCPNoDelay),
		},
		DataDir:                                 new(OrDefault(c.DataDir)),
		TriggerPersistenceCriteria:              &criteria,
		SnapshotLogBytes:                        new(ByteSize(c.SnapshotLogBytes)),
		AllowRecoverFromCorruptedPersistentFile: new(c.AllowRecoverFromCorruptedPersistentFile),
		AllowStartWithLowDiskSpace:              new(c.AllowStartWithLowDiskSpace),
		ChannelBufferSizeForFilterPersistence:   new(c.ChannelBufferSizeForFilterPersistence),
		LogSync:                                 new(c.LogSync),
		WriteConsistency:                        new(c.WriteConsistency),
		AwaitMembership:                         new(c.AwaitMembership),
		ReplicationTimeout:                      new(Millis(c.ReplicationTimeout)),
		HomeLease:                               new(Seconds(c.HomeLease)),
		AntiEntropyInterval:                     new(Seconds(c.AntiEntropyInterval)),
		AllowClientMerges:                       new(c.AllowClientMerges),
		LogLevel:                                new(c.LogLevel),
		LogFormat:                               new(c.LogFormat),
	}
}

// OrDefault is a string for which null and "" mean the default, as filter-service reads its
// persistentStorageDirectory.
type OrDefault string

// UnmarshalYAML takes a string, or null for "".
func (o *OrDefault) UnmarshalYAML(n *yaml.Node) error {
	if n.ShortTag() == "!!null" {
		*o = ""
		return nil
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return wrongType("a string", n)
	}
	*o = OrDefault(n.Value)
	return nil
}

// Ignored names the keys f sets that Bloomery has no use for, each with why.
func (f File) Ignored() map[string]string {
	ignored := map[string]string{}
	v := reflect.ValueOf(f)
	for _, field := range reflect.VisibleFields(v.Type()) {
		if why := field.Tag.Get("ignored"); why != "" && !v.FieldByIndex(field.Index).IsNil() {
			ignored[yamlKey(field)] = why
		}
	}
	return ignored
}

// optionalPath is a path as a key: none is no key, since the file cannot say "".
func optionalPath(path string) *string {
	if path == "" {
		return nil
	}
	return &path
}

// Seconds is a duration the file writes as a whole number of seconds, as its key's name says.
type Seconds time.Duration

// Millis is a duration the file writes as a whole number of milliseconds.
type Millis time.Duration

// UnmarshalYAML takes an integer count of seconds.
func (s *Seconds) UnmarshalYAML(n *yaml.Node) error {
	return decodeCount(n, time.Second, (*time.Duration)(s))
}

// UnmarshalYAML takes an integer count of milliseconds.
func (m *Millis) UnmarshalYAML(n *yaml.Node) error {
	return decodeCount(n, time.Millisecond, (*time.Duration)(m))
}

// MarshalYAML writes the count of seconds.
func (s Seconds) MarshalYAML() (any, error) { return count(time.Duration(s), time.Second), nil }

// MarshalYAML writes the count of milliseconds.
func (m Millis) MarshalYAML() (any, error) { return count(time.Duration(m), time.Millisecond), nil }

// String is the count of seconds, so that a problem quotes the value as the file wrote it.
func (s Seconds) String() string { return fmt.Sprint(count(time.Duration(s), time.Second)) }

// String is the count of milliseconds, so that a problem quotes the value as the file wrote it.
func (m Millis) String() string { return fmt.Sprint(count(time.Duration(m), time.Millisecond)) }

// LogValue is the count of seconds, so that the start-up log reads like the file.
func (s Seconds) LogValue() slog.Value { return slog.AnyValue(count(time.Duration(s), time.Second)) }

// LogValue is the count of milliseconds, so that the start-up log reads like the file.
func (m Millis) LogValue() slog.Value {
	return slog.AnyValue(count(time.Duration(m), time.Millisecond))
}

// count is d in units: an integer when whole (large values would otherwise print as 1.2096e+06),
// else a fraction.
func count(d, unit time.Duration) any {
	if d%unit == 0 {
		return int64(d / unit)
	}
	return float64(d) / float64(unit)
}

// decodeCount reads an integer count of unit into d.
func decodeCount(n *yaml.Node, unit time.Duration, d *time.Duration) error {
	v, err := decodeInt(n)
	if err != nil {
		return err
	}
	limit := int64(math.MaxInt64 / unit)
	switch {
	case v > limit:
		return fmt.Errorf("must be at most %d, got %d", limit, v)
	case v < -limit:
		return fmt.Errorf("must be at least %d, got %d", -limit, v)
	}
	*d = time.Duration(v) * unit
	return nil
}

// ByteSize is a count of bytes: an integer, or a string with a Kubernetes quantity's suffix
// ("512Mi", "2Gi", "1G"), as a BloomCluster's limits are written.
type ByteSize uint64

// UnmarshalYAML takes an integer or a string with a suffix.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	switch tag := n.ShortTag(); {
	case tag == "!!int" || tag == "!!float" && isDecimalInteger(n.Value):
		v, err := decodeInt(n)
		if err != nil {
			return err
		}
		if err := ruleNonNegative(v); err != nil {
			return err
		}
		*b = ByteSize(v)
	case tag == "!!str":
		v, err := parseByteSize(n.Value)
		if err != nil {
			return fmt.Errorf("invalid byte size %q: %w", n.Value, err)
		}
		*b = ByteSize(v)
	default:
		return wrongType(`a byte size (an integer, or a string such as "512Mi" or "2Gi")`, n)
	}
	return nil
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
