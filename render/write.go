package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// writeFile makes path hold data with mode perm, atomically: readers see the
// old content or the new one, never a part. Unchanged content is not
// rewritten (changed is false; a wrong mode is still corrected in place).
//
// The new content goes to a temporary file in the destination's directory
// (so the rename stays on one filesystem), is fsynced and given its mode and,
// when possible, the previous file's owner before the rename; the directory
// is fsynced after it so the rename itself survives a crash.
func writeFile(path string, data []byte, perm os.FileMode) (changed bool, err error) {
	var owner *syscall.Stat_t
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
			if fi.Mode().Perm() != perm.Perm() {
				if err := os.Chmod(path, perm.Perm()); err != nil {
					return false, err
				}
			}
			return false, nil
		}
		owner, _ = fi.Sys().(*syscall.Stat_t)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".mariposa-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return false, err
	}
	if err = f.Sync(); err != nil {
		return false, err
	}
	if err = f.Chmod(perm.Perm()); err != nil {
		return false, err
	}
	if owner != nil {
		// Keep the owner an operator gave the file; only root may, so
		// failing is expected and harmless otherwise.
		_ = f.Chown(int(owner.Uid), int(owner.Gid))
	}
	if err = f.Close(); err != nil {
		return false, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return false, err
	}
	if d, derr := os.Open(dir); derr == nil {
		if serr := d.Sync(); serr != nil {
			d.Close()
			return true, fmt.Errorf("sync %s: %w", dir, serr)
		}
		d.Close()
	}
	return true, nil
}
