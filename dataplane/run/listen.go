package run

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/bloomery/bloomery/dataplane/config"
)

// listen opens the listeners; without a token file the internal port stays closed, without
// respPort the RESP port.
func listen(ctx context.Context, cfg config.Config, log *slog.Logger) (Listeners, error) {
	var ls Listeners
	var err error
	if ls.Client, err = listenAPI(ctx, cfg); err != nil {
		return ls, err
	}
	if cfg.InternalTokenFile == "" {
		log.Warn("No internalTokenFile: the internal port stays closed, so this pod serves alone and no membership can reach it")
	} else if ls.Internal, err = listenPort(ctx, cfg.Address, cfg.InternalPort); err != nil {
		ls.close()
		return Listeners{}, fmt.Errorf("internal port: %w", err)
	}
	if ls.Ops, err = listenPort(ctx, cfg.Address, cfg.OpsPort); err != nil {
		ls.close()
		return Listeners{}, fmt.Errorf("ops port: %w", err)
	}
	if cfg.RESPPort != 0 {
		if ls.RESP, err = listenPort(ctx, cfg.Address, cfg.RESPPort); err != nil {
			ls.close()
			return Listeners{}, fmt.Errorf("RESP port: %w", err)
		}
	}
	return ls, nil
}

// listenPort opens a plain TCP listener: channelOptions are the client port's.
func listenPort(ctx context.Context, address string, port int) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", net.JoinHostPort(address, strconv.Itoa(port)))
}

// listenAPI opens the API's TCP listener with the configured socket options.
func listenAPI(ctx context.Context, cfg config.Config) (net.Listener, error) {
	lc := net.ListenConfig{Control: socketControl(cfg.ChannelOptions)}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err // "listen tcp :8080: bind: address already in use"
	}
	if !cfg.ChannelOptions.TCPNoDelay {
		ln = nagleListener{ln}
	}
	return ln, nil
}

// nagleListener turns Nagle's algorithm back on for every accepted connection: Go sets
// TCP_NODELAY on all TCP connections, and the configuration asked for TCP_NODELAY: false.
type nagleListener struct{ net.Listener }

func (l nagleListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if tcp, ok := conn.(*net.TCPConn); ok && err == nil {
		// A failure here (the peer already gone) leaves a connection that still works, or one that
		// fails on its first read; neither is a reason to fail Accept, which would stop the server.
		_ = tcp.SetNoDelay(false)
	}
	return conn, err
}
