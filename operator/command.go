// Package operator is `bloomery operator`: its flags, and the controller-runtime manager that runs
// the BloomCluster and BloomFilter reconcilers of package controllers.
package operator

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/controllers"
	"github.com/bloomery/bloomery/internal/cli"
)

// operatorFlags are the settings of `bloomery operator`.
type operatorFlags struct {
	metricsAddr      string
	metricsSecure    bool
	enableHTTP2      bool
	probeAddr        string
	pprofAddr        string
	leaderElect      bool
	leaderElectionID string
	leaderElectionNS string
	leaseDuration    time.Duration
	renewDeadline    time.Duration
	watchNamespaces  string
	maxReconciles    int
	filterReconciles int
	dataPlaneImage   string
	resync           time.Duration
	filterResync     time.Duration
	podTimeout       time.Duration
	operatorNS       string
	operatorPods     string
	zap              zap.Options
}

// NewCommand is `bloomery operator`: the manager that runs the BloomCluster and BloomFilter
// reconcilers.
func NewCommand(version string) *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:          "operator",
		Short:        "Run the operator: BloomCluster and BloomFilter reconcilers",
		Args:         cli.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.maxReconciles < 1 || f.filterReconciles < 1 || f.resync <= 0 || f.filterResync <= 0 || f.podTimeout <= 0 {
				return cli.NewUsageError(cmd, errors.New("--max-concurrent-reconciles, --max-concurrent-filter-reconciles, --resync, --filter-resync and --pod-timeout must be positive"))
			}
			operatorPods, err := labels.ConvertSelectorToLabelsMap(f.operatorPods)
			if err != nil {
				return cli.NewUsageError(cmd, fmt.Errorf("--operator-pod-labels: want key=value pairs separated by commas: %w", err))
			}
			return runOperator(cmd, f, operatorPods, version)
		},
	}
	cmd.SetFlagErrorFunc(cli.NewUsageError)
	fs := cmd.Flags()
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; 0 turns it off")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, for authenticated and authorized callers only")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "serve metrics over HTTP/2 too (off: HTTP/2 stream attacks, CVE-2023-44487)")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "address of Go's profiles (/debug/pprof/), without authentication; 0 turns them off")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so that only one replica reconciles")
	fs.StringVar(&f.leaderElectionID, "leader-election-id", "operator.bloomery.io", "name of the leader election lease")
	fs.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "namespace of the lease (default: the operator's own, in a cluster)")
	fs.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a lease lasts")
	fs.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader tries to renew")
	fs.StringVar(&f.watchNamespaces, "watch-namespace", os.Getenv("WATCH_NAMESPACE"),
		"comma-separated namespaces to watch (default: all; env WATCH_NAMESPACE)")
	fs.IntVar(&f.maxReconciles, "max-concurrent-reconciles", 4, "BloomClusters reconciled at once")
	fs.IntVar(&f.filterReconciles, "max-concurrent-filter-reconciles", controllers.DefaultFilterReconciles, "BloomFilters reconciled at once")
	fs.StringVar(&f.dataPlaneImage, "dataplane-image", dataPlaneImage(version),
		"image of BloomClusters that name none (default: env DATAPLANE_IMAGE, or the operator's version)")
	fs.DurationVar(&f.resync, "resync", 30*time.Second, "period of the BloomClusters' passes that keep status true between events")
	fs.DurationVar(&f.filterResync, "filter-resync", 10*time.Minute,
		"period of the BloomFilters' passes between events, a safety net: the pods' polls report what changes")
	fs.DurationVar(&f.podTimeout, "pod-timeout", controllers.DefaultPodTimeout, "timeout of each call to a data-plane pod")
	fs.StringVar(&f.operatorNS, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"the operator's own namespace, which the data plane's NetworkPolicies admit to the internal port (default: env POD_NAMESPACE)")
	fs.StringVar(&f.operatorPods, "operator-pod-labels", defaultOperatorPodLabels,
		"labels of the operator's own pods (key=value,...), which the data plane's NetworkPolicies admit to the internal port")
	logFlags := flag.NewFlagSet("log", flag.ContinueOnError)
	// Timestamps to the nanosecond, as the data plane writes them: a lease's lapse, its
	// revocation and the push of the next epoch come within a second of each other.
	f.zap.TimeEncoder = zapcore.RFC3339NanoTimeEncoder
	f.zap.BindFlags(logFlags)
	fs.AddGoFlagSet(logFlags)
	cli.SetVersion(cmd, version)
	return cmd
}

// defaultOperatorPodLabels are the labels both install methods (the chart and config/manager) put
// on the operator's pods.
const defaultOperatorPodLabels = "app.kubernetes.io/name=bloomery,app.kubernetes.io/component=operator"

func runOperator(cmd *cobra.Command, f operatorFlags, operatorPods map[string]string, version string) error {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	logger := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(bloomeryv1alpha1.AddToScheme(scheme))

	var tlsOpts []func(*tls.Config)
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metrics := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.metricsSecure, TLSOpts: tlsOpts}
	if f.metricsSecure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        f.probeAddr,
		PprofBindAddress:              f.pprofAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              f.leaderElectionID,
		LeaderElectionNamespace:       f.leaderElectionNS,
		LeaseDuration:                 &f.leaseDuration,
		RenewDeadline:                 &f.renewDeadline,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(splitNamespaces(f.watchNamespaces)...),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controllers.IndexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	// One HTTP client, and its pool of connections, for every call to the pods.
	dataPlane := controllers.NewHTTPDataPlane(f.podTimeout)
	if err := (&controllers.BloomClusterReconciler{
		Client:                  mgr.GetClient(),
		Scheme:                  mgr.GetScheme(),
		Recorder:                mgr.GetEventRecorder("bloomcluster"),
		DefaultImage:            f.dataPlaneImage,
		Resync:                  f.resync,
		MaxConcurrentReconciles: f.maxReconciles,
		DataPlane:               dataPlane,
		OperatorNamespace:       f.operatorNS,
		OperatorPodLabels:       operatorPods,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BloomCluster controller: %w", err)
	}
	if err := (&controllers.BloomFilterReconciler{
		Client:                  mgr.GetClient(),
		DataPlane:               dataPlane,
		Recorder:                mgr.GetEventRecorder("bloomfilter"),
		Resync:                  f.filterResync,
		MaxConcurrentReconciles: f.filterReconciles,
		DeleteGiveUp:            2 * time.Minute,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BloomFilter controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	if f.operatorNS == "" {
		logger.Info("The operator's namespace is unknown (--operator-namespace, env POD_NAMESPACE): " +
			"the data plane's NetworkPolicies will not admit the operator to the pods' internal port")
	}
	logger.Info("Starting operator", "version", version, "watchNamespaces", f.watchNamespaces,
		"dataplaneImage", f.dataPlaneImage, "leaderElection", f.leaderElect,
		"operatorNamespace", f.operatorNS, "operatorPodLabels", f.operatorPods)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// dataPlaneImage is the default of --dataplane-image: DATAPLANE_IMAGE, which the kustomize
// install sets to the operator's own image, or the published image of the operator's version.
func dataPlaneImage(version string) string {
	if image := os.Getenv("DATAPLANE_IMAGE"); image != "" {
		return image
	}
	return "ghcr.io/bloomery/bloomery:" + version
}

func splitNamespaces(s string) []string {
	var out []string
	for ns := range strings.SplitSeq(s, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}
