package volume

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Store keeps the volumes of the slots a node holds, under Root (see the
// package documentation for the layout). The zero value with Root set is
// ready; Open also recovers what a crash left behind. A Store must not be
// copied once used.
type Store struct {
	Root string
	Log  hclog.Logger
	// NoSync skips the fsyncs that make a restore and a received copy
	// durable before they replace what was there (tests and benchmarks).
	NoSync bool

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per volume: Snapshot, SnapshotFile, Restore, Ensure
	stale map[string]string      // volume -> sha256 of a directory snapshot that no longer matches
	// metaMu orders a snapshot file's replacement (the .tar, then its
	// .json) against the readers that look at the .json and open the .tar.
	metaMu sync.RWMutex
}

// Meta describes a snapshot: the SHA-256 of its archive (lowercase hex),
// the archive's size in bytes, how many entries it holds (regular files,
// directories and symlinks, the volume's root not counted) and when it was
// taken (after the snapshot hook).
type Meta struct {
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	Files   int       `json:"files"`
	TakenAt time.Time `json:"taken_at"`
}

const (
	snapshotsDir = ".snapshots"
	copiesDir    = ".copies"
	asideSuffix  = ".aside"
	restoreInfix = ".restore-"
	tmpPrefix    = ".tmp-"
	incoming     = ".incoming-"
	// KeepCopies is how many received copies of a volume a node keeps.
	KeepCopies = 2
)

// Open creates root if needed and returns a Store on it, after Recover.
func Open(root string, log hclog.Logger) (*Store, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	s := &Store{Root: root, Log: log}
	if err := s.Recover(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) log() hclog.Logger {
	if s.Log == nil {
		return hclog.NewNullLogger()
	}
	return s.Log
}

// Dir is the live directory of a volume: <Root>/<unit>/<k>/<path>, or ""
// when the names are not valid (ValidUnit, ValidVolume, k >= 0).
func (s *Store) Dir(unit string, k int, path string) string {
	if validSlot(unit, k, path) != nil {
		return ""
	}
	return filepath.Join(s.Root, unit, strconv.Itoa(k), path)
}

// Empty removes everything in the slot's volume directory, keeping the
// directory (an old copy of another holder's data must not pass for the
// slot's when it starts empty).
func (s *Store) Empty(unit string, k int, path string) error {
	if err := validSlot(unit, k, path); err != nil {
		return err
	}
	dir := s.Dir(unit, k, path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func key(unit string, k int, path string) string {
	return unit + "/" + strconv.Itoa(k) + "/" + path
}

func (s *Store) lock(unit string, k int, path string) func() {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	kk := key(unit, k, path)
	m := s.locks[kk]
	if m == nil {
		m = &sync.Mutex{}
		s.locks[kk] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (s *Store) setStale(unit string, k int, path, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale == nil {
		s.stale = map[string]string{}
	}
	if sha == "" {
		delete(s.stale, key(unit, k, path))
	} else {
		s.stale[key(unit, k, path)] = sha
	}
}

func (s *Store) isStale(unit string, k int, path, sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale[key(unit, k, path)] == sha
}

func (s *Store) snapshotBase(unit string, k int, path string) string {
	return filepath.Join(s.Root, snapshotsDir, unit, strconv.Itoa(k), path)
}

// dirMetaPath: the Meta of the last Snapshot (the directory itself is the
// snapshot); fileTarPath and fileMetaPath: the last SnapshotFile.
func (s *Store) dirMetaPath(unit string, k int, path string) string {
	return s.snapshotBase(unit, k, path) + ".json"
}
func (s *Store) fileTarPath(unit string, k int, path string) string {
	return s.snapshotBase(unit, k, path) + ".tar"
}
func (s *Store) fileMetaPath(unit string, k int, path string) string {
	return s.snapshotBase(unit, k, path) + ".tar.json"
}
func (s *Store) copiesPath(unit string, k int, path string) string {
	return filepath.Join(s.Root, copiesDir, unit, strconv.Itoa(k), path)
}

// Recover repairs what a crash left under Root: a swap interrupted between
// its two renames (an aside directory with no live directory is renamed
// back; with a live directory, the swap had finished and the aside one is
// removed), restores in progress, and temporary files of snapshots and
// received copies. Open calls it; Restore, Snapshot and Ensure repair
// their own volume.
func (s *Store) Recover() error {
	units, err := os.ReadDir(s.Root)
	if err != nil {
		return err
	}
	var errs []error
	for _, u := range units {
		if !u.IsDir() || strings.HasPrefix(u.Name(), ".") {
			continue
		}
		slots, err := os.ReadDir(filepath.Join(s.Root, u.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sl := range slots {
			if !sl.IsDir() {
				continue
			}
			slot := filepath.Join(s.Root, u.Name(), sl.Name())
			errs = append(errs, s.recoverSlot(slot))
		}
	}
	for _, d := range []string{snapshotsDir, copiesDir} {
		errs = append(errs, removeTemps(filepath.Join(s.Root, d)))
	}
	return errors.Join(errs...)
}

// recoverSlot repairs every volume of one slot directory.
func (s *Store) recoverSlot(slot string) error {
	ents, err := os.ReadDir(slot)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, asideSuffix):
			errs = append(errs, s.recoverVolume(filepath.Join(slot, strings.TrimSuffix(name, asideSuffix))))
		case strings.Contains(name, restoreInfix):
			s.log().Info("volume: removing an unfinished restore", "dir", filepath.Join(slot, name))
			errs = append(errs, removeAll(filepath.Join(slot, name)))
		}
	}
	return errors.Join(errs...)
}

// recoverVolume finishes or undoes an interrupted swap of live, and
// removes unfinished restores next to it.
func (s *Store) recoverVolume(live string) error {
	aside := live + asideSuffix
	if _, err := os.Lstat(aside); err == nil {
		_, lerr := os.Lstat(live)
		switch {
		case errors.Is(lerr, fs.ErrNotExist):
			s.log().Warn("volume: a swap was interrupted before the new data was in place; putting the previous data back", "dir", live)
			if err := os.Rename(aside, live); err != nil {
				return err
			}
			if err := s.syncDir(filepath.Dir(live)); err != nil {
				return err
			}
		case lerr != nil:
			return lerr
		default:
			s.log().Info("volume: removing the previous data of a finished swap", "dir", aside)
			if err := removeAll(aside); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent, base := filepath.Split(live)
	ents, err := os.ReadDir(parent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), base+restoreInfix) {
			s.log().Info("volume: removing an unfinished restore", "dir", filepath.Join(parent, e.Name()))
			if err := removeAll(filepath.Join(parent, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeAll removes a tree, making its directories writable if a first
// try fails (a volume may hold read-only directories).
func removeAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// removeTemps removes the store's temporary files under dir.
func removeTemps(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if n := d.Name(); !d.IsDir() && (strings.HasPrefix(n, tmpPrefix) || strings.HasPrefix(n, incoming)) {
			return os.Remove(p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Ensure makes sure a volume's live directory exists (mode 0700, empty
// when new), after repairing an interrupted swap, and returns it: a slot
// that starts with no data to restore (handoff "none", on_missing
// "empty", the first start).
func (s *Store) Ensure(unit string, k int, path string) (string, error) {
	if err := validSlot(unit, k, path); err != nil {
		return "", err
	}
	defer s.lock(unit, k, path)()
	live := s.Dir(unit, k, path)
	if err := s.recoverVolume(live); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(live), 0o755); err != nil {
		return "", err
	}
	if err := os.Mkdir(live, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if fi, err := os.Lstat(live); err != nil {
		return "", err
	} else if !fi.IsDir() {
		return "", fmt.Errorf("volume %s: %s is not a directory", key(unit, k, path), live)
	}
	return live, nil
}

// Snapshot takes the snapshot of a stopped volume for a planned handoff.
// The hook, if any, runs first in the volume's directory (with env, nil
// meaning mariposa's own environment, plus MARIPOSA_VOLUME_DIR), bounded
// by ctx, and may change the directory. Then one pass over the directory
// hashes its archive, writing nothing: the directory itself is the
// snapshot, which the handler streams later, byte for byte the same as
// long as nothing writes the directory (the child is stopped, and the
// receiver refuses anything else). The Meta is recorded under .snapshots
// (it survives a restart of mariposa) and is what the old holder
// publishes.
func (s *Store) Snapshot(ctx context.Context, unit string, k int, path string, hook []string, env []string) (Meta, error) {
	if err := validSlot(unit, k, path); err != nil {
		return Meta{}, err
	}
	defer s.lock(unit, k, path)()
	live := s.Dir(unit, k, path)
	fail := func(what string, err error) (Meta, error) {
		return Meta{}, fmt.Errorf("volume %s: snapshot: %s: %w", key(unit, k, path), what, err)
	}
	if err := s.recoverVolume(live); err != nil {
		return fail("recovering", err)
	}
	// The previous snapshot of the directory is void from now on.
	if err := os.Remove(s.dirMetaPath(unit, k, path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("removing the previous snapshot's record", err)
	}
	s.setStale(unit, k, path, "")
	if fi, err := os.Lstat(live); err != nil {
		return fail("the volume's directory", err)
	} else if !fi.IsDir() {
		return fail("the volume's directory", fmt.Errorf("%s is not a directory", live))
	}
	if len(hook) > 0 {
		if err := runHook(ctx, s.log(), "snapshot", hook, env, live); err != nil {
			return fail("hook", err)
		}
	}
	taken := time.Now().UTC()
	// The files are read straight into the hasher's chunks (ReadFrom),
	// and hashed in another goroutine while the next ones are read.
	h := newAsyncHasher(sha256.New())
	a := &archiver{root: live, mode: walkStopped, log: s.log(), w: countWriter{w: h}}
	if err := a.archive(ctx); err != nil {
		h.Close()
		return fail("hashing", err)
	}
	m := Meta{SHA256: hex.EncodeToString(h.Sum()), Size: a.w.n, Files: a.files, TakenAt: taken}
	if err := s.writeJSON(s.dirMetaPath(unit, k, path), m); err != nil {
		return fail("recording", err)
	}
	s.log().Info("volume: snapshot taken", "volume", key(unit, k, path), "sha256", m.SHA256, "size", m.Size, "files", m.Files)
	return m, nil
}

// SnapshotFile takes a periodic snapshot of a volume whose child may be
// running: the hook, if any, runs in the directory first (it should make
// the directory consistent, e.g. "redis-cli save"; without one the copy is
// whatever the files hold while they are read), then the archive is
// written to <Root>/.snapshots/<unit>/<k>/<path>.tar (a temporary file
// renamed into place, read-only) while it is hashed, with its Meta next to
// it in <path>.tar.json. Push sends it to other nodes; the handler serves
// it too. A file that vanishes during the walk is skipped; one that
// shrinks fails the snapshot (try again at the next interval).
func (s *Store) SnapshotFile(ctx context.Context, unit string, k int, path string, hook []string, env []string) (Meta, error) {
	if err := validSlot(unit, k, path); err != nil {
		return Meta{}, err
	}
	defer s.lock(unit, k, path)()
	live := s.Dir(unit, k, path)
	fail := func(what string, err error) (Meta, error) {
		return Meta{}, fmt.Errorf("volume %s: snapshot file: %s: %w", key(unit, k, path), what, err)
	}
	if err := s.recoverVolume(live); err != nil {
		return fail("recovering", err)
	}
	if len(hook) > 0 {
		if err := runHook(ctx, s.log(), "snapshot", hook, env, live); err != nil {
			return fail("hook", err)
		}
	}
	dst := s.fileTarPath(unit, k, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fail("creating "+filepath.Dir(dst), err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), tmpPrefix+"*")
	if err != nil {
		return fail("creating the file", err)
	}
	defer os.Remove(f.Name()) // after the rename: no such file
	defer f.Close()
	taken := time.Now().UTC()
	h := sha256.New()
	bw := bufio.NewWriterSize(f, chunkSize)
	a := &archiver{root: live, mode: walkLive, log: s.log(), buf: make([]byte, chunkSize), w: countWriter{w: io.MultiWriter(h, bw)}}
	if err := a.archive(ctx); err != nil {
		return fail("writing", err)
	}
	if err := bw.Flush(); err != nil {
		return fail("writing", err)
	}
	if err := f.Chmod(0o444); err != nil {
		return fail("writing", err)
	}
	if err := f.Close(); err != nil {
		return fail("writing", err)
	}
	m := Meta{SHA256: hex.EncodeToString(h.Sum(nil)), Size: a.w.n, Files: a.files, TakenAt: taken}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if err := os.Rename(f.Name(), dst); err != nil {
		return fail("renaming", err)
	}
	if err := s.writeJSON(s.fileMetaPath(unit, k, path), m); err != nil {
		return fail("recording", err)
	}
	s.log().Info("volume: snapshot file written", "volume", key(unit, k, path), "sha256", m.SHA256, "size", m.Size, "files", m.Files)
	return m, nil
}

// writeJSON writes v to p atomically.
func (s *Store) writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), tmpPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil && !s.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func readMeta(p string) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(p)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

// generationPath: the generation of a volume's live data (the slot term
// whose writes it holds), beside its snapshot records.
func (s *Store) generationPath(unit string, k int, path string) string {
	return s.snapshotBase(unit, k, path) + ".generation"
}

// Generation is the generation SetGeneration last recorded for a volume's
// live data: the fencing index of the slot's term whose writes it holds.
// 0 when none was recorded (a new volume, or one from a mariposa that did
// not record them).
func (s *Store) Generation(unit string, k int, path string) (uint64, error) {
	if err := validSlot(unit, k, path); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(s.generationPath(unit, k, path))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var g struct {
		Generation uint64 `json:"generation"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return 0, fmt.Errorf("%s: %w", s.generationPath(unit, k, path), err)
	}
	return g.Generation, nil
}

// SetGeneration records the generation of a volume's live data, durably,
// before an instance that writes it starts.
func (s *Store) SetGeneration(unit string, k int, path string, gen uint64) error {
	if err := validSlot(unit, k, path); err != nil {
		return err
	}
	defer s.lock(unit, k, path)()
	return s.writeJSON(s.generationPath(unit, k, path), struct {
		Generation uint64 `json:"generation"`
	}{gen})
}
