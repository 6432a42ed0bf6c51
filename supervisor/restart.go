package supervisor

import (
	"fmt"
	"time"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// Cause is why a run ended.
type Cause int

const (
	// CauseExit: the process exited on its own.
	CauseExit Cause = iota
	// CauseUnhealthy: mariposa stopped it because a check stayed critical.
	CauseUnhealthy
	// CauseStartFailed: the process could not be started at all (Err).
	CauseStartFailed
)

// minStartRetry bounds how fast a command that cannot start is retried,
// whatever the restart block says: a missing program is no crash to restart
// at full speed (restart { delay = "0s" attempts = 0 } would spin).
const minStartRetry = time.Second

// Outcome is how one run of the process ended.
type Outcome struct {
	Cause   Cause
	Exit    proc.Exit
	Check   string // CauseUnhealthy: the check's name
	Err     error  // CauseStartFailed: why
	Started time.Time
}

func (o Outcome) String() string {
	switch o.Cause {
	case CauseUnhealthy:
		return fmt.Sprintf("check %q critical", o.Check)
	case CauseStartFailed:
		return "cannot start: " + o.Err.Error()
	}
	return o.Exit.String()
}

// Action is what to do after a run ends.
type Action int

const (
	// ActionRestart: start again after Delay.
	ActionRestart Action = iota
	// ActionDone: the policy says the process stays down (a completed run
	// under on-failure, or any exit under never).
	ActionDone
	// ActionFail: restarts are exhausted.
	ActionFail
)

// Decision is the tracker's answer.
type Decision struct {
	Action  Action
	Delay   time.Duration
	Attempt int // the restart's number within the window, from 1
	Reason  string
}

// stableRun is how long a run must last for the backoff to start over.
func stableRun(r schema.Restart) time.Duration {
	return max(10*time.Second, r.MaxDelay)
}

// RestartTracker keeps the restart history of one service. Decide is a pure
// function of that history, the outcome and now, so tests use a fake clock.
type RestartTracker struct {
	cfg         schema.Restart
	restarts    []time.Time // restart decisions inside the window
	consecutive int         // failed runs since the last stable one
}

// NewRestartTracker returns a tracker for the restart block r.
func NewRestartTracker(r schema.Restart) *RestartTracker {
	return &RestartTracker{cfg: r}
}

// Decide records the outcome and says what to do. jitter in [0,1) spreads
// the backoff; the delay always stays within [delay, max_delay].
func (t *RestartTracker) Decide(o Outcome, now time.Time, jitter float64) Decision {
	cfg := t.cfg
	if !o.Started.IsZero() && now.Sub(o.Started) >= stableRun(cfg) {
		t.consecutive = 0
	}
	if cfg.Policy == schema.RestartNever && o.Cause == CauseStartFailed {
		return Decision{Action: ActionFail, Reason: fmt.Sprintf("failed: %s; not retried (restart policy never)", o)}
	}
	if cfg.Policy == schema.RestartNever {
		return Decision{Action: ActionDone, Reason: fmt.Sprintf("%s; not restarted (restart policy never)", o)}
	}
	if o.Cause == CauseExit && o.Exit.Success() && cfg.Policy == schema.RestartOnFailure {
		return Decision{Action: ActionDone, Reason: fmt.Sprintf("completed (%s); not restarted (restart policy on-failure)", o)}
	}

	// Forget restarts that left the window.
	if cfg.Window > 0 {
		cut := now.Add(-cfg.Window)
		i := 0
		for i < len(t.restarts) && !t.restarts[i].After(cut) {
			i++
		}
		t.restarts = t.restarts[i:]
	}
	if cfg.Attempts > 0 && len(t.restarts) >= cfg.Attempts {
		span := "since start"
		if cfg.Window > 0 {
			span = "in " + shortDuration(cfg.Window)
		}
		return Decision{Action: ActionFail, Attempt: len(t.restarts),
			Reason: fmt.Sprintf("failed: %d restarts %s (last: %s)", len(t.restarts), span, o)}
	}
	if cfg.Attempts > 0 || cfg.Window > 0 {
		t.restarts = append(t.restarts, now)
	}
	// Unlimited attempts with no window: keep no history, only a count.
	t.consecutive++
	attempt := len(t.restarts)
	if attempt == 0 {
		attempt = t.consecutive
	}
	d := Backoff(cfg.Delay, cfg.MaxDelay, t.consecutive, jitter)
	if o.Cause == CauseStartFailed && d < minStartRetry {
		d = minStartRetry
	}
	of := ""
	if cfg.Attempts > 0 {
		of = fmt.Sprintf("/%d", cfg.Attempts)
	}
	return Decision{Action: ActionRestart, Delay: d, Attempt: attempt,
		Reason: fmt.Sprintf("restarting %s after %s, attempt %d%s", when(now, d), o, attempt, of)}
}

// when says when a delayed start happens: as a time of day, since the
// reason is read later than it is written ("restarting in 1m" would be
// frozen at publication), or as a delay when it is over in under a second.
func when(now time.Time, d time.Duration) string {
	switch {
	case d <= 0:
		return "now"
	case d < time.Second:
		return "in " + shortDuration(d)
	}
	return "at " + now.Add(d).Format("15:04:05")
}

// Backoff is base doubled per consecutive failure after the first, capped at
// maxDelay, with up to +25% jitter that never leaves [base, maxDelay].
func Backoff(base, maxDelay time.Duration, consecutive int, jitter float64) time.Duration {
	if base <= 0 {
		return 0
	}
	if maxDelay < base {
		maxDelay = base
	}
	d := base
	// Doubling stops at the cap, so huge counts cannot overflow.
	for i := 1; i < consecutive && d < maxDelay; i++ {
		if d > maxDelay/2 {
			d = maxDelay
			break
		}
		d *= 2
	}
	if jitter > 0 && jitter < 1 {
		// Saturating add: near the top of the range d+extra would overflow.
		if extra := time.Duration(float64(d) * 0.25 * jitter); d > maxDelay-extra {
			d = maxDelay
		} else {
			d += extra
		}
	}
	return min(max(d, base), maxDelay)
}

// shortDuration prints 2s rather than 2.000s and 1m0s as 1m.
func shortDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// TrackerState is a RestartTracker's memory, as an upgrade in place hands
// it over.
type TrackerState struct {
	Restarts    []time.Time `json:"restarts,omitempty"` // restart decisions inside the window
	Consecutive int         `json:"consecutive,omitempty"`
}

// State returns the tracker's memory.
func (t *RestartTracker) State() TrackerState {
	return TrackerState{Restarts: append([]time.Time(nil), t.restarts...), Consecutive: t.consecutive}
}

// Restore takes the memory of a tracker of the same restart block.
func (t *RestartTracker) Restore(s TrackerState) {
	t.restarts, t.consecutive = append([]time.Time(nil), s.Restarts...), s.Consecutive
}
