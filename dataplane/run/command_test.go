package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/bloomery/bloomery/dataplane/config"
)

// parseFlags parses args as `bloomery dataplane` would and builds the configuration.
func parseFlags(t *testing.T, terminal bool, args ...string) (config.Config, error) {
	t.Helper()
	var o dataPlaneFlags
	fs := pflag.NewFlagSet("dataplane", pflag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	cfg, _, err := o.config(fs, terminal)
	return cfg, err
}

// Logs are JSON for collectors and text for people at a terminal, unless the file or a flag says.
func TestLogFlags(t *testing.T) {
	jsonFile := filepath.Join(t.TempDir(), "json.yaml")
	if err := os.WriteFile(jsonFile, []byte("logFormat: json\nlogLevel: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		terminal      bool
		args          []string
		level, format string
	}{
		{"defaults, piped", false, nil, "info", "json"},
		{"defaults, at a terminal", true, nil, "info", "text"},
		{"the file decides at a terminal too", true, []string{"-c", jsonFile}, "warn", "json"},
		{"flags win over the file", true, []string{"-c", jsonFile, "--log-level", "debug", "--log-format", "text"}, "debug", "text"},
		{"json asked for at a terminal", true, []string{"--log-format", "json"}, "info", "json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(t, tt.terminal, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if string(cfg.LogLevel) != tt.level || string(cfg.LogFormat) != tt.format {
				t.Errorf("level %q, format %q; want %q and %q", cfg.LogLevel, cfg.LogFormat, tt.level, tt.format)
			}
		})
	}
	for flag, value := range map[string]string{"--log-level": "trace", "--log-format": "xml"} {
		_, err := parseFlags(t, false, flag, value)
		if err == nil || !strings.HasPrefix(err.Error(), flag+": must be one of") {
			t.Errorf("%s %s: error %v, want one naming the flag", flag, value, err)
		}
	}
}

// filter-service's long options work as the flags that do the same.
func TestFilterServiceFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "configuration.yaml")
	if err := os.WriteFile(path, []byte("defaultExpectedInsertions: 123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags(t, false, "--configuration-file", path, "--enable-doc-service")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultExpectedInsertions != 123 || !cfg.DocsEnabled {
		t.Errorf("--configuration-file and --enable-doc-service: expected insertions %d, docs %v", cfg.DefaultExpectedInsertions, cfg.DocsEnabled)
	}
}

// The RESP port is closed unless the file or --resp-port opens it; the flag wins over the file.
func TestRESPPortFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "resp.yaml")
	if err := os.WriteFile(file, []byte("respPort: 6380\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"-c", file}, 6380},
		{[]string{"--resp-port", "6379"}, 6379},
		{[]string{"-c", file, "--resp-port", "0"}, 0},
	} {
		cfg, err := parseFlags(t, false, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.RESPPort != tt.want {
			t.Errorf("%v: respPort %d, want %d", tt.args, cfg.RESPPort, tt.want)
		}
	}
}
