// Command bloomery is the one binary of Bloomery, a Kubernetes-native bloom filter service. Its
// subcommands are its roles: `bloomery dataplane` serves the filters over HTTP, `bloomery
// operator` runs them on Kubernetes from BloomCluster and BloomFilter resources, `bloomery
// kubectl` is the kubectl plugin (also run as kubectl-bloomery), `bloomery move-from-redis` moves
// RedisBloom's filters into Bloomery, and `bloomery version` prints the version. Operator and data plane always ship as the same version.
//
// Exit status: 0 on success (and for -h and --version), 2 for a usage error (a bad flag or
// argument, or a bad configuration), 1 for any other failure.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/internal/cli"
	"github.com/bloomery/bloomery/internal/redismove"
	"github.com/bloomery/bloomery/kubectlplugin"
	"github.com/bloomery/bloomery/operator"
)

// version is set at build time: go build -ldflags "-X main.version=v0.1.0".
var version = "dev"

func main() {
	root := newRootCommand()
	// As kubectl-bloomery (a link to this binary on the PATH), it is `kubectl bloomery`.
	if kubectlplugin.InvokedAsPlugin(os.Args[0]) {
		root = kubectlplugin.NewPluginCommand(version)
	}
	root.SetArgs(os.Args[1:])
	os.Exit(cli.Report(root.Execute(), os.Stderr))
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "bloomery",
		Short: "Bloomery, a Kubernetes-native bloom filter service",
		// Cobra would accept any word here as a (missing) subcommand and print the help with
		// status 0; an unknown command is a usage error.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err = fmt.Errorf("%w; did you mean %q?", err, s[0])
			}
			return cli.NewUsageError(cmd, err)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.NewUsageError(cmd, errors.New("missing command"))
		},
		// cli.Report prints errors once, with the hint; cobra's usage dump would bury them.
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
	}
	root.SetFlagErrorFunc(cli.NewUsageError)
	cli.SetVersion(root, version)
	root.AddCommand(
		run.NewCommand(version),
		operator.NewCommand(version),
		kubectlplugin.NewCommand(version),
		redismove.NewCommand(),
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cli.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "bloomery %s\n", version)
				return err
			},
		},
	)
	return root
}
