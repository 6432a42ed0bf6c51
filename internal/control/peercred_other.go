//go:build !linux

package control

import (
	"errors"
	"net"
)

// credentials: the control channel serves `mariposa run`, which needs
// Linux; elsewhere no peer is trusted.
func credentials(*net.UnixConn) (peer, error) {
	return peer{}, errors.New("peer credentials are only read on Linux")
}
