package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	tests := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"port too large", func(c *Config) { c.Port = 65536 }, "--port: must be between 0 and 65535, got 65536"},
		{"negative port", func(c *Config) { c.Port = -1 }, "--port: must be between 0 and 65535, got -1"},
		{"address with a port", func(c *Config) { c.Address = "127.0.0.1:80" }, `--bind-address: must be a host name or an IP address without a port, got "127.0.0.1:80"`},
		{"empty data directory", func(c *Config) { c.DataDir = "" }, "persistentStorageDirectory (or --data-dir): must not be empty"},
		{"no expected insertions", func(c *Config) { c.DefaultExpectedInsertions = 0 }, "defaultExpectedInsertions: must be greater than 0, got 0"},
		{"probability NaN", func(c *Config) { c.DefaultFPP = math.NaN() }, "defaultFalsePositiveProbability: must be greater than 0 and less than 1, got NaN"},
		{"negative expiry", func(c *Config) { c.DefaultValidAfterCreate = -time.Second }, "defaultValidSecondsAfterCreate: must be 0 or greater, got -1s"},
		{"no connections", func(c *Config) { c.MaxHTTPConnections = 0 }, "maxHttpConnections: must be greater than 0, got 0"},
		{"no request length", func(c *Config) { c.MaxHTTPRequestLength = -1 }, "maxHttpRequestLength: must be greater than 0, got -1"},
		{"no request timeout", func(c *Config) { c.RequestTimeout = 0 }, "requestTimeoutSeconds: must be greater than 0, got 0s"},
		{"no idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "idleTimeoutMillis: must be greater than 0, got 0s"},
		{"no purge interval", func(c *Config) { c.PurgeInterval = 0 }, "purgeFilterIntervalMillis: must be greater than 0, got 0s"},
		{"negative shutdown timeout", func(c *Config) { c.GracefulShutdownTimeout = -time.Millisecond }, "gracefulShutdownTimeoutMillis: must be 0 or greater, got -1ms"},
		{"negative drain delay", func(c *Config) { c.ShutdownDrainDelay = -time.Second }, "shutdownDrainDelayMillis: must be 0 or greater, got -1s"},
		{"negative labelled filters", func(c *Config) { c.MetricsMaxLabelledFilters = -1 }, "metricsMaxLabelledFilters: must be 0 or greater, got -1"},
		{"negative SO_RCVBUF", func(c *Config) { c.ChannelOptions.SoRcvBuf = -1 }, "channelOptions.SO_RCVBUF: must be 0 or greater, got -1"},
		{"bad criterion", func(c *Config) {
			c.TriggerPersistenceCriteria = []TriggerPersistenceCriterion{{Period: time.Second, UpdatesMoreThan: 1}, {Period: 0, UpdatesMoreThan: 1}}
		}, "triggerPersistenceCriteria[1].periodInSeconds: must be greater than 0, got 0s"},
		{"no persistence buffer", func(c *Config) { c.ChannelBufferSizeForFilterPersistence = 0 }, "defaultChannelBufferSizeForFilterPersistence: must be greater than 0, got 0"},
		{"log level", func(c *Config) { c.LogLevel = "trace" }, `logLevel: must be one of debug, info, warn, error; got "trace"`},
		{"log format", func(c *Config) { c.LogFormat = "" }, `logFormat: must be one of json, text; got ""`},
		{"internal port too large", func(c *Config) { c.InternalPort = 65536 }, "internalPort (or --internal-port): must be between 0 and 65535, got 65536"},
		{"ops port on the client port", func(c *Config) { c.OpsPort = c.Port }, "ports: --port and opsPort are both 8080"},
		{"resp port too large", func(c *Config) { c.RESPPort = 65536 }, "respPort (or --resp-port): must be between 0 and 65535, got 65536"},
		{"resp port on the ops port", func(c *Config) { c.RESPPort = c.OpsPort }, "ports: opsPort and respPort are both 9090"},
		{"resp password without a resp port", func(c *Config) { c.RESPPasswordFile = "/p" },
			"respPasswordFile (or --resp-password-file): needs respPort: the password is the RESP port's, and no RESP port is open"},
		{"internal port on the ops port", func(c *Config) { c.InternalTokenFile, c.InternalPort = "/token", c.OpsPort },
			"ports: internalPort and opsPort are both 9090"},
		{"awaiting a membership that cannot come", func(c *Config) { c.AwaitMembership = true },
			"awaitMembership: needs internalTokenFile: without it the internal port stays closed and no membership can reach the pod"},
		{"certificate without its key", func(c *Config) { c.TLSCertFile = "/tls.crt" }, "tls: tlsCertFile and tlsKeyFile go together: set both or neither"},
		{"CA without a certificate", func(c *Config) { c.TLSCAFile = "/ca.crt" }, "tls: tlsCAFile needs tlsCertFile and tlsKeyFile"},
		{"peers that cannot verify each other", func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.InternalTokenFile = "/tls.crt", "/tls.key", "/token" },
			"tls: tlsCAFile is needed with tlsCertFile and internalTokenFile: the pods of a cluster verify each other against it"},
		{"every problem at once", func(c *Config) { c.Port = 70000; c.LogFormat = "xml" },
			`--port: must be between 0 and 65535, got 70000; logFormat: must be one of json, text; got "xml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %s", err, tt.want)
			}
		})
	}

	for _, ok := range []func(c *Config){
		func(c *Config) { c.Port = 0 },
		func(c *Config) { c.Port = 65535 },
		func(c *Config) { c.Address = "::1" },
		func(c *Config) { c.Address = "localhost" },
		func(c *Config) { c.TriggerPersistenceCriteria = nil },
		func(c *Config) { c.DefaultValidAfterCreate = 0 },
		func(c *Config) { c.MetricsMaxLabelledFilters = 0 },
		func(c *Config) { c.InternalPort = c.Port }, // not opened without a token file
		func(c *Config) { c.RESPPort = 6379 },
		func(c *Config) { c.Port, c.InternalPort, c.OpsPort, c.InternalTokenFile = 0, 0, 0, "/token" },
		func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "/tls.crt", "/tls.key" }, // a server alone
	} {
		c := Default()
		ok(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", c, err)
		}
	}
}

func TestValidateErrorsUnwrap(t *testing.T) {
	c := Default()
	c.Port, c.LogLevel = -1, "loud"
	var joined interface{ Unwrap() []error }
	if err := c.Validate(); !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Errorf("Validate() = %#v, want two wrapped problems", err)
	}
}

// The start-up line must read like the file: YAML keys, and seconds and milliseconds as the keys say.
func TestConfigLogValue(t *testing.T) {
	c := Default()
	c.RequestTimeout = 1500 * time.Millisecond
	c.DefaultValidAfterCreate = 14 * 24 * time.Hour
	c.IdleTimeout = 2 * time.Second
	c.TriggerPersistenceCriteria = []TriggerPersistenceCriterion{{Period: time.Minute, UpdatesMoreThan: 7}}
	c.ChannelOptions.SoRcvBuf = 65536
	c.MaxTotalBytes = 1 << 30

	// None is no key.
	c.InternalTokenFile, c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "/etc/bloomery/token", "/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt"
	c.RESPPasswordFile = "/etc/bloomery/resp/password"
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("Starting data plane", "config", c)
	var line struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	want := map[string]any{
		"requestTimeoutSeconds":          1.5,
		"defaultValidSecondsAfterCreate": float64(1209600),
		"idleTimeoutMillis":              float64(2000),
		"maxTotalBytes":                  float64(1 << 30),
		"persistentStorageDirectory":     "data",
		"logFormat":                      "json",
		"channelOptions":                 map[string]any{"SO_RCVBUF": float64(65536), "SO_SNDBUF": float64(0), "SO_BACKLOG": float64(0), "TCP_NODELAY": true},
		"triggerPersistenceCriteria":     []any{map[string]any{"periodInSeconds": float64(60), "updatesMoreThan": float64(7)}},
	}
	for key, value := range want {
		if got := line.Config[key]; !reflect.DeepEqual(got, value) {
			t.Errorf("config.%s = %#v, want %#v", key, got, value)
		}
	}
	if !strings.Contains(buf.String(), `"defaultValidSecondsAfterCreate":1209600,`) {
		t.Errorf("large whole seconds should print as an integer: %s", buf.String())
	}
	if n := reflect.TypeFor[Config]().NumField(); len(line.Config) != n {
		t.Errorf("logged %d keys for the %d fields of Config: %v", len(line.Config), n, line.Config)
	}
}

// The RESP port's command limits follow maxHttpRequestLength unless set, an argument is never
// larger than its command, and a command that the budget of bytes in flight could never hold is
// refused at start.
func TestRESPCommandLimits(t *testing.T) {
	c := Default()
	c.MaxHTTPRequestLength = 1 << 20
	if bulk, command := c.RESPCommandLimits(); bulk != 1<<20 || command != 1<<20 {
		t.Errorf("defaults: %d, %d; want maxHttpRequestLength for both", bulk, command)
	}
	c.RESPMaxBulkLength, c.RESPMaxCommandLength = 8<<20, 2<<20
	if bulk, command := c.RESPCommandLimits(); bulk != 2<<20 || command != 2<<20 {
		t.Errorf("a bulk larger than its command: %d, %d; want the command's for both", bulk, command)
	}
	c.RESPMaxCommandLength = int64(c.MaxRequestBytesInFlight) + 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "respMaxCommandLength: must be at most maxRequestBytesInFlight") {
		t.Errorf("a command larger than the budget: %v", err)
	}
}
