package run

import (
	"context"
	"net"
	"strconv"

	"github.com/bloomery/bloomery/dataplane/config"
)

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
