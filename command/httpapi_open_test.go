package command

import (
	"strings"
	"testing"
)

// TestOpenWarning: the node API warns when it is bound to an address other
// machines reach and Consul enforces no ACLs; loopback (all of
// 127.0.0.0/8, ::1) never warns, nor does an API with ACLs on.
func TestOpenWarning(t *testing.T) {
	cases := []struct {
		addr  string
		acl   bool
		warns bool
	}{
		{"127.0.0.1:8585", false, false},
		{"127.0.0.2:8585", false, false},
		{"127.255.0.9:1", false, false},
		{"[::1]:8585", false, false},
		{"localhost:8585", false, false},
		{"0.0.0.0:8585", false, true},
		{"[::]:8585", false, true},
		{"10.0.0.5:8585", false, true},
		{"192.168.1.2:8585", false, true},
		{"node1.example.com:8585", false, true},
		{"0.0.0.0:8585", true, false},
		{"10.0.0.5:8585", true, false},
		{"not an address", false, true},
	}
	for _, c := range cases {
		w := openWarning(c.addr, c.acl)
		if (w != "") != c.warns {
			t.Errorf("openWarning(%q, acl=%v) = %q; want a warning: %v", c.addr, c.acl, w, c.warns)
			continue
		}
		if w != "" && (!strings.Contains(w, c.addr) || !strings.Contains(w, "anyone who can reach this address") ||
			!strings.Contains(w, "restart or reset its services")) {
			t.Errorf("openWarning(%q) does not say who can do what: %q", c.addr, w)
		}
	}
}

func TestJoinNotes(t *testing.T) {
	cases := map[string][]string{
		"":        {"", ""},
		"a":       {"a", ""},
		"b":       {"", "b"},
		"a\nb\nc": {"a", "b\nc"},
	}
	for want, notes := range cases {
		if got := joinNotes(notes...); got != want {
			t.Errorf("joinNotes(%q) = %q; want %q", notes, got, want)
		}
	}
}
