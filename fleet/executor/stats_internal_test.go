package executor

import "testing"

// firstLive is the first live supervisor by name (FirstLive) on the
// executor's members and failing: a failing node that sorts first does
// not count, and nothing is known before both watches have answered.
func TestFirstLive(t *testing.T) {
	for _, tc := range []struct {
		name             string
		node             string
		members, failing []string
		have, want       bool
	}{
		{"not heard yet", "a", []string{"a"}, nil, false, false},
		{"alone", "a", []string{"a"}, nil, true, true},
		{"first", "a", []string{"a", "b", "c"}, nil, true, true},
		{"second", "b", []string{"a", "b", "c"}, nil, true, false},
		{"first failing", "b", []string{"a", "b", "c"}, []string{"a"}, true, true},
		{"later failing", "b", []string{"a", "b", "c"}, []string{"c"}, true, false},
		{"not a member yet", "b", []string{"c"}, nil, true, true},
	} {
		if got := firstLive(tc.node, tc.members, tc.failing, tc.have); got != tc.want {
			t.Errorf("%s: firstLive(%q, %v, %v, %v) = %v, want %v", tc.name, tc.node, tc.members, tc.failing, tc.have, got, tc.want)
		}
	}
}
