package command

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// stateFile puts the upgrade state in a memfd the next image inherits (no
// MFD_CLOEXEC). Nothing forks meanwhile: the freeze holds every start.
func stateFile(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("mariposa-upgrade-state", 0)
	if err != nil {
		return -1, fmt.Errorf("memfd: %w", err)
	}
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("writing the state: %w", err)
		}
		b = b[n:]
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
