package cluster

import (
	"sort"
	"strings"
)

// Version is the version the user gave the unit (its services' version
// attribute): "1.4.2"; a group whose members differ says each, "app 1.4.2,
// sidecar 0.9"; "" without any. Events and status show it beside the
// spec and rollout hashes, which name the same thing for machines.
func (u UnitSpec) Version() string {
	seen := map[string]bool{}
	var each []string
	one := ""
	for _, s := range u.Services {
		if s.Version == "" {
			continue
		}
		if !seen[s.Version] {
			seen[s.Version] = true
			one = s.Version
		}
		each = append(each, s.Name+" "+s.Version)
	}
	switch {
	case len(seen) == 0:
		return ""
	case len(seen) == 1 && len(each) == len(u.Services):
		return one
	}
	return strings.Join(each, ", ")
}

// specVersions is "web 1.4.2, db 2.0": each unit of s with a version, by
// name; "" when none has one.
func specVersions(s *Spec) string {
	if s == nil {
		return ""
	}
	var out []string
	for _, u := range s.Units() {
		if v := u.Version(); v != "" {
			out = append(out, u.Unit.Name+" "+v)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// specReason is "spec 3f9a2c1e", with the versions the user gave when the
// units have them: "spec 3f9a2c1e (web 1.4.2)".
func specReason(s *Spec) string {
	out := "spec " + s.Hash
	if v := specVersions(s); v != "" {
		out += " (" + v + ")"
	}
	return out
}
