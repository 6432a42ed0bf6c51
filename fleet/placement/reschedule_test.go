package placement

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

func policy(mod func(*schema.Reschedule)) schema.Reschedule {
	p := schema.Reschedule{Unlimited: true, Delay: 5 * time.Second, DelayFunction: schema.DelayExponential,
		MaxDelay: 5 * time.Minute, Penalty: 30 * time.Minute}
	if mod != nil {
		mod(&p)
	}
	return p
}

// failures returns n events, each gap after the previous one.
func failures(n int, gap time.Duration) []RescheduleEvent {
	h := make([]RescheduleEvent, n)
	for i := range h {
		h[i] = RescheduleEvent{Node: "n", At: t0.Add(time.Duration(i) * gap), Reason: "restarts exhausted"}
	}
	return h
}

func seconds(ds []time.Duration) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = int(d / time.Second)
	}
	return out
}

// TestNextDelaySequences compares with Nomad's documented sequences: each
// failure comes right after the previous claim (no long run, no reset).
func TestNextDelaySequences(t *testing.T) {
	cases := []struct {
		fn   string
		max  time.Duration
		want []int // seconds after failure 1, 2, …
	}{
		{schema.DelayConstant, 5 * time.Minute, []int{5, 5, 5, 5, 5}},
		{schema.DelayExponential, 5 * time.Minute, []int{5, 10, 20, 40, 80, 160, 300, 300}},
		{"", 5 * time.Minute, []int{5, 10, 20, 40, 80, 160, 300, 300}}, // the schema's default
		{schema.DelayFibonacci, 5 * time.Minute, []int{5, 5, 10, 15, 25, 40, 65, 105, 170, 275, 300, 300}},
		{schema.DelayExponential, 0, []int{5, 10, 20, 40, 80, 160, 320, 640}}, // no cap
		{schema.DelayExponential, 30 * time.Second, []int{5, 10, 20, 30, 30}},
		{schema.DelayExponential, 2 * time.Second, []int{2, 2, 2}}, // delay above the cap
		{"linear", 5 * time.Minute, []int{5, 5, 5}},                // unknown: constant
	}
	for _, c := range cases {
		p := policy(func(p *schema.Reschedule) { p.DelayFunction = c.fn; p.MaxDelay = c.max })
		var got []time.Duration
		for n := 1; n <= len(c.want); n++ {
			// Each failure 1 s after its claim: never a long run.
			h := make([]RescheduleEvent, n)
			at := t0
			for i := range h {
				h[i].At = at
				d, _ := NextDelay(p, h[:i+1], at)
				at = at.Add(d + time.Second)
			}
			d, exhausted := NextDelay(p, h, h[n-1].At)
			if exhausted {
				t.Fatalf("%s: exhausted at %d", c.fn, n)
			}
			got = append(got, d)
		}
		if g := seconds(got); !slices.Equal(g, c.want) {
			t.Errorf("%s max %v: %v, want %v", c.fn, c.max, g, c.want)
		}
	}
}

// TestNextDelayReset: once the delay is at its cap, an instance that ran
// longer than the cap starts the series again, as Nomad's NextDelay.
func TestNextDelayReset(t *testing.T) {
	replay := func(p schema.Reschedule, runs []time.Duration) []int {
		var h []RescheduleEvent
		var got []time.Duration
		at := t0
		for _, run := range runs {
			h = append(h, RescheduleEvent{At: at})
			d, _ := NextDelay(p, h, at)
			got = append(got, d)
			at = at.Add(d + run)
		}
		return seconds(got)
	}
	short, long := time.Second, 2*time.Minute
	exp := policy(func(p *schema.Reschedule) { p.MaxDelay = time.Minute })
	// 5, 10, 20, 40, 60 (cap); the next instance ran 2m > 1m: back to 5.
	if got := replay(exp, []time.Duration{short, short, short, short, long, short, short}); !slices.Equal(got, []int{5, 10, 20, 40, 60, 5, 10}) {
		t.Errorf("exponential: %v", got)
	}
	// A long run below the cap does not reset (Nomad resets only at the cap).
	if got := replay(exp, []time.Duration{long, long, short}); !slices.Equal(got, []int{5, 10, 20}) {
		t.Errorf("exponential, long runs below the cap: %v", got)
	}
	// At the cap, a short run keeps the cap.
	if got := replay(exp, []time.Duration{short, short, short, short, short, short}); !slices.Equal(got, []int{5, 10, 20, 40, 60, 60}) {
		t.Errorf("exponential at the cap: %v", got)
	}
	fib := policy(func(p *schema.Reschedule) { p.DelayFunction = schema.DelayFibonacci; p.MaxDelay = 30 * time.Second })
	// 5, 5, 10, 15, 25, 30 (cap); ran long: 5, then 5, 10 as a new series.
	if got := replay(fib, []time.Duration{short, short, short, short, short, long, short, short}); !slices.Equal(got, []int{5, 5, 10, 15, 25, 30, 5, 5}) {
		t.Errorf("fibonacci: %v", got)
	}
	// Clock skew: a failure "before" the previous one never resets.
	h := []RescheduleEvent{{At: t0}, {At: t0.Add(-time.Hour)}}
	if d, _ := NextDelay(policy(func(p *schema.Reschedule) { p.MaxDelay = 5 * time.Second }), h, t0); d != 5*time.Second {
		t.Errorf("skewed history: %v", d)
	}
}

func TestNextDelayAttempts(t *testing.T) {
	p := policy(func(p *schema.Reschedule) { p.Unlimited = false; p.Attempts = 2; p.Interval = time.Hour })
	cases := []struct {
		n       int
		gap     time.Duration
		now     time.Duration // after t0
		want    time.Duration
		exhaust bool
	}{
		{0, 0, 0, 0, false},               // nothing to reschedule
		{1, 0, 0, 5 * time.Second, false}, // first reschedule
		{2, time.Minute, time.Minute, 10 * time.Second, false},
		{3, time.Minute, 2 * time.Minute, 0, true},                       // a third within the hour
		{3, 40 * time.Minute, 80 * time.Minute, 20 * time.Second, false}, // the first left the window
		{3, time.Minute, 2*time.Minute + time.Hour, 20 * time.Second, false},
	}
	for _, c := range cases {
		d, ex := NextDelay(p, failures(c.n, c.gap), t0.Add(c.now))
		if d != c.want || ex != c.exhaust {
			t.Errorf("%d failures %v apart at +%v: %v, %v; want %v, %v", c.n, c.gap, c.now, d, ex, c.want, c.exhaust)
		}
	}
	// attempts = 0 and not unlimited: no reschedule at all.
	none := policy(func(p *schema.Reschedule) { p.Unlimited = false; p.Attempts = 0; p.Interval = time.Hour })
	if _, ex := NextDelay(none, failures(1, 0), t0); !ex {
		t.Error("attempts 0: not exhausted")
	}
	// Interval 0: every event counts.
	all := policy(func(p *schema.Reschedule) { p.Unlimited = false; p.Attempts = 2 })
	if _, ex := NextDelay(all, failures(3, 24*time.Hour), t0.Add(1000*time.Hour)); !ex {
		t.Error("interval 0: old events not counted")
	}
	// Unlimited ignores attempts.
	if _, ex := NextDelay(policy(nil), failures(100, time.Second), t0); ex {
		t.Error("unlimited: exhausted")
	}
}

func TestNextDelayNeverOverflows(t *testing.T) {
	for _, fn := range []string{schema.DelayExponential, schema.DelayFibonacci} {
		p := policy(func(p *schema.Reschedule) { p.DelayFunction = fn; p.MaxDelay = 0 })
		d, _ := NextDelay(p, failures(200, 0), t0)
		if d != math.MaxInt64 {
			t.Errorf("%s, 200 failures, no cap: %v, want saturation", fn, d)
		}
	}
	// Zero and negative delays.
	if d, _ := NextDelay(policy(func(p *schema.Reschedule) { p.Delay = -time.Second }), failures(3, 0), t0); d != 0 {
		t.Errorf("negative delay: %v", d)
	}
	if d, _ := NextDelay(schema.Reschedule{Unlimited: true}, failures(3, 0), t0); d != 0 {
		t.Errorf("zero policy: %v", d)
	}
}
