package operator

import "testing"

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
