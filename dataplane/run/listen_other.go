//go:build !unix

package run

import (
	"errors"
	"syscall"

	"github.com/bloomery/bloomery/dataplane/config"
)

// socketControl refuses socket buffer sizes where setting them is not implemented, rather than
// ignore them silently.
func socketControl(o config.ChannelOptions) func(network, address string, c syscall.RawConn) error {
	if o.SoRcvBuf <= 0 && o.SoSndBuf <= 0 {
		return nil
	}
	return func(string, string, syscall.RawConn) error {
		return errors.New("channelOptions SO_RCVBUF and SO_SNDBUF are supported on Unix systems only")
	}
}
