package render

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/mariposa-sh/mariposa/internal/users"
	"github.com/mariposa-sh/mariposa/schema"
)

// writeFile makes path hold data with mode perm, atomically: readers see the
// old content or the new one, never a part. Unchanged content is not
// rewritten (changed is false; a wrong mode is still corrected in place).
//
// The new content goes to a temporary file in the destination's directory
// (so the rename stays on one filesystem), is given its mode and, when
// possible, the previous file's owner, and is fsynced before the rename; the
// directory is fsynced after it so the rename itself survives a crash.
// writeFile returns once all of that is done.
//
// Renders that write into one directory at the same time share the work of
// putting their files in place (see dirWriter); a lone write costs what it
// always did.
func writeFile(path string, data []byte, perm os.FileMode) (changed bool, err error) {
	return writeFileOwned(path, data, perm, -1, -1)
}

// writeFileOwned is writeFile that gives the file to uid:gid (each -1:
// keep the previous file's, as writeFile does), also when only the owner
// is wrong.
func writeFileOwned(path string, data []byte, perm os.FileMode, uid, gid int) (changed bool, err error) {
	var owner *syscall.Stat_t
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		if cur, err := os.Open(path); err == nil {
			// The old file stays open until the new one has replaced it,
			// so that its last close, not the rename, frees it: outside
			// the directory's batch of renames (freeing it took ten
			// times as long as the rename on the benchmark's ext4).
			defer cur.Close()
			if fi.Size() == int64(len(data)) && sameContent(cur, data) {
				if fi.Mode().Perm() != perm.Perm() {
					if err := os.Chmod(path, perm.Perm()); err != nil {
						return false, err
					}
				}
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && (uid >= 0 && st.Uid != uint32(uid) || gid >= 0 && st.Gid != uint32(gid)) {
					if err := os.Chown(path, uid, gid); err != nil {
						return false, err
					}
				}
				return false, nil
			}
		}
		owner, _ = fi.Sys().(*syscall.Stat_t)
	}
	if uid >= 0 || gid >= 0 {
		o := syscall.Stat_t{Uid: uint32(uid), Gid: uint32(gid)}
		if owner != nil {
			if uid < 0 {
				o.Uid = owner.Uid
			}
			if gid < 0 {
				o.Gid = owner.Gid
			}
		} else if uid < 0 {
			o.Uid = uint32(os.Geteuid())
		} else if gid < 0 {
			o.Gid = uint32(os.Getegid())
		}
		owner = &o
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	w := &write{path: path, dir: dir}
	if err := w.createTemp(data, perm.Perm(), owner, uid >= 0 || gid >= 0); err != nil {
		if w.f != nil {
			w.f.Close()
			os.Remove(w.tmp)
		}
		return false, err
	}
	writers.put(w)
	return w.renamed, w.err
}

// sameContent reports whether f holds exactly data.
func sameContent(f *os.File, data []byte) bool {
	b := make([]byte, len(data)+1)
	n, err := io.ReadFull(f, b)
	if len(data) == 0 {
		return err == io.EOF
	}
	return err == io.ErrUnexpectedEOF && bytes.Equal(b[:n], data)
}

// write is one file to put in place: its temporary file, written but not
// yet fsynced, and the outcome.
type write struct {
	path, dir string
	f         *os.File
	tmp       string

	renamed bool  // path holds the new content (durably unless err)
	err     error // set with renamed by writeBatch
	lead    chan bool
}

// createTemp writes data to a new temporary file beside w's path, with its
// mode and owner.
func (w *write) createTemp(data []byte, perm os.FileMode, owner *syscall.Stat_t, strict bool) error {
	f, err := os.CreateTemp(w.dir, "."+filepath.Base(w.path)+".mariposa-*")
	if err != nil {
		return err
	}
	w.f, w.tmp = f, f.Name()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if owner != nil {
		// Keep the owner an operator gave the file; only root may, so
		// failing is expected and harmless otherwise. An owner the
		// template asks for must be given (strict).
		if err := f.Chown(int(owner.Uid), int(owner.Gid)); err != nil && strict {
			return fmt.Errorf("giving the file to %d:%d: %w", owner.Uid, owner.Gid, err)
		}
	}
	return nil
}

// sync fsyncs and closes w's temporary file.
func (w *write) sync() {
	w.err = w.f.Sync()
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
}

// writers are the directories being written into, by every Manager of the
// process.
var writers = dirWriters{dirs: map[string]*dirWriter{}}

type dirWriters struct {
	mu   sync.Mutex
	dirs map[string]*dirWriter // the directories with a batch under way
}

// dirWriter puts the files of one directory in place in batches, as a
// database commits a group. The first render to come puts its file in
// place at once; the files of the renders that finish meanwhile queue up,
// and one of those renders then puts them all in place: it fsyncs their
// temporary files side by side (concurrent fsyncs share the disk's cache
// flushes), renames each over its destination, and fsyncs the directory
// once. A rename is durable once an fsync of its directory that began
// after it has returned, so one fsync after all the renames is as safe as
// one after each. Every render returns only once its own file is durable.
// One directory's batches wait for nothing in another.
//
// Before, a hundred renders writing one file each queued on the
// directory's lock, each with an fsync of its file and one of the
// directory of its own.
type dirWriter struct {
	queue []*write // for the next batch
}

// put puts w's temporary file in place and sets w.renamed and w.err.
func (ws *dirWriters) put(w *write) {
	w.lead = make(chan bool, 1)
	ws.mu.Lock()
	d := ws.dirs[w.dir]
	lead := d == nil
	if lead {
		d = &dirWriter{}
		ws.dirs[w.dir] = d
	}
	d.queue = append(d.queue, w)
	ws.mu.Unlock()
	if !lead && !<-w.lead {
		return // another render put it in place
	}
	// Put one batch in place, this render's file in it; then hand what
	// queued meanwhile to one of its renders rather than serve the
	// others on and on.
	ws.mu.Lock()
	batch := d.queue
	d.queue = nil
	ws.mu.Unlock()
	writeBatch(w.dir, batch)
	ws.mu.Lock()
	var next *write
	if len(d.queue) > 0 {
		next = d.queue[0]
	} else {
		delete(ws.dirs, w.dir)
	}
	ws.mu.Unlock()
	for _, b := range batch {
		if b != w {
			b.lead <- false
		}
	}
	if next != nil {
		next.lead <- true
	}
}

// maxSyncs bounds the fsyncs of a batch in flight at once (each holds a
// thread).
const maxSyncs = 16

// writeBatch fsyncs the temporary files of ws, all in dir, renames each
// over its destination, then fsyncs dir.
func writeBatch(dir string, ws []*write) {
	if len(ws) == 1 {
		ws[0].sync()
	} else {
		var wg sync.WaitGroup
		next := make(chan *write)
		for range min(len(ws), maxSyncs) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for w := range next {
					w.sync()
				}
			}()
		}
		for _, w := range ws {
			next <- w
		}
		close(next)
		wg.Wait()
	}
	renamed := false
	for _, w := range ws {
		if w.err == nil {
			w.err = os.Rename(w.tmp, w.path)
		}
		if w.err != nil {
			os.Remove(w.tmp)
			continue
		}
		w.renamed, renamed = true, true
	}
	if !renamed {
		return
	}
	err := syncDir(dir)
	for _, w := range ws {
		if w.renamed {
			w.err = err
		}
	}
}

// syncDir fsyncs a directory, so that the renames into it survive a crash.
// One that cannot be opened is not an error: the renames are done.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// templateOwner is the uid and gid a template's file is given (-1: keep).
func templateOwner(t *schema.Template) (uid, gid int, err error) {
	uid, gid = -1, -1
	if t.User != "" {
		id, err := users.Resolve(t.User, t.Group)
		if err != nil {
			return -1, -1, err
		}
		return int(id.Uid), int(id.Gid), nil
	}
	if t.Group != "" {
		g, err := users.LookupGroup(t.Group)
		if err != nil {
			return -1, -1, err
		}
		gid = int(g)
	}
	return uid, gid, nil
}
