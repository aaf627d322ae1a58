// Package kubectlplugin is `kubectl bloomery`, the kubectl plugin of Bloomery: the bloomery binary
// runs it when invoked as kubectl-bloomery (a link of that name on the PATH, which kubectl finds),
// and as `bloomery kubectl`. It reads the user's kubeconfig as kubectl does, shows the state of
// BloomClusters, creates and deletes BloomFilters, and checks and adds values through the API
// server's proxy to the cluster's Service (or, with --direct, at the pods' addresses).
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/cli"
)

// BinaryName is the name under which the bloomery binary acts as the plugin: kubectl runs
// `kubectl bloomery ...` as kubectl-bloomery from the PATH.
const BinaryName = "kubectl-bloomery"

// InvokedAsPlugin reports whether argv0 (os.Args[0]) names the plugin's binary.
func InvokedAsPlugin(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == BinaryName
}

// globalFlags are the flags of every command.
type globalFlags struct {
	kubeconfig     string
	context        string
	namespace      string
	output         string
	direct         bool
	requestTimeout time.Duration
}

// NewPluginCommand is the plugin's root command when the binary runs as kubectl-bloomery.
func NewPluginCommand(version string) *cobra.Command {
	root := newCommand("kubectl-bloomery", version)
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl bloomery"}
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(cli.NewUsageError)
	cli.SetVersion(root, version)
	return root
}

// NewCommand is the plugin as the subcommand `bloomery kubectl`.
func NewCommand(version string) *cobra.Command {
	cmd := newCommand("kubectl", version)
	cmd.Short = "The kubectl plugin (kubectl bloomery): cluster status, BloomFilters, checks and adds"
	return cmd
}

func newCommand(use, _ string) *cobra.Command {
	f := &globalFlags{}
	root := &cobra.Command{
		Use:   use,
		Short: "Manage Bloomery clusters and filters with kubectl",
		Long: `kubectl bloomery shows the state of BloomClusters, creates and deletes BloomFilters, and
checks and adds values, with the credentials of your kubeconfig. The data plane is reached
through the API server's proxy (the verbs get and create on services/proxy and pods/proxy),
or with --direct at the pods' own addresses.`,
		Args: unknownCommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.NewUsageError(cmd, errors.New("missing command"))
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := validOutput(f.output); err != nil {
				return cli.NewUsageError(cmd, err)
			}
			return nil
		},
		SuggestionsMinimumDistance: 2,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&f.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	pf.StringVar(&f.context, "context", "", "the kubeconfig context to use (default: the current context)")
	pf.StringVarP(&f.namespace, "namespace", "n", "", "the namespace (default: the context's namespace)")
	pf.StringVarP(&f.output, "output", "o", "", "output format: json or yaml (default: a table)")
	pf.BoolVar(&f.direct, "direct", false, "reach the pods at their own addresses rather than through the API server's proxy")
	pf.DurationVar(&f.requestTimeout, "request-timeout", 30*time.Second, "how long to wait for one request to the API server")

	root.AddCommand(
		statusCommand(f),
		checkCommand(f),
		addCommand(f),
		infoCommand(f),
		createCommand(f),
		deleteCommand(f),
	)
	return root
}

// unknownCommand refuses a word that is no command as a usage error.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("%w; did you mean %q?", err, s[0])
	}
	return cli.NewUsageError(cmd, err)
}

// argsBetween accepts from min to max positional arguments (max < 0: no limit), as a usage error
// otherwise.
func argsBetween(minArgs, maxArgs int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minArgs {
			return cli.NewUsageError(cmd, fmt.Errorf("want %s, got %d arguments", names, len(args)))
		}
		if maxArgs >= 0 && len(args) > maxArgs {
			return cli.NewUsageError(cmd, fmt.Errorf("want %s; unexpected argument %q", names, args[maxArgs]))
		}
		if slices.Contains(args[:min(len(args), 2)], "") {
			return cli.NewUsageError(cmd, errors.New("a name cannot be empty"))
		}
		return nil
	}
}

func (f *globalFlags) dataPlane(k *kube, c *bloomeryv1alpha1.BloomCluster) *dataPlane {
	return &dataPlane{k: k, cluster: c, direct: f.direct, http: &http.Client{Timeout: f.requestTimeout}}
}

// clusterDataPlane connects to the API server and reaches the data plane of the cluster named
// name.
func (f *globalFlags) clusterDataPlane(ctx context.Context, name string) (*dataPlane, error) {
	k, err := connect(f)
	if err != nil {
		return nil, err
	}
	c, err := k.getCluster(ctx, name)
	if err != nil {
		return nil, err
	}
	return f.dataPlane(k, c), nil
}

func statusCommand(f *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status [CLUSTER]",
		Short: "Show a BloomCluster: its phase, pods and filters; without CLUSTER, every cluster of the namespace",
		Example: `  kubectl bloomery status
  kubectl bloomery status example -n prod
  kubectl bloomery status example -o yaml`,
		Args: argsBetween(0, 1, "at most one CLUSTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := connect(f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if len(args) == 0 {
				clusters, err := k.listClusters(ctx)
				if err != nil {
					return err
				}
				summaries := make([]ClusterSummary, len(clusters))
				for i, c := range clusters {
					summaries[i] = ClusterSummary{
						Name: c.Name, Phase: phase(&c), Replicas: c.DesiredReplicas(), ReadyReplicas: c.Status.ReadyReplicas,
						Filters: c.Status.Filters, MembershipEpoch: c.Status.MembershipEpoch,
					}
				}
				if f.output != outputTable {
					return printData(cmd.OutOrStdout(), f.output, summaries)
				}
				return printClusters(cmd.OutOrStdout(), summaries)
			}
			s, err := clusterStatus(ctx, k, f, args[0])
			if err != nil {
				return err
			}
			if f.output != outputTable {
				return printData(cmd.OutOrStdout(), f.output, s)
			}
			return printStatus(cmd.OutOrStdout(), s)
		},
	}
}

// phase is the reason of the cluster's Ready condition, the STATUS column of kubectl get.
func phase(c *bloomeryv1alpha1.BloomCluster) string {
	if cond := findCondition(c.Status.Conditions, "Ready"); cond != nil {
		return cond.Reason
	}
	return ""
}

func clusterStatus(ctx context.Context, k *kube, f *globalFlags, name string) (*ClusterStatus, error) {
	c, err := k.getCluster(ctx, name)
	if err != nil {
		return nil, err
	}
	s := &ClusterStatus{
		Name: c.Name, Namespace: c.Namespace, Phase: phase(c), Endpoint: c.Status.Endpoint,
		Replicas: c.DesiredReplicas(), ReadyReplicas: c.Status.ReadyReplicas, MembershipEpoch: c.Status.MembershipEpoch,
		Conditions: []Condition{}, Pods: []PodStatus{}, Filters: []FilterLine{},
	}
	for _, cond := range c.Status.Conditions {
		s.Conditions = append(s.Conditions, Condition{Type: cond.Type, Status: string(cond.Status), Reason: cond.Reason, Message: cond.Message})
	}
	pods, err := k.clusterPods(ctx, c)
	if err != nil {
		return nil, err
	}
	dp := f.dataPlane(k, c)
	for i := range pods {
		p := &pods[i]
		ps := PodStatus{Name: p.Name, Ready: podReady(p), Restarts: podRestarts(p)}
		if filters, bytes, err := dp.podStats(ctx, p); err != nil {
			ps.Error = err.Error()
		} else {
			ps.Filters, ps.Bytes = &filters, &bytes
		}
		s.Pods = append(s.Pods, ps)
	}
	filters, err := k.listFilters(ctx, c.Name)
	if err != nil {
		return nil, err
	}
	for _, bf := range filters {
		line := FilterLine{
			Name: bf.Name, Ready: conditionStatus(bf.Status.Conditions, "Ready"), Capacity: bf.Spec.Capacity,
			FalsePositiveRate: bf.Spec.FalsePositiveRate, Items: bf.Status.Items, SizeBytes: bf.Status.SizeBytes,
		}
		if cond := findCondition(bf.Status.Conditions, "Ready"); cond != nil && cond.Status != metav1.ConditionTrue {
			line.Message = cond.Message
		}
		s.Filters = append(s.Filters, line)
	}
	return s, nil
}

// valuesCommand is check and add: CLUSTER FILTER VALUE...
func valuesCommand(f *globalFlags, use, short, example string, run func(cmd *cobra.Command, dp *dataPlane, filter string, values []string) error) *cobra.Command {
	return &cobra.Command{
		Use:     use + " CLUSTER FILTER VALUE...",
		Short:   short,
		Example: example,
		Args:    argsBetween(3, -1, "CLUSTER FILTER VALUE..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			dp, err := f.clusterDataPlane(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return run(cmd, dp, args[1], args[2:])
		},
	}
}

func checkCommand(f *globalFlags) *cobra.Command {
	return valuesCommand(f, "check", "Check values in a filter: true if (probably) present, false if surely absent",
		`  kubectl bloomery check example users alice bob`,
		func(cmd *cobra.Command, dp *dataPlane, filter string, values []string) error {
			present, err := dp.values(cmd.Context(), filter, wire.OpMultiCheck, values)
			if err != nil {
				return err
			}
			return printResults(cmd, f, values, present, "PRESENT")
		})
}

func addCommand(f *globalFlags) *cobra.Command {
	var setOnly bool
	cmd := valuesCommand(f, "add", "Add values to a filter, saying which were (probably) there already",
		`  kubectl bloomery add example users alice bob
  kubectl bloomery add example users --set-only alice bob`,
		func(cmd *cobra.Command, dp *dataPlane, filter string, values []string) error {
			if setOnly {
				if _, err := dp.values(cmd.Context(), filter, wire.OpMultiSet, values); err != nil {
					return err
				}
				if f.output != outputTable {
					return printData(cmd.OutOrStdout(), f.output, map[string]int{"added": len(values)})
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "added %d values to filter %s\n", len(values), filter)
				return err
			}
			before, err := dp.values(cmd.Context(), filter, wire.OpMultiCheckAndSet, values)
			if err != nil {
				return err
			}
			return printResults(cmd, f, values, before, "WAS-PRESENT")
		})
	cmd.Flags().BoolVar(&setOnly, "set-only", false, "add without telling which values were there (multi-set rather than multi-check-and-set)")
	return cmd
}

func printResults(cmd *cobra.Command, f *globalFlags, values []string, present []bool, column string) error {
	results := make([]ValueResult, len(values))
	for i, v := range values {
		results[i] = ValueResult{Value: v, Present: present[i]}
	}
	if f.output != outputTable {
		return printData(cmd.OutOrStdout(), f.output, results)
	}
	return printValues(cmd.OutOrStdout(), results, column)
}

func infoCommand(f *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "info CLUSTER FILTER",
		Short:   "Show a filter as the data plane holds it: shape, items, size, fill",
		Example: `  kubectl bloomery info example users -o json`,
		Args:    argsBetween(2, 2, "CLUSTER FILTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dp, err := f.clusterDataPlane(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			info, err := dp.info(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			if f.output != outputTable {
				return printData(cmd.OutOrStdout(), f.output, info)
			}
			return printFilterInfo(cmd.OutOrStdout(), dp.cluster.Name, info)
		},
	}
}

// createOptions are the flags of create.
type createOptions struct {
	cluster           string
	capacity          int64
	falsePositiveRate string
	scalable          bool
	growth            int32
	expireAfterCreate time.Duration
	expireAfterAccess time.Duration
	deletionPolicy    string
	wait              bool
	timeout           time.Duration
}

// fprPattern is the CRD's pattern of falsePositiveRate: a decimal in (0, 1).
var fprPattern = regexp.MustCompile(`^0?\.[0-9]*[1-9][0-9]*$`)

// bloomFilter makes the BloomFilter the options describe, or says what is wrong with them.
func (o *createOptions) bloomFilter(cmd *cobra.Command, name string) (*bloomeryv1alpha1.BloomFilter, error) {
	fl := cmd.Flags()
	switch {
	case o.cluster == "":
		return nil, errors.New("--cluster is required: the BloomCluster that holds the filter")
	case !fl.Changed("capacity"):
		return nil, errors.New("--capacity is required: the number of values the filter holds at its false positive rate")
	case o.capacity < 1:
		return nil, fmt.Errorf("--capacity %d: want at least 1", o.capacity)
	case o.falsePositiveRate == "":
		return nil, errors.New("--false-positive-rate is required, such as 0.001")
	case len(o.falsePositiveRate) > 20 || !fprPattern.MatchString(o.falsePositiveRate):
		return nil, fmt.Errorf("--false-positive-rate %q: want a decimal between 0 and 1 such as 0.001", o.falsePositiveRate)
	case fl.Changed("growth") && (o.growth < 1 || o.growth > 16):
		return nil, fmt.Errorf("--growth %d: want 1 to 16", o.growth)
	case fl.Changed("expire-after-create") && fl.Changed("expire-after-access"):
		return nil, errors.New("give at most one of --expire-after-create and --expire-after-access")
	case o.deletionPolicy != "" && o.deletionPolicy != string(bloomeryv1alpha1.Delete) && o.deletionPolicy != string(bloomeryv1alpha1.Retain):
		return nil, fmt.Errorf("--deletion-policy %q: want Delete or Retain", o.deletionPolicy)
	}
	bf := &bloomeryv1alpha1.BloomFilter{
		TypeMeta:   metav1.TypeMeta{APIVersion: bloomeryv1alpha1.GroupVersion.String(), Kind: "BloomFilter"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: bloomeryv1alpha1.BloomFilterSpec{
			ClusterRef:        bloomeryv1alpha1.ClusterReference{Name: o.cluster},
			Capacity:          o.capacity,
			FalsePositiveRate: o.falsePositiveRate,
			DeletionPolicy:    bloomeryv1alpha1.RetentionPolicy(o.deletionPolicy),
		},
	}
	if fl.Changed("scalable") {
		bf.Spec.Scalable = &o.scalable
	}
	if fl.Changed("growth") {
		bf.Spec.Growth = &o.growth
	}
	for flag, d := range map[string]time.Duration{"expire-after-create": o.expireAfterCreate, "expire-after-access": o.expireAfterAccess} {
		if !fl.Changed(flag) {
			continue
		}
		if d <= 0 {
			return nil, fmt.Errorf("--%s %v: want a positive duration such as 24h", flag, d)
		}
		if flag == "expire-after-create" {
			bf.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterCreate: &metav1.Duration{Duration: d}}
		} else {
			bf.Spec.Expiry = &bloomeryv1alpha1.ExpirySpec{AfterAccess: &metav1.Duration{Duration: d}}
		}
	}
	return bf, nil
}

func createCommand(f *globalFlags) *cobra.Command {
	o := &createOptions{}
	cmd := &cobra.Command{
		Use:   "create FILTER --cluster CLUSTER --capacity N --false-positive-rate P",
		Short: "Create a BloomFilter on a BloomCluster",
		Example: `  kubectl bloomery create users --cluster example --capacity 1000000 --false-positive-rate 0.001
  kubectl bloomery create sessions --cluster example --capacity 10000 --false-positive-rate 0.01 --expire-after-access 24h --wait`,
		Args: argsBetween(1, 1, "one FILTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			bf, err := o.bloomFilter(cmd, args[0])
			if err != nil {
				return cli.NewUsageError(cmd, err)
			}
			k, err := connect(f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if _, err := k.getCluster(ctx, o.cluster); err != nil {
				return err
			}
			created, err := k.createFilter(ctx, bf)
			if err != nil {
				return err
			}
			if o.wait {
				if created, err = k.waitFilterReady(ctx, bf.Name, o.timeout); err != nil {
					return err
				}
			}
			if f.output != outputTable {
				return printData(cmd.OutOrStdout(), f.output, created)
			}
			ready := ""
			if o.wait {
				ready = " and Ready"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "bloomfilter.bloomery.io/%s created%s in namespace %s (cluster %s, capacity %d, false positive rate %s)\n",
				created.Name, ready, k.namespace, o.cluster, o.capacity, o.falsePositiveRate)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.cluster, "cluster", "", "the BloomCluster that holds the filter (required)")
	fl.Int64Var(&o.capacity, "capacity", 0, "values the filter holds at its false positive rate (required)")
	fl.StringVar(&o.falsePositiveRate, "false-positive-rate", "", "false positive rate, a decimal in (0, 1) such as 0.001 (required)")
	fl.BoolVar(&o.scalable, "scalable", true, "grow past capacity keeping the rate (the operator's default: true)")
	fl.Int32Var(&o.growth, "growth", 2, "capacity factor from one layer of a scalable filter to the next, 1 to 16")
	fl.DurationVar(&o.expireAfterCreate, "expire-after-create", 0, "recreate the filter empty this long after its creation, such as 24h")
	fl.DurationVar(&o.expireAfterAccess, "expire-after-access", 0, "recreate the filter empty this long after its last use")
	fl.StringVar(&o.deletionPolicy, "deletion-policy", "", "Delete (the default) or Retain the filter on the pods when the BloomFilter is deleted")
	fl.BoolVar(&o.wait, "wait", false, "wait until the filter is Ready on every pod")
	fl.DurationVar(&o.timeout, "timeout", time.Minute, "how long --wait waits")
	return cmd
}

func deleteCommand(f *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete FILTER",
		Short:   "Delete a BloomFilter (its deletionPolicy says whether the pods drop the filter)",
		Example: `  kubectl bloomery delete users`,
		Args:    argsBetween(1, 1, "one FILTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := connect(f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			bf, err := k.getFilter(ctx, args[0])
			if err != nil {
				return err
			}
			if err := k.deleteFilter(ctx, args[0]); err != nil {
				return err
			}
			if f.output != outputTable {
				return printData(cmd.OutOrStdout(), f.output, bf)
			}
			policy := bf.Spec.DeletionPolicy
			if policy == "" {
				policy = bloomeryv1alpha1.Delete
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "bloomfilter.bloomery.io/%s deleted from namespace %s (cluster %s, deletionPolicy %s)\n",
				bf.Name, k.namespace, bf.Spec.ClusterRef.Name, policy)
			return err
		},
	}
}
