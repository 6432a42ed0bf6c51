package volume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Source is where a Restore fetches a snapshot from: the old holder's
// SnapshotURL (a planned handoff) or another node's LatestCopyURL (an
// unplanned loss), the SHA-256 and size that were published for it, the
// headers that prove the caller may have it (e.g. its session), and the
// client to use (nil: http.DefaultClient; Restore's context bounds it).
type Source struct {
	URL    string
	SHA256 string
	Size   int64
	Header http.Header
	Client *http.Client
}

// Errors of a Restore, for errors.Is. Only transport errors (the
// connection failed or the stream stopped short, a 5xx answer) are tried
// again; these are not.
var (
	// ErrChecksum: the bytes received are not the ones published.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrSize: the stream is longer than the size published.
	ErrSize = errors.New("size mismatch")
	// ErrConflict: the source holds another snapshot than the one asked
	// for (409): the published handoff is not what it serves any more.
	ErrConflict = errors.New("the source holds another snapshot")
	// ErrRefused: the source refused the caller (403).
	ErrRefused = errors.New("refused by the source")
	// ErrNotFound: the source has no snapshot of this volume (404).
	ErrNotFound = errors.New("no such snapshot at the source")
	// ErrHook: the restore hook failed or was killed.
	ErrHook = errors.New("restore hook failed")
)

// Retries of a Restore: attempts in all, and the pause before the second
// (doubled before the third).
var (
	restoreAttempts = 3
	retryBackoff    = time.Second
)

// transportError is a failure of the transfer itself: worth a new attempt.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// swapHook, when set (tests), is called between the steps of a swap; an
// error stops the swap there, as a crash would.
var swapHook func(step string) error

// Restore fetches the snapshot src names and makes it the volume's live
// directory:
//
//  1. the body is streamed through a SHA-256 hasher and a byte counter
//     (in a goroutine of their own, a few chunks ahead) straight into a
//     tar reader that unpacks it into a new directory next to the live
//     one, <dir>.restore-<random>; memory stays bounded (8 chunks of 256
//     KiB, and 34 buffers of 64 KiB for the small files that 2 workers
//     create), and no more than src.Size bytes are read;
//  2. at the end of the stream the size and the checksum must be the
//     published ones; any mismatch, error or timeout removes the new
//     directory and returns an error saying what failed (ErrChecksum:
//     "sha256 <got> expected <want>"); a transport error is tried again
//     from the start, up to 3 attempts, a mismatch never;
//  3. the hook, if any, runs in the new directory (env, nil meaning
//     mariposa's environment, plus MARIPOSA_VOLUME_DIR=<new dir>); its
//     process group is killed when the timeout passes;
//  4. unless NoSync, the new tree is flushed to the disk (one syncfs on
//     Linux, an fsync per file elsewhere);
//  5. swap: the live directory is renamed to <dir>.aside, the new one into
//     place, and the aside one removed. A crash between the two renames
//     leaves an aside directory and no live one: Recover (Open) or the
//     next Restore, Snapshot or Ensure of the volume renames it back.
//
// timeout (if > 0) bounds all of it. The live directory is untouched
// unless Restore returns nil. The returned Meta is the snapshot's, with
// the entries unpacked and, when the source says, when it was taken.
func (s *Store) Restore(ctx context.Context, unit string, k int, path string, src Source, hook []string, env []string, timeout time.Duration) (Meta, error) {
	if err := validSlot(unit, k, path); err != nil {
		return Meta{}, err
	}
	if err := validSHA256(src.SHA256); err != nil {
		return Meta{}, fmt.Errorf("volume %s: restore: %w", key(unit, k, path), err)
	}
	if src.Size < 0 {
		return Meta{}, fmt.Errorf("volume %s: restore: size %d", key(unit, k, path), src.Size)
	}
	defer s.lock(unit, k, path)()
	start := time.Now()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	live := s.Dir(unit, k, path)
	log := s.log().With("volume", key(unit, k, path))
	fail := func(what string, err error) (Meta, error) {
		if errors.Is(err, context.DeadlineExceeded) && timeout > 0 && ctx.Err() != nil {
			err = fmt.Errorf("timed out after %s (restore_timeout %s): %w", time.Since(start).Round(time.Millisecond), timeout, err)
		}
		log.Error("volume: restore failed", "step", what, "error", err)
		return Meta{}, fmt.Errorf("volume %s: restore: %s: %w", key(unit, k, path), what, err)
	}
	if err := s.recoverVolume(live); err != nil {
		return fail("recovering", err)
	}
	parent := filepath.Dir(live)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fail("creating "+parent, err)
	}
	var (
		tmp string
		m   Meta
		u   *unpacker
	)
	for attempt := 1; ; attempt++ {
		var err error
		tmp, err = os.MkdirTemp(parent, filepath.Base(live)+restoreInfix+"*")
		if err != nil {
			return fail("creating the new directory", err)
		}
		m, u, err = s.fetch(ctx, tmp, src)
		if err == nil {
			break
		}
		if rerr := removeAll(tmp); rerr != nil {
			log.Error("volume: removing a failed restore", "dir", tmp, "error", rerr)
		}
		var te *transportError
		if !errors.As(err, &te) || attempt >= restoreAttempts || ctx.Err() != nil {
			if attempt > 1 {
				err = fmt.Errorf("attempt %d of %d: %w", attempt, restoreAttempts, err)
			}
			return fail("fetching "+src.URL, err)
		}
		wait := retryBackoff << (attempt - 1)
		log.Warn("volume: fetching the snapshot failed; trying again from the start", "attempt", attempt, "in", wait, "error", err)
		select {
		case <-ctx.Done():
			return fail("fetching "+src.URL, fmt.Errorf("%w (after: %v)", ctx.Err(), err))
		case <-time.After(wait):
		}
	}
	// From here on the new directory is removed unless it is swapped in.
	ok := false
	defer func() {
		if !ok {
			if err := removeAll(tmp); err != nil {
				log.Error("volume: removing a failed restore", "dir", tmp, "error", err)
			}
		}
	}()
	if err := ownTree(ctx, tmp); err != nil {
		return fail("giving the directory to its user", err)
	}
	if len(hook) > 0 {
		if err := runHook(ctx, s.log(), "restore", hook, env, tmp); err != nil {
			return fail("hook", fmt.Errorf("%w: %w", ErrHook, err))
		}
	}
	if !s.NoSync {
		if err := syncTree(ctx, u); err != nil {
			return fail("syncing the new directory", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fail("before the swap", err)
	}
	// A snapshot this node took of the directory being replaced is void.
	if err := os.Remove(s.dirMetaPath(unit, k, path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("removing the previous snapshot's record", err)
	}
	if err := s.swap(live, tmp); err != nil {
		return fail("swapping in the new directory", err)
	}
	ok = true
	log.Info("volume: restored", "from", src.URL, "sha256", m.SHA256, "size", m.Size, "files", m.Files, "took", time.Since(start))
	return m, nil
}

// fetch runs one attempt: GET src, unpack into tmp, verify.
func (s *Store) fetch(ctx context.Context, tmp string, src Source) (Meta, *unpacker, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src.URL, nil)
	if err != nil {
		return Meta{}, nil, err
	}
	for k, v := range src.Header {
		req.Header[k] = append([]string(nil), v...)
	}
	c := src.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return Meta{}, nil, fmt.Errorf("%w (%v)", cerr, err)
		}
		return Meta{}, nil, &transportError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		switch {
		case resp.StatusCode == http.StatusConflict:
			return Meta{}, nil, fmt.Errorf("%w: %w", ErrConflict, msg)
		case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
			return Meta{}, nil, fmt.Errorf("%w: %w", ErrRefused, msg)
		case resp.StatusCode == http.StatusNotFound:
			return Meta{}, nil, fmt.Errorf("%w: %w", ErrNotFound, msg)
		case resp.StatusCode >= 500:
			return Meta{}, nil, &transportError{msg}
		}
		return Meta{}, nil, msg
	}
	if h := resp.Header.Get(HeaderSHA256); h != "" && h != src.SHA256 {
		return Meta{}, nil, fmt.Errorf("%w: it serves sha256 %s, expected %s", ErrConflict, h, src.SHA256)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != src.Size {
		return Meta{}, nil, fmt.Errorf("%w: the source announces %d bytes, expected %d", ErrSize, resp.ContentLength, src.Size)
	}
	m := Meta{SHA256: src.SHA256, Size: src.Size}
	if t, err := time.Parse(time.RFC3339Nano, resp.Header.Get(HeaderTakenAt)); err == nil {
		m.TakenAt = t
	}
	v := &verifier{r: resp.Body, h: sha256.New(), limit: src.Size}
	pf := newPrefetcher(v)
	u := &unpacker{root: tmp}
	uerr := u.run(ctx, pf)
	// Did the stream fail under the unpacker? (Asked before the body is
	// closed below, which fails the prefetcher's read on purpose.)
	streamErr := pf.err
	if streamErr == io.EOF {
		streamErr = nil
	}
	local := uerr != nil && !isArchive(uerr) && streamErr == nil // the disk, the context
	if !local {
		// Read to the end of the stream (what follows the archive's end
		// is part of the checksum too); after a malformed archive, to say
		// whether the bytes are the published ones.
		_, _ = io.Copy(io.Discard, pf)
	}
	resp.Body.Close() // unblocks the prefetcher's read, if any
	pf.Close()        // v is ours again
	m.Files = u.files
	switch {
	case local:
		return m, nil, uerr
	case v.over:
		return m, nil, fmt.Errorf("%w: more than the %d bytes published", ErrSize, src.Size)
	case v.err != nil:
		if cerr := ctx.Err(); cerr != nil {
			return m, nil, fmt.Errorf("%w (after %d of %d bytes: %v)", cerr, v.n, src.Size, v.err)
		}
		return m, nil, &transportError{fmt.Errorf("the stream failed after %d of %d bytes: %w", v.n, src.Size, v.err)}
	case v.n < src.Size:
		return m, nil, &transportError{fmt.Errorf("truncated stream: %d of %d bytes", v.n, src.Size)}
	case uerr != nil && !isArchive(uerr):
		return m, nil, uerr
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != src.SHA256 {
		err := fmt.Errorf("%w: sha256 %s expected %s", ErrChecksum, got, src.SHA256)
		if uerr != nil {
			err = fmt.Errorf("%w (%v)", err, uerr)
		}
		return m, nil, err
	}
	if uerr != nil {
		return m, nil, fmt.Errorf("the snapshot has the published checksum but is not a volume archive: %w", uerr)
	}
	return m, u, nil
}

func isArchive(err error) bool {
	var ae *archiveError
	return errors.As(err, &ae)
}

// verifier hashes and counts what is read through it, reads no more than
// limit+1 bytes, and remembers the underlying reader's error.
type verifier struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	limit int64
	over  bool  // more than limit bytes
	err   error // the underlying reader's first error but io.EOF
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.over {
		return 0, ErrSize
	}
	if rest := v.limit + 1 - v.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.limit {
		v.over = true
		return n, ErrSize
	}
	if err != nil && err != io.EOF && v.err == nil {
		v.err = err
	}
	return n, err
}

// swap puts tmp in place of live (see Restore).
func (s *Store) swap(live, tmp string) error {
	step := func(name string) error {
		if swapHook != nil {
			return swapHook(name)
		}
		return nil
	}
	aside := live + asideSuffix
	parent := filepath.Dir(live)
	_, err := os.Lstat(live)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Rename(tmp, live); err != nil {
			return err
		}
		return s.syncDir(parent)
	case err != nil:
		return err
	}
	if err := os.Rename(live, aside); err != nil {
		return err
	}
	if err := step("aside"); err != nil {
		return err
	}
	if err := os.Rename(tmp, live); err != nil {
		if rerr := os.Rename(aside, live); rerr != nil {
			return fmt.Errorf("%w; and putting the previous data back failed (Recover will): %v", err, rerr)
		}
		return err
	}
	if err := step("renamed"); err != nil {
		return err
	}
	if err := s.syncDir(parent); err != nil {
		return err
	}
	if err := removeAll(aside); err != nil {
		// The new data is in place; Recover removes the rest later.
		s.log().Error("volume: removing the previous data", "dir", aside, "error", err)
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	if s.NoSync {
		return nil
	}
	return fsync(dir)
}

func fsync(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncEach fsyncs what an unpacker created: the regular files, then the
// directories, 8 at a time (the disk writes them in parallel; one by one
// each fsync would wait for its own). Linux uses syncfs instead
// (sync_linux.go).
func syncEach(ctx context.Context, u *unpacker) error {
	paths := make([]string, 0, len(u.regular)+len(u.dirs)+1)
	paths = append(paths, u.regular...)
	paths = append(paths, u.root)
	for _, d := range u.dirs {
		paths = append(paths, d.full)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan string)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				if err := fsync(p); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range paths {
		if ctx.Err() != nil {
			break
		}
		next <- p
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// Response headers of the handler.
const (
	HeaderSHA256  = "X-Mariposa-Sha256"
	HeaderTakenAt = "X-Mariposa-Taken-At"
	HeaderFiles   = "X-Mariposa-Files"
)
