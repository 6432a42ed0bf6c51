package command

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// A state is read only when it is a mariposa upgrade state of the version
// this build knows: a newer one is refused with a clear error, never
// misread.
func TestDecodeUpgradeState(t *testing.T) {
	good, _ := json.Marshal(upgradeState{Format: upgradeStateFormat, Version: upgradeStateVersion, From: "mariposa v0.1.0",
		Runner: &supervisor.Handover{Node: "n1"}})
	for _, tc := range []struct {
		name, in, err string
	}{
		{"current", string(good), ""},
		{"newer", `{"format":"mariposa-upgrade-state","version":2,"from":"mariposa v0.9.0","runner":{"node":"n1"}}`, "is version 2; "},
		{"older", `{"format":"mariposa-upgrade-state","version":0,"from":"mariposa v0.0.1","runner":{}}`, "is version 0; "},
		{"another format", `{"format":"something","version":1}`, "not a mariposa upgrade state"},
		{"not JSON", `garbage`, "not a mariposa upgrade state"},
		{"no runner", `{"format":"mariposa-upgrade-state","version":1}`, "no runner state"},
	} {
		st, err := decodeUpgradeState([]byte(tc.in))
		switch {
		case tc.err == "" && (err != nil || st.Runner.Node != "n1"):
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		}
	}
}

// upgrade-preflight answers with its version and accepts only the state
// version it reads.
func TestUpgradePreflight(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-state-version", "1"}, 0},
		{[]string{"-state-version", "2"}, 1},
		{[]string{}, 1},
		{[]string{"-bogus"}, 1},
	} {
		var out, errb bytes.Buffer
		code := UpgradePreflight(tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errb.String())
		}
		var a preflightAnswer
		if len(tc.args) != 1 && (json.Unmarshal(out.Bytes(), &a) != nil || a.Version == "" || len(a.StateVersions) != 1) {
			t.Errorf("%v: answer %q", tc.args, out.String())
		}
	}
}

// FuzzDecodeUpgradeState: whatever is handed over decodes or is refused,
// never panics, and a decoded state always has its runner state and the
// version this build reads.
func FuzzDecodeUpgradeState(f *testing.F) {
	good, _ := json.Marshal(upgradeState{Format: upgradeStateFormat, Version: upgradeStateVersion, From: "mariposa v0.1.0",
		Runner: &supervisor.Handover{Node: "n1"}})
	f.Add(good)
	f.Add([]byte(`{"format":"mariposa-upgrade-state","version":2,"runner":{}}`))
	f.Add([]byte(`{"format":"mariposa-upgrade-state","version":1,"runner":null}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeUpgradeState(b)
		if err != nil {
			return
		}
		if st.Runner == nil || st.Version != upgradeStateVersion || st.Format != upgradeStateFormat {
			t.Fatalf("decoded a state it should refuse: %+v", st)
		}
	})
}

// TestUpgradeDone: the command's end of an upgrade is another process
// image answering, also when the version is the same (a re-exec, or a
// rebuild not stamped anew: the command waited its whole timeout and
// failed); with a build that does not name its image, the version.
func TestUpgradeDone(t *testing.T) {
	res := func(from, to, image string) control.UpgradeResult {
		return control.UpgradeResult{From: from, To: to, Image: image, PID: 7}
	}
	ver := func(version, image string) control.VersionInfo {
		return control.VersionInfo{Version: version, Image: image, PID: 7}
	}
	for _, tc := range []struct {
		name string
		res  control.UpgradeResult
		v    control.VersionInfo
		want bool
	}{
		{"same version, new image", res("1.0", "1.0", "a"), ver("1.0", "b"), true},
		{"same version, old image still answering", res("1.0", "1.0", "a"), ver("1.0", "a"), false},
		{"new version, new image", res("1.0", "1.1", "a"), ver("1.1", "b"), true},
		{"new version, old image", res("1.0", "1.1", "a"), ver("1.0", "a"), false},
		{"from a build without images", res("1.0", "1.1", ""), ver("1.1", "b"), true},
		{"from a build without images, not yet", res("1.0", "1.1", ""), ver("1.0", ""), false},
		{"to a build without images", res("1.1", "1.0", "a"), ver("1.0", ""), true},
		{"to a build without images, not yet", res("1.1", "1.0", "a"), ver("1.1", "a"), false},
	} {
		if got := upgradeDone(tc.res, tc.v); got != tc.want {
			t.Errorf("%s: upgradeDone = %v, want %v", tc.name, got, tc.want)
		}
	}
}
