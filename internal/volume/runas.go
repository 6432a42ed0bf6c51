package volume

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// RunAs is the user a volume belongs to: its service's user. Hooks run as
// it, and a restored directory is given to it.
type RunAs struct {
	Uid, Gid uint32
	Groups   []uint32
}

type runAsKey struct{}

// WithRunAs returns ctx carrying ra (nil: mariposa's own user) for the
// Restore, Snapshot and SnapshotFile calls made with it.
func WithRunAs(ctx context.Context, ra *RunAs) context.Context {
	if ra == nil {
		return ctx
	}
	return context.WithValue(ctx, runAsKey{}, ra)
}

func runAsFrom(ctx context.Context) *RunAs {
	ra, _ := ctx.Value(runAsKey{}).(*RunAs)
	return ra
}

// hookAttr is the process attributes of a hook run with ctx: a process
// group of its own, as the volume's user.
func hookAttr(ctx context.Context) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if ra := runAsFrom(ctx); ra != nil {
		a.Credential = &syscall.Credential{Uid: ra.Uid, Gid: ra.Gid, Groups: ra.Groups}
	}
	return a
}

// Own gives dir (not what is in it) to ra; nil changes nothing.
func Own(dir string, ra *RunAs) error {
	if ra == nil {
		return nil
	}
	return os.Lchown(dir, int(ra.Uid), int(ra.Gid))
}

// ownTree gives dir and everything in it to the user of ctx, if any: the
// files of a restored archive are mariposa's as unpacked.
func ownTree(ctx context.Context, dir string) error {
	ra := runAsFrom(ctx)
	if ra == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(ra.Uid), int(ra.Gid))
	})
}
