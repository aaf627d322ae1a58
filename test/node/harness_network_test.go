package node

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bloomery/bloomery/dataplane/client"
)

// The cluster's addresses exist only in its network namespace, so the tests' clients open their
// sockets there: a socket stays in the namespace it was made in, whatever thread uses it later.

// dial connects to addr from the cluster's network namespace: the calling thread enters it
// for the socket's creation and connection, then returns to its own.
func (c *cluster) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.netns == "" {
		return nil, errNoNetns
	}
	target, err := os.Open(filepath.Join("/run/netns", c.netns))
	if err != nil {
		return nil, err
	}
	defer func() { _ = target.Close() }()
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer func() { _ = own.Close() }()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering the network namespace %s: %w", c.netns, err)
	}
	conn, dialErr := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so the runtime ends it with the goroutine: no other goroutine
		// runs in the cluster's namespace by mistake.
		if conn != nil {
			_ = conn.Close()
		}
		return nil, fmt.Errorf("leaving the network namespace %s: %w", c.netns, err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}

// httpClient is an HTTP client whose connections the cluster's namespace makes.
func (c *cluster) httpClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: c.dial, MaxIdleConnsPerHost: 16},
	}
}

// bloomery returns a client of the data plane at host:port, as seen from the cluster.
func (c *cluster) bloomery(hostPort string) *client.Client {
	return client.New("http://"+hostPort, client.WithHTTPClient(c.httpClient()))
}

// resp sends one command over the Redis protocol to addr and answers the reply's first line.
func (c *cluster) resp(ctx context.Context, addr string, args ...string) (string, error) {
	conn, err := c.dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// serviceIP returns the ClusterIP of a Service.
func (c *cluster) serviceIP(t *testing.T, namespace, name string) string {
	t.Helper()
	ip := c.kubectl(t, "-n", namespace, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")
	if net.ParseIP(ip) == nil {
		t.Fatalf("service %s/%s has ClusterIP %q", namespace, name, ip)
	}
	return ip
}
