// Package control is the node-local control channel of a running `mariposa
// run`: a small HTTP/1.1 JSON API on a UNIX socket only its owner (and root)
// can use, and its client for `mariposa restart`, `reset` and `logs`.
package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvSocket overrides the default socket path.
const EnvSocket = "MARIPOSA_CONTROL_SOCKET"

// maxPath is what fits in sockaddr_un.sun_path with its terminating NUL.
const maxPath = 107

// DefaultPath is where the socket lives when neither the flag nor the
// environment names one: /run/mariposa as root, else the user's runtime
// directory, else a per-uid directory under os.TempDir().
func DefaultPath() string {
	return defaultPath(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR"), os.TempDir())
}

func defaultPath(euid int, xdg, tmp string) string {
	switch {
	case euid == 0:
		return "/run/mariposa/mariposa.sock"
	case xdg != "" && filepath.IsAbs(xdg):
		return filepath.Join(xdg, "mariposa", "mariposa.sock")
	}
	return filepath.Join(tmp, "mariposa-"+strconv.Itoa(euid), "mariposa.sock")
}

// ResolvePath picks the socket path: the flag's value if set, else
// $MARIPOSA_CONTROL_SOCKET, else DefaultPath().
func ResolvePath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if env := os.Getenv(EnvSocket); env != "" {
		return env
	}
	return DefaultPath()
}

// checkPath rejects paths a UNIX socket cannot have.
func checkPath(path string) error {
	if path == "" {
		return errors.New("control socket path is empty")
	}
	if len(path) > maxPath {
		return fmt.Errorf("control socket path %s is %d bytes long; a UNIX socket path has at most %d", path, len(path), maxPath)
	}
	return nil
}

// ensureDir creates the socket's directory 0700 if missing. An existing
// directory must belong to us or root: a directory someone else owns (say
// a /tmp/mariposa-<uid> planted by another user) could swap our socket.
func ensureDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating the control socket's directory: %w", err)
		}
		// MkdirAll is subject to the umask; the mode is the point here.
		return os.Chmod(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("control socket directory %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
			return fmt.Errorf("control socket directory %s belongs to uid %d, not to this user (uid %d); choose another with -control-socket", dir, uid, os.Geteuid())
		}
	}
	return nil
}

// lockFile takes an exclusive lock next to the socket for the server's
// lifetime: two mariposas starting at once cannot both decide an old socket
// is stale and replace it. The kernel drops the lock when the process dies.
func lockFile(path string) (*os.File, error) {
	lp := path + ".lock"
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("control socket lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := "another mariposa"
			if pid := strings.TrimSpace(string(b[:n])); pid != "" {
				who += " (pid " + pid + ")"
			}
			return nil, fmt.Errorf("%s already serves the control socket at %s; stop it or choose another with -control-socket", who, path)
		}
		return nil, fmt.Errorf("control socket lock %s: %w", lp, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// checkStale decides whether an existing file at path may be replaced: only
// a socket nobody answers on.
func checkStale(path string) (stale bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return false, fmt.Errorf("%s exists and is not a socket; remove it or choose another path with -control-socket", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return false, fmt.Errorf("a mariposa already answers on the control socket at %s; stop it or choose another path with -control-socket", path)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true, nil
	}
	return false, fmt.Errorf("control socket %s exists and cannot be checked: %w", path, err)
}

// listen binds the socket at path, mode 0600 from the first moment it is
// reachable there: it is bound under a temporary name, chmod'ed, then renamed
// into place (which also replaces a stale socket atomically).
func listen(path string, stale bool) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, ".mariposa-"+strconv.Itoa(os.Getpid())+".sock.tmp")
	if len(tmp) > maxPath {
		// No room for a temporary name: bind in place. Until the chmod the
		// socket has the umask's mode; the peer check on accept still
		// turns other users away.
		tmp = path
		if stale {
			_ = os.Remove(path)
		}
	} else {
		_ = os.Remove(tmp)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// We remove the socket ourselves, by path, and only if it is still ours.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			l.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("control socket: %w", err)
		}
	}
	return l, nil
}

// fileID identifies the socket file we created, so that Close never removes
// one a later mariposa put in its place.
type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true
}
