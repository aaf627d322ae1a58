//go:build unix

package run

import (
	"fmt"
	"syscall"

	"github.com/bloomery/bloomery/dataplane/config"
)

// socketControl sets SO_RCVBUF and SO_SNDBUF on the listening socket before it binds: accepted
// connections inherit them, and a receive buffer must be set before the handshake to take part
// in the TCP window scale negotiation. It returns nil when neither is configured.
func socketControl(o config.ChannelOptions) func(network, address string, c syscall.RawConn) error {
	if o.SoRcvBuf <= 0 && o.SoSndBuf <= 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		controlErr := c.Control(func(fd uintptr) {
			if o.SoRcvBuf > 0 {
				if e := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, o.SoRcvBuf); e != nil {
					err = fmt.Errorf("set SO_RCVBUF to %d: %w", o.SoRcvBuf, e)
					return
				}
			}
			if o.SoSndBuf > 0 {
				if e := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, o.SoSndBuf); e != nil {
					err = fmt.Errorf("set SO_SNDBUF to %d: %w", o.SoSndBuf, e)
				}
			}
		})
		if controlErr != nil {
			return controlErr
		}
		return err
	}
}
