package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// The version the user gave is shown beside the hashes: a unit's, a
// spec's, and a deployment's status line.
func TestVersions(t *testing.T) {
	svc := func(name, version string) *schema.Service { return &schema.Service{Name: name, Version: version} }
	for _, tc := range []struct {
		name string
		u    UnitSpec
		want string
	}{
		{"none", UnitSpec{Services: []*schema.Service{svc("web", "")}}, ""},
		{"one", UnitSpec{Services: []*schema.Service{svc("web", "1.4.2")}}, "1.4.2"},
		{"a group, one version", UnitSpec{Services: []*schema.Service{svc("app", "2"), svc("side", "2")}}, "2"},
		{"a group, two", UnitSpec{Services: []*schema.Service{svc("app", "2"), svc("side", "0.9")}}, "app 2, side 0.9"},
		{"a group, one member without", UnitSpec{Services: []*schema.Service{svc("app", "2"), svc("side", "")}}, "app 2"},
	} {
		if got := tc.u.Version(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A spec as stored: the deploy record's reason.
	path := filepath.Join(t.TempDir(), "a.hcl")
	if err := os.WriteFile(path, []byte(`
service "web" {
  command = ["app"]
  version = "1.4.2"
  count   = 2
}

service "db" {
  command = ["db"]
  count   = 1
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := schema.Load([]string{path}, schema.LoadOptions{Environ: []string{}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	sp, err := Reify("default", cfg)
	if err != nil {
		t.Fatal(err)
	}
	sp.N = 3
	if got, want := specReason(sp), "spec "+sp.Hash+" (web 1.4.2)"; got != want {
		t.Errorf("specReason: %q, want %q", got, want)
	}
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ds := DeploymentStatus{Name: "web", N: 5, Hash: "70249139…", Versions: "web 1.4.2",
		State: &DeployState{N: 5, Status: DeploySuccessful, At: now.Add(-20 * time.Second)}}
	if got := ds.Line(now); got != "web: spec 5, web 1.4.2 (70249139…) successful 20s ago" {
		t.Errorf("Line: %q", got)
	}
	ds.Versions = ""
	if got := ds.Line(now); got != "web: spec 5 (70249139…) successful 20s ago" {
		t.Errorf("Line without versions: %q", got)
	}
}
