package control

import (
	"net"

	"golang.org/x/sys/unix"
)

// credentials reads the peer's uid, gid and pid (SO_PEERCRED).
func credentials(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if serr != nil {
		return peer{}, serr
	}
	return peer{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}, nil
}
