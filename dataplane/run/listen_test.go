//go:build linux

package run

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/bloomery/bloomery/dataplane/config"
)

func listenForTest(t *testing.T, cfg config.Config) net.Listener {
	t.Helper()
	ln, err := listenAPI(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func sockopt(t *testing.T, c syscall.Conn, level, opt int) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var getErr error
	if err := raw.Control(func(fd uintptr) { v, getErr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if getErr != nil {
		t.Fatal(getErr)
	}
	return v
}

func TestListenAPISocketBuffers(t *testing.T) {
	// Sizes unlike the kernel's defaults (128 KiB and 16 KiB with a stock tcp_rmem and tcp_wmem),
	// so that the test sees the configured values and not the defaults.
	const rcvBuf, sndBuf = 20 << 10, 24 << 10
	cfg := config.Default()
	cfg.Address, cfg.Port = "127.0.0.1", 0
	cfg.ChannelOptions.SoRcvBuf = rcvBuf
	cfg.ChannelOptions.SoSndBuf = sndBuf
	tcp := listenForTest(t, cfg).(*net.TCPListener)

	// Linux reports twice the requested size: it keeps the other half for bookkeeping (socket(7)).
	if got := sockopt(t, tcp, syscall.SOL_SOCKET, syscall.SO_RCVBUF); got != 2*rcvBuf {
		t.Errorf("SO_RCVBUF = %d, want %d", got, 2*rcvBuf)
	}
	if got := sockopt(t, tcp, syscall.SOL_SOCKET, syscall.SO_SNDBUF); got != 2*sndBuf {
		t.Errorf("SO_SNDBUF = %d, want %d", got, 2*sndBuf)
	}
}

func TestListenAPINoDelay(t *testing.T) {
	for _, noDelay := range []bool{true, false} {
		t.Run(fmt.Sprint("TCP_NODELAY=", noDelay), func(t *testing.T) {
			cfg := config.Default()
			cfg.Address, cfg.Port = "127.0.0.1", 0
			cfg.ChannelOptions.TCPNoDelay = noDelay
			ln := listenForTest(t, cfg)
			client, err := new(net.Dialer).DialContext(t.Context(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			got := sockopt(t, conn.(*net.TCPConn), syscall.IPPROTO_TCP, syscall.TCP_NODELAY) != 0
			if got != noDelay {
				t.Errorf("TCP_NODELAY: %v configured, accepted connection has %v", noDelay, got)
			}
		})
	}
}

func TestListenAPIAddressInUse(t *testing.T) {
	taken := listenForTest(t, config.Config{Address: "127.0.0.1"})
	cfg := config.Default()
	cfg.Address, cfg.Port = "127.0.0.1", taken.Addr().(*net.TCPAddr).Port
	ln, err := listenAPI(t.Context(), cfg)
	if err == nil {
		_ = ln.Close()
		t.Fatal("listening on a port in use succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listenAPI = %v, want EADDRINUSE", err)
	}
}

// Without a token file the internal port stays closed, and the log says so once.
func TestListenWithoutATokenLeavesTheInternalPortClosed(t *testing.T) {
	cfg := config.Default()
	cfg.Address, cfg.Port, cfg.InternalPort, cfg.OpsPort = "127.0.0.1", 0, 0, 0
	var logs bytes.Buffer
	ls, err := listen(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	if ls.Internal != nil || ls.Client == nil || ls.Ops == nil {
		t.Fatalf("listeners %+v: want the client and ops ports only", ls)
	}
	if n := strings.Count(logs.String(), "No internalTokenFile"); n != 1 {
		t.Errorf("%d warnings about the missing token file, want 1:\n%s", n, logs.String())
	}

	cfg.InternalTokenFile = "/token"
	if ls, err = listen(t.Context(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	if ls.Internal == nil {
		t.Fatal("with a token file the internal port is not open")
	}
}

// The RESP port is opened only when respPort is set, and one in use fails the start naming it.
func TestListenOpensTheRESPPortOnlyWhenSet(t *testing.T) {
	cfg := config.Default()
	cfg.Address, cfg.Port, cfg.InternalPort, cfg.OpsPort = "127.0.0.1", 0, 0, 0
	ls, err := listen(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ls.close()
	if ls.RESP != nil {
		t.Fatal("respPort 0 opened the RESP port")
	}

	taken, err := listenPort(t.Context(), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	cfg.RESPPort = taken.Addr().(*net.TCPAddr).Port
	if ls, err = listen(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil {
		ls.close()
		t.Fatal("a RESP port in use did not fail the start")
	}
	if !strings.HasPrefix(err.Error(), "RESP port: ") || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen = %v, want a RESP port error of EADDRINUSE", err)
	}
	_ = taken.Close()
	if ls, err = listen(t.Context(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	if ls.RESP == nil {
		t.Fatal("respPort set did not open the RESP port")
	}
}
