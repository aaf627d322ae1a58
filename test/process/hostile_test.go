package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// attackers is how many connections each attack holds: the client port's whole budget
// (maxHttpConnections), and 15 times the ops port's.
const attackers = 1000

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

// 1,000 connections to each port, held idle after a request as keep-alive clients do (anonymous
// ones on the internal port, answered 401), leave each port serving: every connection of the
// attack is answered as it comes, and afterwards the kubelet's liveness probe on the ops port, a
// new client on the client port, the operator with its token on the internal port.
func TestIdleConnectionsStarveNoPort(t *testing.T) {
	raiseOpenFiles(t, 2*attackers+200)
	dp := startDataPlane(t, t.TempDir())
	createFilter(t, dp, "f")
	bounded := func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), 10*time.Second) }
	for _, tt := range []struct {
		port, addr string
		request    string // what each attacker sends once
		served     func() error
	}{
		{"ops", dp.opsAddr, "GET " + wire.HealthzPath + " HTTP/1.1\r\nHost: x\r\n\r\n", func() error {
			// As the kubelet probes: a connection of its own, closed after the answer.
			probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+dp.opsAddr+wire.HealthzPath, nil)
			if err != nil {
				return err
			}
			resp, err := probe.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status)
			}
			return nil
		}},
		{"client", dp.addr, "GET " + wire.ReadyzPath + " HTTP/1.1\r\nHost: x\r\n\r\n", func() error {
			ctx, cancel := bounded()
			defer cancel()
			newClient := client.New("http://"+dp.addr, ownConnections())
			present, err := newClient.Check(ctx, "f", "x")
			if err == nil && present {
				return errors.New("an absent value was answered present")
			}
			return err
		}},
		{"internal", dp.internalAddr, "GET " + wire.MembershipPath + " HTTP/1.1\r\nHost: x\r\n\r\n", func() error {
			ctx, cancel := bounded()
			defer cancel()
			operator := client.New("http://"+dp.internalAddr, client.Internal(testToken), ownConnections())
			_, err := operator.Membership(ctx)
			return err
		}},
	} {
		t.Run(tt.port, func(t *testing.T) {
			conns := holdConnections(t, tt.addr, tt.request)
			if err := tt.served(); err != nil {
				t.Errorf("with %d idle connections to the %s port: %v", len(conns), tt.port, err)
			}
		})
	}
}

// ownConnections gives a client a pool of connections of its own. The shared pool holds the
// connection that created the filter, which the attack's last connection closes as the oldest
// idle one: a request sent on it in the instant before the pool notices fails with EOF, as any
// keep-alive client's may when a server closes an idle connection, and says nothing of whether
// the port still serves a new client.
func ownConnections() client.Option {
	return client.WithHTTPClient(client.NewHTTPClient(client.TransportOptions{DialTimeout: 10 * time.Second}))
}

// holdConnections opens attackers connections to addr, each sending request once and reading its
// answer, and holds them until the test ends (those the pod closes to make room included). Each
// must be answered: a port that does not answer the attack's 65th connection does not answer a
// kubelet either.
func holdConnections(t *testing.T, addr, request string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, attackers)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	for i := range attackers {
		c, err := dialer.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d of the attack was not answered: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		_ = c.SetDeadline(time.Time{})
	}
	return conns
}

// 1,000 requests to the internal port without the token, each on a connection of its own, are
// answered 401 and their connections closed by the pod: none holds a share of the budget the
// operator and the peers need, which then serves the operator.
func TestUnauthorizedConnectionsAreClosed(t *testing.T) {
	raiseOpenFiles(t, 2*attackers+200)
	dp := startDataPlane(t, t.TempDir())
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	request := "GET " + wire.MembershipPath + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess\r\n\r\n"
	for i := range attackers {
		c, err := dialer.DialContext(t.Context(), "tcp", dp.internalAddr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("connection %d without the token: %s, want 401", i, resp.Status)
		}
		// The pod closes the connection: the next read ends, rather than waiting for the deadline.
		if n, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d after its 401 read %d bytes, %v; want it closed by the pod", i, n, err)
		}
		_ = c.Close()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := dp.internal.Membership(ctx); err != nil {
		t.Errorf("the operator's call after %d refused connections: %v", attackers, err)
	}
}

// An anonymous dump of an untouched filter larger than maxDumpBytes is answered 507 without the
// copy that would make its bits resident, and the pod serves other requests meanwhile.
func TestDumpLargerThanMaxDumpBytesIsRefused(t *testing.T) {
	const limit = 8 << 20
	cfg := writeFile(t, "bloomery.yaml", "maxDumpBytes: 8Mi\n")
	dp := startPlainDataPlane(t, nil, t.TempDir(), "-c", cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	insertions, fpp := uint64(56_000_000), 0.01 // about 70 MiB of bits
	big, _, err := dp.client.Create(ctx, "big", client.CreateOptions{ExpectedInsertions: &insertions, FPP: &fpp})
	if err != nil {
		t.Fatal(err)
	}
	createFilter(t, dp, "small")

	var status int
	var answer string
	served := make(chan error, 1)
	grown := measure(t, dp.cmd.Process.Pid, func() {
		go func() {
			_, err := dp.client.Check(ctx, "small", "x")
			served <- err
		}()
		status, answer = getBody(t, "http://"+dp.addr+wire.FilterOpPath("big", wire.OpDump))
		if err := <-served; err != nil {
			t.Errorf("a check during the dump: %v", err)
		}
	})
	t.Logf("a dump of %d MiB with maxDumpBytes 8 MiB: %d %.200q; peak RSS grew by %.1f MiB", big.SizeBytes>>20, status, answer, float64(grown)/(1<<20))
	if status != http.StatusInsufficientStorage || !strings.Contains(answer, "maxDumpBytes is 8388608") {
		t.Errorf("a dump of a filter larger than maxDumpBytes: %d %.300q; want 507 naming maxDumpBytes", status, answer)
	}
	if big.SizeBytes < 4*limit {
		t.Fatalf("the filter takes %d bytes, want several times maxDumpBytes", big.SizeBytes)
	}
	if grown > limit {
		t.Errorf("the refused dump grew the peak RSS by %d MiB, more than maxDumpBytes (%d MiB)", grown>>20, limit>>20)
	}
}

// getBody sends GET url and answers the status and the body.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// A merge of bits past a layer's size, which once made every GET of the filter answer 500 (NaN)
// for good and spread to the other pods, is refused with 400 naming the damage, before a bit is
// applied: the filter describes as before, and holds the same bits after a restart.
func TestPoisonedMergeIsRefusedAndTheFilterStillDescribes(t *testing.T) {
	dir := t.TempDir()
	allow := writeFile(t, "merges.yaml", "allowClientMerges: true\n")
	dp := startDataPlane(t, dir, "-c", allow, "--log-sync", "always") // the restart below kills it
	createFilter(t, dp, "f")
	if err := dp.client.MultiSet(t.Context(), "f", valuesOf("kept", 100)); err != nil {
		t.Fatal(err)
	}
	before := dumpOf(t, dp, "f")
	st, release, err := persist.ReadDump(bytes.NewReader(before), int64(len(before)))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	layer := st.Parts[0].Layers[0]
	if layer.Bits%64 == 0 {
		t.Fatalf("the layer's %d bits fill its last word: no bit past its size to poison", layer.Bits)
	}
	layer.Words[0] = ^uint64(0)                                        // bits an applied merge would leave
	layer.Words[len(layer.Words)-1] |= ^uint64(0) << (layer.Bits % 64) // and those past its size
	var poisoned bytes.Buffer
	if err := persist.WriteDump(&poisoned, st); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+dp.addr+wire.FilterOpPath("f", wire.OpMerge), &poisoned)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), "bits set past") {
		t.Errorf("a merge of bits past the layer's size: %d %s; want 400 naming them", resp.StatusCode, answer)
	}

	unchanged := func(pod *dataPlane, when string) {
		f, err := pod.client.Get(t.Context(), "f")
		if err != nil || f.FillRatio <= 0 || f.FillRatio >= 0.5 || f.EstimatedFPP >= 0.001 {
			t.Errorf("GET %s: %+v, %v; want the filter of 100 values described", when, f, err)
		}
		if after := dumpOf(t, pod, "f"); !bytes.Equal(persistedBits(t, after), persistedBits(t, before)) {
			t.Errorf("%s the filter's bits changed", when)
		}
	}
	unchanged(dp, "after the refused merge")
	unchanged(restart(t, dp, dir, "-c", allow, "--log-sync", "always"), "after the refused merge and a restart")
}

// restart kills dp, as a crash would, and starts the binary again on its data directory.
func restart(t *testing.T, dp *dataPlane, dir string, args ...string) *dataPlane {
	t.Helper()
	dp.stop(t, syscall.SIGKILL)
	return startDataPlane(t, dir, args...)
}

// dumpOf answers the client port's dump of filter name.
func dumpOf(t *testing.T, dp *dataPlane, name string) []byte {
	t.Helper()
	status, body := httpGet(t, "http://"+dp.addr+wire.FilterOpPath(name, wire.OpDump))
	if status != http.StatusOK {
		t.Fatalf("dump of %s: %d %.300s", name, status, body)
	}
	return body
}

// persistedBits is the bits of a dump's layers, without the rest of its record (such as the last
// access, which a check moves).
func persistedBits(t *testing.T, dump []byte) []byte {
	t.Helper()
	st, release, err := persist.ReadDump(bytes.NewReader(dump), int64(len(dump)))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var out []byte
	for _, l := range st.AllLayers() {
		out = fmt.Appendf(out, "%d/%d:%x;", l.Bits, l.Hashes, l.Words)
	}
	return out
}
