package supervisor

import (
	"fmt"

	"github.com/mariposa-sh/mariposa/schema"
)

// Pause freezes an instance's automatic restarts (mariposa pause -scope
// all, CLUSTER.md section 6). The layer above decides who is paused and
// why; the supervisor only holds back what it would have done and says so.
// Never paused: stopping a process (a lost slot or term, a shutdown), and
// what an operator asks for (mariposa restart, reset).
type Pause struct {
	// Why is the pause as the operator gave it ("" when not paused), e.g.
	// "paused by ops@ci at 12:00:00Z: incident 4721".
	Why string
	// Dropped: the restart held back was dropped from the queue (mariposa
	// queue drop) by this actor: the instance stays down, failed.
	Dropped string
}

// PauseFunc says whether the instance of svc (in slot, or nil) is paused.
type PauseFunc func(svc *schema.Service, slot *SlotInfo) Pause

// Paused is an instance's held-back action, for the queue: "" when none.
func (s *instState) held() string {
	switch {
	case s.paused.Why == "":
		return ""
	case s.state == StatePaused:
		return "restart after " + s.lastEnd
	case s.healthHeld != "":
		return "restart: " + s.healthHeld
	}
	return ""
}

// pauseChanged applies a new pause state: at resume, the restart held back
// happens now (and a health restart, if a check is still critical).
func (st *stepper) pauseChanged(p Pause) {
	s := st.s
	was := s.paused
	s.paused = p
	switch {
	case s.state == StatePaused && p.Why != "" && p.Dropped != "":
		st.set(StateFailed, fmt.Sprintf("restart dropped from the queue by %s, after %s", p.Dropped, s.lastEnd))
		st.emit(EventFailed, s.reason)
	case s.state == StatePaused && p.Why == "":
		s.restarts++
		st.emit(EventResumed, "resumed: restarting after "+s.lastEnd)
		st.tryStart()
	case s.state == StatePaused:
		st.set(StatePaused, pausedReason(s.lastEnd, p.Why))
	case was.Why != "" && p.Why == "" && s.healthHeld != "":
		s.healthHeld = ""
		st.evalHealth()
	}
}

func pausedReason(lastEnd, why string) string {
	return fmt.Sprintf("paused: would restart after %s (%s)", lastEnd, why)
}

// holdRestart: the restart that would follow the end of a run waits for
// the resume.
func (st *stepper) holdRestart() {
	s := st.s
	st.set(StatePaused, pausedReason(s.lastEnd, s.paused.Why))
	st.emit(EventPaused, s.reason)
}
