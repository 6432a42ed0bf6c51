package control

import (
	"net/url"
	"testing"
)

// The tail parameters of logs and events: defaults, and errors that name
// the parameter.
func TestParseTail(t *testing.T) {
	for _, tc := range []struct {
		q      string
		follow bool
		n      int
		err    string
	}{
		{"", false, 100, ""},
		{"follow=1&n=5", true, 5, ""},
		{"follow=0&n=0", false, 0, ""},
		{"follow=maybe", false, 0, `follow="maybe": want 1 or 0`},
		{"n=-1", false, 0, `n="-1": want a number >= 0`},
		{"n=x", false, 0, `n="x": want a number >= 0`},
	} {
		q, _ := url.ParseQuery(tc.q)
		follow, n, err := ParseTail(q, 100)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.q, err, tc.err)
			}
			continue
		}
		if err != nil || follow != tc.follow || n != tc.n {
			t.Errorf("%q: %v %d %v, want %v %d", tc.q, follow, n, err, tc.follow, tc.n)
		}
	}
}
