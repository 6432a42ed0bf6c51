package holdrule

import (
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	c := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return c.Add(d) }
	ms := time.Millisecond
	r := Rule{LockDelay: time.Second, Detect: DefaultDetect}
	strict, extended := at(500*ms), at(4500*ms)
	tests := []struct {
		name   string
		rule   Rule
		failed []Attempt
		want   time.Time
	}{
		{"nothing failed: strict", r, nil, strict},
		{"one no-leader answer: extended", r, []Attempt{{at(200 * ms), NoLeader}}, extended},
		{"only no-leader answers: extended", r, []Attempt{{at(200 * ms), NoLeader}, {at(400 * ms), NoLeader}, {at(3 * time.Second), NoLeader}}, extended},
		{"a timeout: strict", r, []Attempt{{at(200 * ms), Unproven}}, strict},
		{"no-leader then a timeout: strict", r, []Attempt{{at(200 * ms), NoLeader}, {at(900 * ms), Unproven}}, strict},
		{"a timeout then no-leader: strict", r, []Attempt{{at(200 * ms), Unproven}, {at(900 * ms), NoLeader}}, strict},
		{"failures before c say nothing", r, []Attempt{{at(-300 * ms), Unproven}, {at(200 * ms), NoLeader}}, extended},
		{"a failure sent at c says nothing", r, []Attempt{{c, Unproven}, {at(1 * ms), NoLeader}}, extended},
		{"only failures before c: strict", r, []Attempt{{at(-300 * ms), NoLeader}}, strict},
		{"D = 0: strict always", Rule{LockDelay: time.Second}, []Attempt{{at(200 * ms), NoLeader}}, strict},
		{"scales with L", Rule{LockDelay: 4 * time.Second, Detect: time.Second}, []Attempt{{at(time.Second), NoLeader}}, at(3 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Deadline(c, tt.failed); !got.Equal(tt.want) {
				t.Fatalf("Deadline = c%+v, want c%+v", got.Sub(c), tt.want.Sub(c))
			}
			// Lost is strictly after the deadline; another holder is possible
			// no sooner than L/2 after it.
			if tt.rule.Lost(tt.want, c, tt.failed) || !tt.rule.Lost(tt.want.Add(time.Nanosecond), c, tt.failed) {
				t.Fatal("Lost does not turn at the deadline")
			}
			if got := tt.rule.Earliest(c, tt.failed).Sub(tt.want); got != tt.rule.LockDelay-tt.rule.LockDelay/2 {
				t.Fatalf("Earliest is %v after the deadline", got)
			}
		})
	}
}

func TestTolerance(t *testing.T) {
	tests := []struct {
		rule Rule
		want time.Duration
	}{
		{Rule{LockDelay: time.Second, Detect: DefaultDetect}, 4300 * time.Millisecond},
		{Rule{LockDelay: time.Second}, 300 * time.Millisecond},
		{Rule{LockDelay: 20 * time.Second, Detect: DefaultDetect}, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := tt.rule.Tolerance(); got != tt.want {
			t.Errorf("%+v: Tolerance = %v, want %v", tt.rule, got, tt.want)
		}
	}
	// The defaults ride an election with raft_multiplier 1, not with 5.
	def := Rule{LockDelay: time.Second, Detect: DefaultDetect}
	if def.Tolerance() < EstimateElection(time.Second) || def.Tolerance() >= EstimateElection(5*time.Second) {
		t.Fatalf("tolerance %v against elections %v / %v", def.Tolerance(), EstimateElection(time.Second), EstimateElection(5*time.Second))
	}
}
