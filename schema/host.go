package schema

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// checkHost warns when a service could not start on this machine: its dir
// is missing or not a directory, or its program is not found or not
// executable. Warnings only: a file may be validated on another machine
// than the one it runs on.
func (l *loader) checkHost(svc *Service, cmdAttr, dirAttr *hcl.Attribute) {
	dirOK := true
	if svc.Dir != "" && dirAttr != nil {
		fi, err := os.Stat(svc.Dir)
		switch {
		case err != nil:
			dirOK = false
			l.warnf(dirAttr.Expr.Range(), "Directory not found",
				"The service's dir %s cannot be used on this machine: %v. The process would fail to start here.", svc.Dir, errorsCause(err))
		case !fi.IsDir():
			dirOK = false
			l.warnf(dirAttr.Expr.Range(), "Not a directory",
				"The service's dir %s is not a directory on this machine. The process would fail to start here.", svc.Dir)
		}
	}
	if len(svc.Command) == 0 || cmdAttr == nil || svc.Command[0] == "" {
		return
	}
	prog := svc.Command[0]
	rng := cmdAttr.Expr.Range()
	if !strings.Contains(prog, "/") {
		path := l.getenv("PATH")
		var unusable, unusableWhy string
		for _, d := range filepath.SplitList(path) {
			if d == "" {
				d = "."
			}
			p := filepath.Join(d, prog)
			why := executable(p)
			if why == "" {
				return
			}
			if unusable == "" && why != "it does not exist" && why != "it is a directory" {
				unusable, unusableWhy = p, why
			}
		}
		if unusable != "" {
			// exec skips it as well, but it is most likely the one meant.
			l.warnf(rng, "Program not executable",
				"The program %q is found in PATH as %s, which cannot run on this machine: %s. The process would fail to start here.", prog, unusable, unusableWhy)
			return
		}
		shown := "PATH=" + path
		if path == "" {
			shown = "PATH is empty"
		}
		l.warnf(rng, "Program not found",
			"The program %q is in no directory of PATH on this machine (%s). Use an absolute path, or install it where the service runs.", prog, shown)
		return
	}
	full := prog
	if !filepath.IsAbs(prog) {
		if svc.Dir == "" {
			// The process starts in mariposa's working directory.
			wd, err := os.Getwd()
			if err != nil {
				return
			}
			full = filepath.Join(wd, prog)
		} else {
			if !dirOK {
				return // already said: the dir is missing
			}
			full = filepath.Join(svc.Dir, prog)
		}
	}
	if why := executable(full); why != "" {
		summary := "Program not executable"
		if why == "it does not exist" {
			summary = "Program not found"
		}
		where := ""
		if full != prog {
			where = " (" + full + ")"
		}
		l.warnf(rng, summary, "The program %s%s cannot run on this machine: %s. The process would fail to start here.", prog, where, why)
	}
}

// executable returns "" when p is an executable regular file, else why not.
func executable(p string) string {
	fi, err := os.Stat(p)
	switch {
	case os.IsNotExist(err):
		return "it does not exist"
	case err != nil:
		return errorsCause(err).Error()
	case fi.IsDir():
		return "it is a directory"
	case !fi.Mode().IsRegular():
		return "it is not a regular file"
	case fi.Mode().Perm()&0o111 == 0:
		return "it is not executable (mode " + fi.Mode().Perm().String() + ")"
	}
	return ""
}

// getenv reads the load's environment (LoadOptions.Environ).
func (l *loader) getenv(name string) string {
	for _, kv := range l.environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
