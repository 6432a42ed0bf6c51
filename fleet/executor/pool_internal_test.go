package executor

import (
	"fmt"
	"slices"
	"testing"
)

// How units are cut in buckets and the prefix each bucket's queries read.
func TestBuckets(t *testing.T) {
	var many []string
	for i := range 120 {
		many = append(many, fmt.Sprintf("u%03d", i))
	}
	for _, tc := range []struct {
		name    string
		units   []string
		n       int
		runs    int
		prefix0 string // the first bucket's index prefix
	}{
		{"a bucket per unit up to n", []string{"api", "web", "web2"}, 16, 3, "mariposa/held/api/"},
		{"two units in one bucket: their common prefix", []string{"web", "web2"}, 1, 1, "mariposa/held/web"},
		{"120 units in 16 runs", many, 16, 16, "mariposa/held/u00"},
		{"default n", many, 0, DefaultBuckets, "mariposa/held/u00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := buckets(tc.units, tc.n)
			if len(runs) != tc.runs {
				t.Fatalf("%d runs, want %d: %v", len(runs), tc.runs, runs)
			}
			var all []string
			for _, r := range runs {
				all = append(all, r...)
			}
			if !slices.Equal(all, tc.units) {
				t.Fatalf("runs %v do not cover %v in order", runs, tc.units)
			}
			b := &bucket{units: runs[0], prefix: commonPrefix(runs[0])}
			if got := b.under("mariposa/held/"); got != tc.prefix0 {
				t.Fatalf("first bucket reads %q, want %q", got, tc.prefix0)
			}
		})
	}
	// A bucket of one unit reads only it: "web/" does not cover "web2/".
	b := &bucket{units: []string{"web"}, prefix: "web"}
	if got := b.under("mariposa/held/"); got != "mariposa/held/web/" {
		t.Fatalf("one unit reads %q", got)
	}
}
