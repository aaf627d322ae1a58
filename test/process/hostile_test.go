package process

import (
	"strings"
	"testing"
)

// What a client, anonymous or idle, can do to a pod: nothing that takes it down (issue 33).

// A token of 16 identical characters, long enough by its length alone, stops the data plane at
// start with the reason, before it listens.
func TestWeakTokenIsRefusedAtStart(t *testing.T) {
	weak := writeFile(t, "token", strings.Repeat("a", 16)+"\n")
	r := runBinary(t, "dataplane", "--bind-address", "127.0.0.1", "-p", "0", "--internal-port", "0", "--ops-port", "0",
		"--internal-token-file", weak, "--data-dir", t.TempDir())
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	want := "Error: start data plane: internalTokenFile " + weak + ": the token is too easy to guess: 16 characters, 1 of them distinct, estimate 0 bits"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
	}
	if strings.Contains(r.stderr, "Listening") {
		t.Errorf("the data plane listened with a weak token:\n%s", r.stderr)
	}
}
