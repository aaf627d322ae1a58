// Package cli holds what both roles of the bloomery binary share on the command line: usage
// errors and their exit status, and --version.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit statuses of the binary.
const (
	ExitOK      = 0
	ExitFailure = 1 // a failure while running
	ExitUsage   = 2 // a bad flag, argument or configuration
)

// UsageError is a mistake in how the program was started: a bad flag or argument, or a bad
// configuration file or value. The process exits with status 2 for it, the convention for usage
// errors, so that a supervisor can tell it from a failure while running (status 1).
type UsageError struct {
	Err error
	// Hint, if set, is a line printed after the error, such as where to find the usage.
	Hint string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// NewUsageError wraps an error in the command line of cmd, with a hint pointing at its help. It
// fits cobra's SetFlagErrorFunc.
func NewUsageError(cmd *cobra.Command, err error) error {
	return &UsageError{Err: err, Hint: fmt.Sprintf("Run '%s -h' for usage.", cmd.CommandPath())}
}

// NoArgs refuses any positional argument as a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return NewUsageError(cmd, fmt.Errorf("unexpected argument %q", args[0]))
	}
	return nil
}

// SetVersion makes --version on cmd print "bloomery <version>". The flag is declared here rather
// than left to cobra, which would also take -v for it.
func SetVersion(cmd *cobra.Command, version string) {
	if version == "" {
		version = "unknown" // cobra ignores --version when Version is empty
	}
	cmd.Version = version
	cmd.SetVersionTemplate("bloomery {{.Version}}\n")
	cmd.Flags().BoolP("version", "V", false, "print the version and exit")
}

// Report writes err to stderr, with its hint if it is a usage error, and returns the exit status
// for it.
func Report(err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	msg := "Error: " + err.Error() + "\n"
	usage, isUsage := errors.AsType[*UsageError](err)
	if isUsage && usage.Hint != "" {
		msg += usage.Hint + "\n"
	}
	_, _ = io.WriteString(stderr, msg) // nowhere left to report a failure to
	if isUsage {
		return ExitUsage
	}
	return ExitFailure
}

// IsTerminal reports whether w is a terminal (a character device), where people read the logs
// rather than a collector.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
