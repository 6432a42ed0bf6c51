package volume

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// The archive format: a POSIX tar stream (PAX where a field needs it,
// e.g. sub-second mtimes or long names), no compression, written the same
// way every time from the same directory:
//
//   - the volume's root first, as "./", then a depth-first walk with every
//     directory's entries sorted by name (bytes), each directory before
//     its contents; directories end in '/';
//   - regular files, directories and symlinks only; sockets are skipped
//     (a stopped server's leftover; it makes a new one), devices and named
//     pipes are refused; hard links are written as separate files;
//   - kept: the name, the type, the permission bits with setuid, setgid
//     and sticky, the mtime to the nanosecond, a symlink's target, a
//     file's contents; fixed: uid and gid 0, no user or group names, no
//     atime or ctime, the PAX header names Go's archive/tar derives from
//     the entry's name;
//   - the end: two zero blocks, no padding to a record size.
//
// Two passes over an unchanged directory therefore write the same bytes,
// which is what lets Snapshot hash the directory without writing anything
// and the handler stream it later.

// walkMode says what a walk tolerates.
type walkMode int

const (
	// walkStopped: nothing runs in the directory (the handoff). Anything
	// changing under the walk is an error.
	walkStopped walkMode = iota
	// walkLive: the child may still be running (a periodic copy): an entry
	// that vanished between the listing and its open is skipped.
	walkLive
)

// copyChunk is how much of a file is copied between two looks at the
// context.
const copyChunk = 16 << 20

var zeroBlocks [1024]byte

// archiver writes a directory's archive to w.
type archiver struct {
	root string
	mode walkMode
	log  hclog.Logger
	// buf, when set, is the buffer for file contents; when nil, contents
	// go through io.Copy, so an http.ResponseWriter's ReadFrom (sendfile
	// on a TCP connection) sees the file itself.
	buf []byte
	// bw, when set, is the buffer a.w writes into (streaming): small files
	// are copied into it, to go out with others in large writes; it is
	// flushed before a large file goes out with sendfile.
	bw    *bufio.Writer
	small []byte
	w     countWriter
	hdr   bytes.Buffer
	files int
}

// countWriter counts what it writes, writes no more than limit bytes
// (when > 0), and keeps its writer's ReadFrom (the archiver bounds what it
// gives ReadFrom itself).
type countWriter struct {
	w     io.Writer
	n     int64
	limit int64
	werr  error // the first error of w itself (the peer), not of a source
}

// errOverLimit: the archive is longer than the snapshot it should be.
var errOverLimit = errors.New("the directory's archive is longer than its snapshot")

func (c *countWriter) Write(p []byte) (int, error) {
	var over bool
	if c.limit > 0 && c.n+int64(len(p)) > c.limit {
		p, over = p[:c.limit-c.n], true
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.werr == nil {
		c.werr = err
	}
	if err == nil && over {
		err = errOverLimit
	}
	return n, err
}

// room is how much more may be written (a large number without a limit).
func (c *countWriter) room() int64 {
	if c.limit <= 0 {
		return 1 << 62
	}
	return c.limit - c.n
}

func (c *countWriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.w.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		c.n += n
		return n, err
	}
	return io.Copy(writerOnly{c}, r)
}

// writerOnly hides a writer's ReadFrom (so io.CopyBuffer uses the buffer).
type writerOnly struct{ io.Writer }

// archive writes the whole archive of a.root to a.w.
func (a *archiver) archive(ctx context.Context) error {
	fi, err := os.Lstat(a.root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", a.root)
	}
	if err := a.header(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	if err := a.dir(ctx, a.root, ""); err != nil {
		return err
	}
	_, err = a.w.Write(zeroBlocks[:])
	return err
}

func (a *archiver) header(h *tar.Header) error {
	h.Format = tar.FormatPAX
	a.hdr.Reset()
	// A tar.Writer per header: the contents and their padding are written
	// by the archiver itself (so a file can be sent with sendfile); the
	// writer is dropped, never closed.
	if err := tar.NewWriter(&a.hdr).WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	_, err := a.w.Write(a.hdr.Bytes())
	return err
}

func (a *archiver) vanished(err error) bool {
	return a.mode == walkLive && errors.Is(err, fs.ErrNotExist)
}

func (a *archiver) dir(ctx context.Context, full, rel string) error {
	ents, err := os.ReadDir(full) // sorted by name
	if err != nil {
		if rel != "" && a.vanished(err) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		cfull := filepath.Join(full, name)
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		t := e.Type()
		switch {
		case t.IsRegular():
			err = a.file(ctx, cfull, crel)
		case t.IsDir():
			var fi fs.FileInfo
			if fi, err = os.Lstat(cfull); err == nil {
				if !fi.IsDir() {
					err = fmt.Errorf("%s: changed type during the snapshot", cfull)
				} else if err = a.header(&tar.Header{Typeflag: tar.TypeDir, Name: crel + "/", Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()}); err == nil {
					a.files++
					err = a.dir(ctx, cfull, crel)
				}
			}
		case t&fs.ModeSymlink != 0:
			var fi fs.FileInfo
			var target string
			if fi, err = os.Lstat(cfull); err == nil {
				if target, err = os.Readlink(cfull); err == nil {
					err = a.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: crel, Linkname: target, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()})
					a.files++
				}
			}
		case t&fs.ModeSocket != 0:
			a.log.Warn("volume snapshot: skipping a socket (a server makes a new one when it starts)", "path", cfull)
		default:
			return fmt.Errorf("%s is a %s: a volume may hold only regular files, directories and symlinks", cfull, kindOf(t))
		}
		if err != nil {
			if a.vanished(err) {
				continue
			}
			return err
		}
	}
	return nil
}

func kindOf(t fs.FileMode) string {
	switch {
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	}
	return "file of an unknown type"
}

func (a *archiver) file(ctx context.Context, full, rel string) error {
	// O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or a FIFO
	// under the walk is neither followed nor waited on.
	f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: changed type during the snapshot", full)
	}
	size := fi.Size()
	if err := a.header(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: size, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	a.files++
	var done int64
	for done < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		room := a.w.room()
		if room <= 0 {
			return errOverLimit
		}
		lr := &io.LimitedReader{R: f, N: min(size-done, copyChunk, room)}
		var n int64
		switch {
		case a.buf != nil:
			n, err = io.CopyBuffer(writerOnly{&a.w}, lr, a.buf)
		case a.bw != nil && size <= smallMax:
			if a.small == nil {
				a.small = make([]byte, smallMax)
			}
			n, err = io.CopyBuffer(writerOnly{&a.w}, lr, a.small)
		default:
			if a.bw != nil {
				if err = a.bw.Flush(); err != nil {
					if a.w.werr == nil {
						a.w.werr = err // the peer's
					}
					return err
				}
			}
			n, err = io.Copy(&a.w, lr)
		}
		done += n
		if err != nil {
			return fmt.Errorf("%s: %w", full, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: shrank during the snapshot (%d of %d bytes): a running service needs a snapshot hook that makes a consistent copy", full, done, size)
		}
	}
	if pad := (blockSize - size%blockSize) % blockSize; pad > 0 {
		_, err = a.w.Write(zeroBlocks[:pad])
	}
	return err
}

const blockSize = 512

// tarMode is a file's mode as tar spells it: the permission bits and
// setuid, setgid, sticky.
func tarMode(m fs.FileMode) int64 {
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// fileMode is the inverse of tarMode (other bits are dropped).
func fileMode(v int64) fs.FileMode {
	m := fs.FileMode(v) & fs.ModePerm
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
