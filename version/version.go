// Package version holds mariposa's version, set at build time with
// -ldflags "-X github.com/mariposa-sh/mariposa/version.Version=...".
package version

import "fmt"

var (
	// Version is the release version.
	Version = "0.1.0"
	// Prerelease is "dev" for builds that are not releases.
	Prerelease = "dev"
	// GitCommit is set by the build.
	GitCommit = ""
)

// String is the human form, e.g. "mariposa v0.1.0-dev (abc123)".
func String() string {
	v := "mariposa v" + Version
	if Prerelease != "" {
		v += "-" + Prerelease
	}
	if GitCommit != "" {
		v += fmt.Sprintf(" (%s)", GitCommit)
	}
	return v
}
