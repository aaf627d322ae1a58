// Package run is `bloomery dataplane`: its flags, the logger, the listener and its socket
// options, pprof, GC tuning, and the process's life around the HTTP API.
package run

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/internal/cli"
)

// NewCommand is `bloomery dataplane`: it loads the configuration, applies the flags over it, and
// serves the API until SIGTERM or SIGINT.
func NewCommand(version string) *cobra.Command {
	var opts dataPlaneFlags
	cmd := &cobra.Command{
		Use:   "dataplane",
		Short: "Run the data plane: the bloom filter HTTP API",
		Long: "Run the data plane: the bloom filter HTTP API, compatible with leancloud/filter-service.\n\n" +
			"The configuration file takes filter-service's keys (defaultExpectedInsertions,\n" +
			"maxHttpConnections, triggerPersistenceCriteria, ...) plus maxFilterBytes, maxTotalBytes,\n" +
			"maxFilters, logSync, logLevel, logFormat, shutdownDrainDelayMillis, metricsMaxLabelledFilters\n" +
			"and the replication keys. Flags win over the file.\n\n" +
			"Besides the API under /v1 it serves /metrics (Prometheus), /healthz and /readyz (503 while it\n" +
			"recovers its filters and once a shutdown begins), on the client port and, alone, on the ops\n" +
			"port. With a token file it opens the internal port, where the operator and the other pods of\n" +
			"its cluster call it with that token. It stops gracefully on SIGTERM or SIGINT.",
		Args: cli.NoArgs,
		// An error after the flags parsed is about the configuration or the run, which the usage
		// text would only bury.
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, file, err := opts.config(cmd.Flags(), cli.IsTerminal(cmd.ErrOrStderr()))
			if err != nil {
				return &cli.UsageError{Err: err}
			}
			if opts.pprofPort < 0 || opts.pprofPort > 65535 {
				return cli.NewUsageError(cmd, fmt.Errorf("--pprof: port %d is not in 1..65535", opts.pprofPort))
			}
			return runDataPlane(cmd.Context(), cfg, file, version, cmd.ErrOrStderr(), opts.pprofPort)
		},
	}
	cmd.SetFlagErrorFunc(cli.NewUsageError)
	opts.register(cmd.Flags())
	cli.SetVersion(cmd, version)
	return cmd
}

type dataPlaneFlags struct {
	port             int
	internalPort     int
	opsPort          int
	respPort         int
	respPasswordFile string
	tokenFile        string
	tlsCertFile      string
	tlsKeyFile       string
	tlsCAFile        string
	address          string
	configFile       string
	docs             bool
	dataDir          string
	logSync          string
	logLevel         string
	logFormat        string
	inMemory         bool
	pprofPort        int
}

func (o *dataPlaneFlags) register(fs *pflag.FlagSet) {
	def := config.Default()
	fs.SortFlags = false
	fs.SetNormalizeFunc(filterServiceFlags)
	fs.IntVarP(&o.port, "port", "p", def.Port, `port of the HTTP API; 0 picks a free one, named in the "Listening" log line`)
	fs.IntVar(&o.internalPort, "internal-port", def.InternalPort, "port of the endpoints only the operator and peer pods call (/internal/v1), opened only with a token file; overrides internalPort")
	fs.StringVar(&o.tokenFile, "internal-token-file", "", "`FILE` holding the bearer token the internal port requires; overrides internalTokenFile (default none: the internal port stays closed and the pod serves alone)")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "`FILE` of the certificate (PEM) that serves the client and internal ports over TLS; overrides tlsCertFile")
	fs.StringVar(&o.tlsKeyFile, "tls-key-file", "", "`FILE` of the certificate's key (PEM); overrides tlsKeyFile")
	fs.StringVar(&o.tlsCAFile, "tls-ca-file", "", "`FILE` of the CA (PEM) that peers' and the operator's certificates must chain to; overrides tlsCAFile")
	fs.IntVar(&o.opsPort, "ops-port", def.OpsPort, "port of /healthz, /readyz and /metrics alone, for the kubelet and Prometheus; overrides opsPort")
	fs.IntVar(&o.respPort, "resp-port", def.RESPPort, "port of the Redis protocol, serving RedisBloom's BF.* commands; 0 opens none; overrides respPort")
	fs.StringVar(&o.respPasswordFile, "resp-password-file", "", "`FILE` holding the password RESP clients must AUTH with (at least 8 characters); overrides respPasswordFile (default none: the RESP port asks for no password)")
	fs.StringVar(&o.address, "bind-address", def.Address, "IP address or host name to listen on (default all interfaces)")
	fs.StringVarP(&o.configFile, "config", "c", "", "YAML configuration `FILE`")
	fs.BoolVarP(&o.docs, "docs", "d", def.DocsEnabled, "serve the API documentation: a page at /v1/docs/ that lists and calls every endpoint, and its OpenAPI document")
	fs.StringVar(&o.dataDir, "data-dir", "", "`DIR` to keep the data in; overrides persistentStorageDirectory (default \""+def.DataDir+"\")")
	fs.BoolVar(&o.inMemory, "in-memory", false, "keep filters in memory only: no data directory, snapshots or log (for tests and benchmarks)")
	fs.StringVar(&o.logSync, "log-sync", "", "when the update log reaches the disk: always, everysec or no; overrides logSync (default \""+string(def.LogSync)+"\")")
	fs.StringVar(&o.logLevel, "log-level", "", "`LEVEL` of the logs: debug (which logs every request), info, warn or error; overrides logLevel (default \""+string(def.LogLevel)+"\")")
	fs.StringVar(&o.logFormat, "log-format", "", "`FORMAT` of the logs, json or text; overrides logFormat (default: text on a terminal, else json)")
	fs.IntVar(&o.pprofPort, "pprof", 0, "serve Go's profiler (net/http/pprof, /debug/pprof/) on 127.0.0.1:`PORT`, apart from the API; 0, the default, serves none")
}

// filterServiceFlags takes filter-service's long options as the flags that do the same, so that
// its command lines work unchanged.
func filterServiceFlags(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "configuration-file":
		return "config"
	case "enable-doc-service":
		return "docs"
	}
	return pflag.NormalizedName(name)
}

// config is the file's configuration (or the defaults) with the flags the user set applied over
// it. terminal says whether the logs go to a terminal, where text reads better than JSON.
func (o *dataPlaneFlags) config(fs *pflag.FlagSet, terminal bool) (config.Config, config.File, error) {
	cfg := config.Default()
	var file config.File
	if fs.Changed("config") {
		var err error
		if cfg, file, err = config.LoadWithFile(o.configFile); err != nil {
			return cfg, file, err
		}
	}
	// The file has no port, address or docs keys, so these flags always decide; a flag default
	// is config.Default's value.
	cfg.Port = o.port
	cfg.Address = o.address
	cfg.DocsEnabled = o.docs
	if fs.Changed("data-dir") {
		cfg.DataDir = o.dataDir
	}
	cfg.InMemory = o.inMemory
	if fs.Changed("internal-port") {
		cfg.InternalPort = o.internalPort
	}
	if fs.Changed("ops-port") {
		cfg.OpsPort = o.opsPort
	}
	if fs.Changed("resp-port") {
		cfg.RESPPort = o.respPort
	}
	for flag, dst := range map[string]*string{
		"internal-token-file": &cfg.InternalTokenFile,
		"tls-cert-file":       &cfg.TLSCertFile,
		"tls-key-file":        &cfg.TLSKeyFile,
		"tls-ca-file":         &cfg.TLSCAFile,
		"resp-password-file":  &cfg.RESPPasswordFile,
	} {
		if fs.Changed(flag) {
			*dst, _ = fs.GetString(flag) // a string flag: no error
		}
	}
	// The pod's name and namespace, from the downward API in the operator's StatefulSet.
	cfg.PodName = os.Getenv("POD_NAME")
	cfg.PodNamespace = os.Getenv("POD_NAMESPACE")
	if fs.Changed("log-sync") {
		cfg.LogSync = config.LogSync(o.logSync)
	}
	if fs.Changed("log-level") {
		if err := config.CheckLogLevel(o.logLevel); err != nil {
			return cfg, file, fmt.Errorf("--log-level: %w", err)
		}
		cfg.LogLevel = config.LogLevel(o.logLevel)
	}
	switch {
	case fs.Changed("log-format"):
		if err := config.CheckLogFormat(o.logFormat); err != nil {
			return cfg, file, fmt.Errorf("--log-format: %w", err)
		}
		cfg.LogFormat = config.LogFormat(o.logFormat)
	case terminal && file.LogFormat == nil:
		cfg.LogFormat = config.LogFormatText
	}
	if err := cfg.Validate(); err != nil {
		return cfg, file, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, file, nil
}

// runDataPlane serves until ctx is cancelled or a signal asks to stop, and returns nil after a
// clean shutdown.
func runDataPlane(ctx context.Context, cfg config.Config, file config.File, version string, logOutput io.Writer, pprofPort int) error {
	log := newDataPlaneLogger(cfg, logOutput)
	// The standard library's own messages (net/http's included) go through it too.
	slog.SetDefault(log)

	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stopSignals()
	// Once shutdown starts, a second signal gets the default action and ends the process at once,
	// in case the graceful shutdown hangs.
	context.AfterFunc(ctx, stopSignals)

	cfg = limitMemory(cfg, file, log)
	log.Info("Starting data plane", "version", version, "config", cfg)
	for key, why := range file.Ignored() {
		log.Warn("Ignored configuration key: filter-service's, which Bloomery has no use for", "key", key, "why", why)
	}
	if o := cfg.ChannelOptions; (o.SoRcvBuf > 0 && o.SoRcvBuf < 64<<10) || (o.SoSndBuf > 0 && o.SoSndBuf < 64<<10) {
		log.Warn("Small socket buffers limit throughput; consider removing SO_RCVBUF and SO_SNDBUF so that the kernel sizes them",
			"SO_RCVBUF", o.SoRcvBuf, "SO_SNDBUF", o.SoSndBuf)
	}
	srv, err := New(cfg, log)
	if err != nil {
		return fmt.Errorf("start data plane: %w", err)
	}
	ls, err := listen(ctx, cfg, log)
	if err != nil {
		return err
	}
	if pprofPort != 0 {
		stop, err := servePprof(ctx, pprofPort, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := srv.Run(ctx, ls); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// limitMemory gives the filters a share of the process's memory when the file sets no
// maxTotalBytes, so that a create beyond the memory is refused rather than killed for, and says
// which limit holds.
func limitMemory(cfg config.Config, file config.File, log *slog.Logger) config.Config {
	switch {
	case file.MaxTotalBytes == nil:
		limit, from, err := totalBytesDefault()
		if err != nil {
			log.Warn("No memory limit for the filters: set maxTotalBytes, or a create beyond the memory gets the process killed", "error", err.Error())
			return cfg
		}
		cfg.MaxTotalBytes = limit
		log.Info("Memory limit for the filters", "maxTotalBytes", filter.FormatBytes(limit), "from", from)
	case cfg.MaxTotalBytes == 0:
		log.Warn("No memory limit for the filters (maxTotalBytes: 0): a create or a growth beyond the memory gets the process killed")
	}
	return cfg
}

func newDataPlaneLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		level = slog.LevelInfo // unreachable after Validate
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == config.LogFormatText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
