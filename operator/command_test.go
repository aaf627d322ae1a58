package operator

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/internal/cli"
)

// The install manifests set DATAPLANE_IMAGE to the operator's own image; without it, the image of
// the operator's version is the default.
func TestDataPlaneImageDefault(t *testing.T) {
	defaultOf := func() string { return NewCommand("v2.0.0").Flags().Lookup("dataplane-image").DefValue }
	t.Setenv("DATAPLANE_IMAGE", "registry.example.com/bloomery:v1")
	if got := defaultOf(); got != "registry.example.com/bloomery:v1" {
		t.Errorf("with DATAPLANE_IMAGE: default %q, want the variable's value", got)
	}
	t.Setenv("DATAPLANE_IMAGE", "")
	if got := defaultOf(); got != "ghcr.io/bloomery/bloomery:v2.0.0" {
		t.Errorf("without DATAPLANE_IMAGE: default %q, want the version's image", got)
	}
}

// The chart passes the operator's pod labels; a malformed value stops the command before it
// connects to anything.
func TestOperatorPodLabelsMustBeLabels(t *testing.T) {
	cmd := NewCommand("v2.0.0")
	cmd.SetArgs([]string{"--operator-pod-labels=app.kubernetes.io/name"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	var usage *cli.UsageError
	if err := cmd.Execute(); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--operator-pod-labels") {
		t.Errorf("a label without a value: %v, want a usage error naming --operator-pod-labels", err)
	}
}
