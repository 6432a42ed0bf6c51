package volume

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
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
	files int
	// kinds: every entry created so far, by name, and its type.
	kinds map[string]byte
	// dirs: the directories created, in order, with the mode and mtime to
	// give them at the end (so a read-only directory can still be filled).
	dirs []dirAttr
	// regular: the regular files created, for the final flush (syncEach).
	regular []string

	// Small files are written by workers (creating a file costs more
	// than writing a few KiB, and the kernel can create several at once):
	// their contents are copied into one of smallBufs buffers, sent on
	// jobs; werr is the first error of a worker.
	jobs      chan smallFile
	smallBufs chan []byte
	wg        sync.WaitGroup
	mu        sync.Mutex
	werr      error
}

// Small files: at most smallMax bytes, written by smallWorkers workers,
// with smallQueue of them at most in flight. More workers do not help:
// creating files in one directory takes its lock, and the kernel spins on
// it (BenchmarkHandoff: 2 workers were 5-10 % faster than none on a volume
// of 1,100 files, 4 were slower than 2).
const (
	smallMax     = 64 << 10
	smallWorkers = 2
	smallQueue   = 32
)

type smallFile struct {
	full  string
	mode  fs.FileMode
	mtime time.Time
	data  []byte // a smallBufs buffer
}

type dirAttr struct {
	full  string
	mode  fs.FileMode
	mtime time.Time
}

// chunkSource is the stream an unpacker reads: Read for the headers, next
// for file contents, which go from the source's buffer to the file with no
// copy in between.
type chunkSource interface {
	io.Reader
	// next returns the next bytes of the stream, at most max, without
	// copying them; they are valid until the next call.
	next(max int) ([]byte, error)
}

func (u *unpacker) run(ctx context.Context, src chunkSource) error {
	u.kinds = map[string]byte{}
	err := u.entries(ctx, src)
	if u.jobs != nil {
		close(u.jobs)
		u.wg.Wait()
		u.jobs = nil
	}
	if err == nil {
		err = u.workerErr()
	}
	if err != nil {
		return err
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

func (u *unpacker) workerErr() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.werr
}

func (u *unpacker) worker() {
	defer u.wg.Done()
	for j := range u.jobs {
		if u.workerErr() == nil {
			if err := writeSmall(j); err != nil {
				u.mu.Lock()
				if u.werr == nil {
					u.werr = err
				}
				u.mu.Unlock()
			}
		}
		u.smallBufs <- j.data[:0]
	}
}

func writeSmall(j smallFile) error {
	f, err := os.OpenFile(j.full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if len(j.data) > 0 {
		_, err = f.Write(j.data)
	}
	if err == nil {
		err = f.Chmod(j.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return setMtime(j.full, j.mtime)
}

// small hands a small file to the workers.
func (u *unpacker) small(full string, mode fs.FileMode, h *tar.Header, src chunkSource) error {
	if u.jobs == nil {
		u.jobs = make(chan smallFile, smallQueue)
		u.smallBufs = make(chan []byte, smallQueue+smallWorkers+1)
		for range smallQueue + smallWorkers + 1 {
			u.smallBufs <- make([]byte, 0, smallMax)
		}
		u.wg.Add(smallWorkers)
		for range smallWorkers {
			go u.worker()
		}
	}
	if err := u.workerErr(); err != nil {
		return err
	}
	buf := <-u.smallBufs
	for int64(len(buf)) < h.Size {
		b, err := src.next(int(h.Size) - len(buf))
		if err != nil {
			u.smallBufs <- buf[:0]
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				return &archiveError{fmt.Errorf("entry %q: %d of %d bytes: %w", h.Name, len(buf), h.Size, io.ErrUnexpectedEOF)}
			}
			return err
		}
		buf = append(buf, b...)
	}
	u.jobs <- smallFile{full: full, mode: mode, mtime: h.ModTime, data: buf}
	return nil
}

func (u *unpacker) entries(ctx context.Context, src chunkSource) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A tar.Reader per entry parses its header (and PAX or GNU
		// extensions) reading exactly their blocks; the contents and their
		// padding are read here, from the source's buffers.
		h, err := tar.NewReader(src).Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &archiveError{err}
		}
		if err := u.entry(ctx, h, src); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if err := skip(src, (blockSize-h.Size%blockSize)%blockSize); err != nil {
				return err
			}
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

func (u *unpacker) entry(ctx context.Context, h *tar.Header, src chunkSource) error {
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
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return badEntry("entry %q: a sparse file", name)
			}
		}
		var err error
		if h.Size <= smallMax {
			err = u.small(full, mode, h, src)
		} else {
			err = u.file(ctx, full, mode, h, src)
		}
		if err != nil {
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

func (u *unpacker) file(ctx context.Context, full string, mode fs.FileMode, h *tar.Header, src chunkSource) error {
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	var (
		n    int64
		werr error // the file's own error (a full disk): local
	)
	for n < h.Size && err == nil {
		var b []byte
		if b, err = src.next(int(min(h.Size-n, copyChunk))); err != nil {
			break
		}
		if _, werr = f.Write(b); werr != nil {
			break
		}
		n += int64(len(b))
		if n%copyChunk == 0 {
			err = ctx.Err()
		}
	}
	if err == nil && werr == nil {
		werr = f.Chmod(mode)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	switch {
	case werr != nil:
		return werr
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return &archiveError{fmt.Errorf("entry %q: %d of %d bytes: %w", h.Name, n, h.Size, io.ErrUnexpectedEOF)}
	case err != nil:
		return err // the stream's, or the context's
	}
	return setMtime(full, h.ModTime)
}

// skip reads n bytes of src.
func skip(src chunkSource, n int64) error {
	for n > 0 {
		b, err := src.next(int(n))
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return &archiveError{err}
		}
		n -= int64(len(b))
	}
	return nil
}

// readerSource is a chunkSource on any reader, through a buffer.
type readerSource struct{ br *bufio.Reader }

func newReaderSource(r io.Reader) *readerSource {
	return &readerSource{bufio.NewReaderSize(r, chunkSize)}
}

func (r *readerSource) Read(p []byte) (int, error) { return r.br.Read(p) }

func (r *readerSource) next(max int) ([]byte, error) {
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
	}
	b, _ := r.br.Peek(min(max, r.br.Buffered()))
	_, _ = r.br.Discard(len(b))
	return b, nil
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
