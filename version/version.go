// Package version holds mariposa's version. `make build` stamps it:
//
//	-ldflags "-X github.com/mariposa-sh/mariposa/version.GitCommit=616eaf9-dirty"
//
// A plain `go build` from a clone still knows its commit, from the VCS
// information the go command records in the binary.
package version

import (
	"runtime/debug"
	"sync"
)

var (
	// Version is the release version.
	Version = "0.1.0"
	// Prerelease is "dev" for builds that are not releases.
	Prerelease = "dev"
	// GitCommit is the short commit the binary was built from, with
	// "-dirty" if the tree had changes; set by the build.
	GitCommit = ""
)

// String is the human form, e.g. "mariposa v0.1.0-dev (commit 616eaf9)".
func String() string {
	v := "mariposa v" + Version
	if Prerelease != "" {
		v += "-" + Prerelease
	}
	if c := Commit(); c != "" {
		v += " (commit " + c + ")"
	}
	return v
}

// Commit is GitCommit, else the commit the go command recorded, else "".
func Commit() string {
	if GitCommit != "" {
		return GitCommit
	}
	return buildCommit()
}

var buildCommit = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return commitFrom(info)
})

// commitFrom reads vcs.revision (shortened as git does) and vcs.modified.
func commitFrom(info *debug.BuildInfo) string {
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
