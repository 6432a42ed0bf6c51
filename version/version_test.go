package version

import (
	"runtime/debug"
	"testing"
)

func TestCommitFrom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none", nil, ""},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "616eaf9c0ffee1234567890abcdef01234567890"}, {Key: "vcs.modified", Value: "false"}}, "616eaf9"},
		{"dirty", []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "616eaf9c0ffee1234567890abcdef01234567890"}, {Key: "vcs.modified", Value: "true"}}, "616eaf9-dirty"},
		{"short", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
		{"modified without revision", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		if got := commitFrom(&debug.BuildInfo{Settings: tc.settings}); got != tc.want {
			t.Errorf("%s: commitFrom = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	defer func(v, p, c string) { Version, Prerelease, GitCommit = v, p, c }(Version, Prerelease, GitCommit)
	Version, Prerelease, GitCommit = "0.1.0", "dev", "616eaf9"
	if got := String(); got != "mariposa v0.1.0-dev (commit 616eaf9)" {
		t.Errorf("String() = %q", got)
	}
	Version, Prerelease, GitCommit = "0.2.0", "", "616eaf9-dirty"
	if got := String(); got != "mariposa v0.2.0 (commit 616eaf9-dirty)" {
		t.Errorf("String() = %q", got)
	}
}
