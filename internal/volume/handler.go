package volume

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Handler serves a node's volumes to the other nodes, under /v1/volumes/:
//
//	GET  /v1/volumes/<unit>/<k>/<path>?sha256=<hex>
//	     the current snapshot with that checksum (the directory of the last
//	     Snapshot, streamed as its archive, or the file of the last
//	     SnapshotFile); 409 when neither has it (or the directory changed
//	     since), 404 when there is none.
//	PUT  /v1/volumes/<unit>/<k>/<path>/copies?sha256=<hex>&taken_at=<RFC 3339>
//	     receive a pushed copy (Content-Length required): verified, stored
//	     read-only, the newest KeepCopies kept; 201 with its Meta (JSON).
//	GET  /v1/volumes/<unit>/<k>/<path>/copies/latest[?sha256=<hex>]
//	     the newest received copy (with sha256: the newest kept one with
//	     that checksum, 409 if none).
//
// HEAD is answered like GET, without the body. Answers carry
// X-Mariposa-Sha256, X-Mariposa-Taken-At and Content-Length. Names that
// are not valid (ValidUnit, ValidVolume, a canonical slot number) are
// refused with 400 before anything touches the disk. Every request that
// names a volume goes through authorize first (403 when it returns an
// error; a nil authorize refuses everything): the integrator checks there
// that the caller holds the slot (a GET of a snapshot or a copy) or is its
// holder (a PUT).
func (s *Store) Handler(authorize func(r *http.Request, unit string, k int) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/volumes/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		parts := strings.Split(rest, "/")
		var op string
		switch {
		case len(parts) == 3:
			op = "snapshot"
		case len(parts) == 4 && parts[3] == "copies":
			op = "put-copy"
		case len(parts) == 5 && parts[3] == "copies" && parts[4] == "latest":
			op = "latest-copy"
		default:
			http.Error(w, "no such volume endpoint", http.StatusNotFound)
			return
		}
		unit, path := parts[0], parts[2]
		k, err := parseSlot(parts[1])
		if err == nil {
			err = validSlot(unit, k, path)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		want := http.MethodGet
		if op == "put-copy" {
			want = http.MethodPut
		}
		if r.Method != want && !(want == http.MethodGet && r.Method == http.MethodHead) {
			if want == http.MethodGet {
				want += ", " + http.MethodHead
			}
			w.Header().Set("Allow", want)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if authorize == nil {
			err = errors.New("no authorization configured")
		} else {
			err = authorize(r, unit, k)
		}
		if err != nil {
			http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		switch op {
		case "snapshot":
			s.serveSnapshot(w, r, unit, k, path)
		case "put-copy":
			s.receiveCopy(w, r, unit, k, path)
		case "latest-copy":
			s.serveLatestCopy(w, r, unit, k, path)
		}
	})
}

func setHeaders(w http.ResponseWriter, m Meta) {
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Length", strconv.FormatInt(m.Size, 10))
	h.Set(HeaderSHA256, m.SHA256)
	if !m.TakenAt.IsZero() {
		h.Set(HeaderTakenAt, m.TakenAt.UTC().Format(time.RFC3339Nano))
	}
	if m.Files > 0 {
		h.Set(HeaderFiles, strconv.Itoa(m.Files))
	}
}

func (s *Store) serveSnapshot(w http.ResponseWriter, r *http.Request, unit string, k int, path string) {
	sha := r.URL.Query().Get("sha256")
	if err := validSHA256(sha); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	log := s.log().With("volume", key(unit, k, path), "remote", r.RemoteAddr)
	dm, derr := readMeta(s.dirMetaPath(unit, k, path))
	if derr == nil && dm.SHA256 == sha {
		if s.isStale(unit, k, path, sha) {
			http.Error(w, fmt.Sprintf("sha256 %s: the volume's directory changed since its snapshot", sha), http.StatusConflict)
			return
		}
		s.streamDir(w, r, unit, k, path, dm)
		return
	}
	// The snapshot file: its .json is read and the .tar opened under
	// metaMu, so that they belong together.
	s.metaMu.RLock()
	fm, ferr := readMeta(s.fileMetaPath(unit, k, path))
	var f *os.File
	if ferr == nil && fm.SHA256 == sha {
		f, ferr = os.Open(s.fileTarPath(unit, k, path))
	}
	s.metaMu.RUnlock()
	if f != nil {
		defer f.Close()
		s.serveFile(w, r, f, fm, log)
		return
	}
	switch {
	case derr == nil || ferr == nil:
		var have []string
		if derr == nil {
			have = append(have, "the directory's "+dm.SHA256)
		}
		if ferr == nil {
			have = append(have, "the file's "+fm.SHA256)
		}
		http.Error(w, fmt.Sprintf("sha256 %s is not the current snapshot (%s)", sha, strings.Join(have, ", ")), http.StatusConflict)
	case errors.Is(derr, fs.ErrNotExist) && errors.Is(ferr, fs.ErrNotExist):
		http.Error(w, "no snapshot of this volume", http.StatusNotFound)
	default:
		log.Error("volume: reading the snapshot's record", "dir", derr, "file", ferr)
		http.Error(w, "reading the snapshot's record failed", http.StatusInternalServerError)
	}
}

// streamDir writes the archive of the volume's directory, which must be
// the snapshot's bytes. The checksum is the receiver's to verify (it is
// not computed again here: the file contents go to the socket with
// sendfile); the size is checked here. When the stream cannot be the
// snapshot's (the directory changed), the connection is cut, so the
// receiver sees a truncated stream, and later requests get 409.
func (s *Store) streamDir(w http.ResponseWriter, r *http.Request, unit string, k int, path string, m Meta) {
	live := s.Dir(unit, k, path)
	if fi, err := os.Lstat(live); err != nil || !fi.IsDir() {
		s.setStale(unit, k, path, m.SHA256)
		http.Error(w, "the volume's directory is gone since its snapshot", http.StatusConflict)
		return
	}
	setHeaders(w, m)
	if r.Method == http.MethodHead {
		return
	}
	start := time.Now()
	// Headers and small files gather in bw, large files go out with
	// sendfile (bw's ReadFrom hands them to the ResponseWriter's once bw
	// is flushed).
	bw := bufio.NewWriterSize(w, chunkSize)
	a := &archiver{root: live, mode: walkStopped, log: s.log(), bw: bw, w: countWriter{w: bw, limit: m.Size}}
	err := a.archive(r.Context())
	if err == nil {
		if err = bw.Flush(); err != nil && a.w.werr == nil {
			a.w.werr = err // the peer's
		}
	}
	if err == nil && a.w.n != m.Size {
		err = fmt.Errorf("%d bytes written, %d in the snapshot", a.w.n, m.Size)
	}
	log := s.log().With("volume", key(unit, k, path), "remote", r.RemoteAddr)
	if err != nil {
		if a.w.werr == nil && r.Context().Err() == nil {
			// Not the peer: the directory is not what was hashed.
			s.setStale(unit, k, path, m.SHA256)
			log.Error("volume: the directory no longer matches its snapshot; cutting the transfer", "error", err)
		} else {
			log.Warn("volume: the transfer of a snapshot stopped", "error", err)
		}
		panic(http.ErrAbortHandler)
	}
	log.Info("volume: snapshot served", "sha256", m.SHA256, "size", m.Size, "took", time.Since(start))
}

func (s *Store) serveFile(w http.ResponseWriter, r *http.Request, f *os.File, m Meta, log hclog.Logger) {
	fi, err := f.Stat()
	if err != nil || fi.Size() != m.Size {
		http.Error(w, "the snapshot file does not have its recorded size", http.StatusConflict)
		return
	}
	setHeaders(w, m)
	if r.Method == http.MethodHead {
		return
	}
	if n, err := io.Copy(w, f); err != nil || n != m.Size { // sendfile
		log.Warn("volume: the transfer of a snapshot file stopped", "error", err, "bytes", n)
		panic(http.ErrAbortHandler)
	}
}

// copyName is a received copy's file name: its taken_at (UnixNano, 20
// digits, so that names sort by time) and its checksum.
var copyName = regexp.MustCompile(`^([0-9]{20})-([0-9a-f]{64})\.tar$`)

type copyFile struct {
	name string
	meta Meta
}

// Copies lists the copies of a volume this node received, oldest first.
func (s *Store) Copies(unit string, k int, path string) ([]Meta, error) {
	if err := validSlot(unit, k, path); err != nil {
		return nil, err
	}
	cs, err := s.copies(unit, k, path)
	ms := make([]Meta, len(cs))
	for i, c := range cs {
		ms[i] = c.meta
	}
	return ms, err
}

func (s *Store) copies(unit string, k int, path string) ([]copyFile, error) {
	dir := s.copiesPath(unit, k, path)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cs []copyFile
	for _, e := range ents {
		mm := copyName.FindStringSubmatch(e.Name())
		if mm == nil || !e.Type().IsRegular() {
			continue
		}
		ns, _ := strconv.ParseInt(mm[1], 10, 64)
		fi, err := e.Info()
		if err != nil {
			continue
		}
		cs = append(cs, copyFile{filepath.Join(dir, e.Name()), Meta{SHA256: mm[2], Size: fi.Size(), TakenAt: time.Unix(0, ns).UTC()}})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	return cs, nil
}

func (s *Store) receiveCopy(w http.ResponseWriter, r *http.Request, unit string, k int, path string) {
	q := r.URL.Query()
	sha := q.Get("sha256")
	if err := validSHA256(sha); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	taken, err := time.Parse(time.RFC3339Nano, q.Get("taken_at"))
	if err != nil || taken.UnixNano() < 0 {
		http.Error(w, "taken_at: not an RFC 3339 time after 1970", http.StatusBadRequest)
		return
	}
	if r.ContentLength < 0 {
		http.Error(w, "Content-Length required", http.StatusLengthRequired)
		return
	}
	log := s.log().With("volume", key(unit, k, path), "remote", r.RemoteAddr)
	dir := s.copiesPath(unit, k, path)
	fail := func(code int, msg string, err error) {
		if code >= 500 {
			log.Error("volume: receiving a copy", "error", err)
		} else {
			log.Warn("volume: refusing a copy", "reason", msg, "error", err)
		}
		if err != nil {
			msg += ": " + err.Error()
		}
		http.Error(w, msg, code)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fail(http.StatusInternalServerError, "creating the copies' directory", err)
		return
	}
	f, err := os.CreateTemp(dir, incoming+"*")
	if err != nil {
		fail(http.StatusInternalServerError, "creating the file", err)
		return
	}
	defer os.Remove(f.Name()) // after the rename: no such file
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(writerOnly{io.MultiWriter(h, f)}, io.LimitReader(r.Body, r.ContentLength+1), make([]byte, chunkSize))
	if err != nil {
		fail(http.StatusBadRequest, "reading the copy", err)
		return
	}
	if n != r.ContentLength {
		fail(http.StatusBadRequest, fmt.Sprintf("size %d, Content-Length %d", n, r.ContentLength), nil)
		return
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		fail(http.StatusBadRequest, fmt.Sprintf("%v: sha256 %s expected %s", ErrChecksum, got, sha), nil)
		return
	}
	if !s.NoSync {
		err = f.Sync()
	}
	if err == nil {
		err = f.Chmod(0o444)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	name := filepath.Join(dir, fmt.Sprintf("%020d-%s.tar", taken.UnixNano(), sha))
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err == nil {
		err = s.syncDir(dir)
	}
	if err != nil {
		fail(http.StatusInternalServerError, "storing the copy", err)
		return
	}
	m := Meta{SHA256: sha, Size: n, TakenAt: taken.UTC()}
	cs, err := s.copies(unit, k, path)
	for i := 0; err == nil && i < len(cs)-KeepCopies; i++ {
		err = os.Remove(cs[i].name)
	}
	if err != nil {
		log.Error("volume: removing older copies", "error", err)
	}
	log.Info("volume: copy received", "sha256", sha, "size", n, "taken_at", m.TakenAt)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(m)
}

func (s *Store) serveLatestCopy(w http.ResponseWriter, r *http.Request, unit string, k int, path string) {
	sha := r.URL.Query().Get("sha256")
	if sha != "" {
		if err := validSHA256(sha); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	cs, err := s.copies(unit, k, path)
	if err != nil {
		s.log().Error("volume: listing copies", "error", err)
		http.Error(w, "listing the copies failed", http.StatusInternalServerError)
		return
	}
	if len(cs) == 0 {
		http.Error(w, "no copy of this volume", http.StatusNotFound)
		return
	}
	// The newest first; a copy can be pruned between the listing and the
	// open, so try the next.
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if sha != "" && c.meta.SHA256 != sha {
			continue
		}
		f, err := os.Open(c.name)
		if err != nil {
			continue
		}
		defer f.Close()
		s.serveFile(w, r, f, c.meta, s.log().With("volume", key(unit, k, path), "remote", r.RemoteAddr))
		return
	}
	http.Error(w, fmt.Sprintf("no kept copy has sha256 %s (the newest has %s)", sha, cs[len(cs)-1].meta.SHA256), http.StatusConflict)
}
