package volume

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// archiveError is an archive that is not one the store would write: a
// malformed stream, or an entry the unpacker refuses. Whether the bytes
// were damaged in transit is for the checksum to say.
type archiveError struct{ err error }

func (e *archiveError) Error() string { return "invalid archive: " + e.err.Error() }
func (e *archiveError) Unwrap() error { return e.err }

func badEntry(format string, args ...any) error {
	return &archiveError{fmt.Errorf(format, args...)}
}

// unpacker writes an archive into root, an empty directory it owns.
//
// Tar-slip defences: an entry's name must be relative, clean (no "..",
// no "." or empty components, no trailing slash but a directory's), and
// its parent must be a directory an earlier entry of the archive created:
// nothing is ever created through a symlink, whatever the symlinks of the
// archive point to, and nothing exists in root but what the archive
// created. A name can appear once. Files are created with O_EXCL and
// O_NOFOLLOW, modes are set on the open file, times without following
// symlinks. Only regular files, directories and symlinks are accepted.
type unpacker struct {
	root  string
	buf   []byte
	files int
	// kinds: every entry created so far, by name, and its type.
	kinds map[string]byte
	// dirs: the directories created, in order, with the mode and mtime to
	// give them at the end (so a read-only directory can still be filled).
	dirs []dirAttr
	// regular: the regular files created, for the final fsync.
	regular []string
}

type dirAttr struct {
	full  string
	mode  fs.FileMode
	mtime time.Time
}

func (u *unpacker) run(ctx context.Context, r io.Reader) error {
	u.kinds = map[string]byte{}
	if u.buf == nil {
		u.buf = make([]byte, 1<<20)
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &archiveError{err}
		}
		if err := u.entry(ctx, h, tr); err != nil {
			return err
		}
	}
	// Children before parents, so that setting a directory's mtime is
	// not undone by a change inside it.
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		if err := os.Chmod(d.full, d.mode); err != nil {
			return err
		}
		if err := setMtime(d.full, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// entryName checks an entry's name and returns it without a directory's
// trailing slash ("." for the volume's root).
func entryName(h *tar.Header) (string, error) {
	name := h.Name
	if h.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
	}
	switch {
	case name == "":
		return "", badEntry("an entry has no name")
	case strings.ContainsRune(name, 0):
		return "", badEntry("entry %q: a NUL in its name", name)
	case strings.HasPrefix(name, "/"):
		return "", badEntry("entry %q: an absolute path", name)
	case name == ".." || strings.HasPrefix(name, "../"):
		return "", badEntry("entry %q: a path out of the volume", name)
	case name != path.Clean(name):
		return "", badEntry("entry %q: not a clean relative path", name)
	case name == "." && h.Typeflag != tar.TypeDir:
		return "", badEntry("entry %q: the volume's root must be a directory", h.Name)
	}
	return name, nil
}

func (u *unpacker) entry(ctx context.Context, h *tar.Header, tr io.Reader) error {
	name, err := entryName(h)
	if err != nil {
		return err
	}
	if _, dup := u.kinds[name]; dup {
		return badEntry("entry %q: twice in the archive", name)
	}
	full := u.root
	if name != "." {
		if parent := path.Dir(name); parent != "." && u.kinds[parent] != tar.TypeDir {
			if _, ok := u.kinds[parent]; ok {
				return badEntry("entry %q: its parent %q is not a directory", name, parent)
			}
			return badEntry("entry %q: its parent %q is not in the archive before it", name, parent)
		}
		full = filepath.Join(u.root, filepath.FromSlash(name))
	}
	mode := fileMode(h.Mode)
	switch h.Typeflag {
	case tar.TypeDir:
		if name != "." {
			if err := os.Mkdir(full, 0o700); err != nil {
				return err
			}
			u.files++
		}
		u.dirs = append(u.dirs, dirAttr{full, mode, h.ModTime})
	case tar.TypeReg:
		if h.Size < 0 {
			return badEntry("entry %q: size %d", name, h.Size)
		}
		if err := u.file(ctx, full, mode, h, tr); err != nil {
			return err
		}
		u.files++
		u.regular = append(u.regular, full)
	case tar.TypeSymlink:
		if h.Linkname == "" || strings.ContainsRune(h.Linkname, 0) {
			return badEntry("entry %q: a symlink without a valid target", name)
		}
		if err := os.Symlink(h.Linkname, full); err != nil {
			return err
		}
		if err := setMtime(full, h.ModTime); err != nil {
			return err
		}
		u.files++
	default:
		return badEntry("entry %q: type %q: only regular files, directories and symlinks are accepted", name, string(rune(h.Typeflag)))
	}
	u.kinds[name] = h.Typeflag
	return nil
}

func (u *unpacker) file(ctx context.Context, full string, mode fs.FileMode, h *tar.Header, tr io.Reader) error {
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	var n int64
	for n < h.Size && err == nil {
		if err = ctx.Err(); err != nil {
			break
		}
		var c int64
		c, err = io.CopyBuffer(writerOnly{f}, io.LimitReader(tr, min(h.Size-n, copyChunk)), u.buf)
		n += c
		if err == nil && c == 0 {
			err = io.ErrUnexpectedEOF
		}
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == f.Name() {
			return err // the file's own error (a full disk): local
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) {
			return &archiveError{fmt.Errorf("entry %q: %w", h.Name, err)}
		}
		return err
	}
	return setMtime(full, h.ModTime)
}

// setMtime sets a path's atime and mtime to t without following a
// symlink.
func setMtime(full string, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if t.IsZero() {
		ts = unix.NsecToTimespec(0)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, full, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimensat", Path: full, Err: err}
	}
	return nil
}
