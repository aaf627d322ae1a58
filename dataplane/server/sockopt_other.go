//go:build !unix

package server

import (
	"errors"
	"syscall"
)

// socketControl refuses socket buffer sizes where setting them is not implemented, rather than
// ignore them silently.
func socketControl(o ChannelOptions) func(network, address string, c syscall.RawConn) error {
	if o.SoRcvBuf <= 0 && o.SoSndBuf <= 0 {
		return nil
	}
	return func(string, string, syscall.RawConn) error {
		return errors.New("channelOptions SO_RCVBUF and SO_SNDBUF are supported on Unix systems only")
	}
}
