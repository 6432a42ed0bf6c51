package leadertest

import (
	"strings"
	"testing"
	"time"
)

func TestCheckNoOverlap(t *testing.T) {
	iv := func(who string, start, stop time.Duration) Interval {
		return Interval{Who: who, Start: start, Stop: stop}
	}
	cases := []struct {
		name string
		ivs  []Interval
		want string // substring of the error; "" = no error
	}{
		{"empty", nil, ""},
		{"disjoint", []Interval{iv("b", 30, 40), iv("a", 10, 20)}, ""},
		{"touching", []Interval{iv("a", 10, 20), iv("b", 20, 30)}, ""},
		{"overlap", []Interval{iv("a", 10, 25), iv("b", 20, 30)}, "overlap of 5ns"},
		{"contained", []Interval{iv("a", 10, 50), iv("b", 20, 30), iv("c", 60, 70)}, "overlap of 10ns"},
		{"running forever", []Interval{iv("a", 10, 0), iv("b", 20, 30)}, "a [0.000s, running]"},
		{"running last", []Interval{iv("a", 10, 20), iv("b", 30, 0)}, ""},
		{"backwards", []Interval{iv("a", 20, 10)}, "stops before it starts"},
		{"not adjacent", []Interval{iv("a", 10, 100), iv("b", 20, 30), iv("c", 40, 50)}, "2 problem(s)"},
	}
	for _, c := range cases {
		err := CheckNoOverlap(c.ivs)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want error containing %q", c.name, err, c.want)
		}
	}
}

func TestParseStamps(t *testing.T) {
	in := "start 10 100\nstart 11 110\nstop 10 120\n\nstop 11 200\nstart 12 300\n"
	got, err := ParseStamps(strings.NewReader(in), "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Interval{{"n1 pid 10", 100, 120}, {"n1 pid 11", 110, 200}, {"n1 pid 12", 300, 0}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("interval %d = %v, want %v", i, got[i], want[i])
		}
	}
	if err := CheckNoOverlap(got); err == nil {
		t.Error("pid 10 and 11 overlap, checker said nothing")
	}
	for _, bad := range []string{"start 1\n", "stop 5 10\n", "begin 1 2\n", "start x 2\n"} {
		if _, err := ParseStamps(strings.NewReader(bad), "n"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRecorderAndMono(t *testing.T) {
	var r Recorder
	a := Mono()
	stop := r.Start("x")
	stop()
	stop()
	r.Add(Interval{Who: "y", Start: Mono()})
	ivs := r.Intervals()
	if len(ivs) != 2 || ivs[0].Start < a || ivs[0].Stop < ivs[0].Start || ivs[1].Stop != 0 {
		t.Fatalf("intervals %v", ivs)
	}
	if err := CheckNoOverlap(ivs); err != nil {
		t.Fatal(err)
	}
}
