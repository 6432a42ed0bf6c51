package supervisor

import (
	"slices"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// TestRestartAtOnce: decide's answer in advance to the exit of the running
// process (what the loop arms the process with, so the main thread forks
// the next at the exit) is given only where decide, stepping that exit,
// answers it by a start at once with the same env and nothing else first;
// and it is given under the restart blocks and states that do.
func TestRestartAtOnce(t *testing.T) {
	fast := func(p schema.RestartPolicy) func(*schema.Restart) {
		return func(r *schema.Restart) { r.Policy, r.Delay, r.Attempts = p, 0, 0 }
	}
	for _, c := range []struct {
		name        string
		restart     func(*schema.Restart)
		svc         func(*schema.Service)
		setup       func(m *machine) // after running(42)
		ok, failure bool
	}{
		{name: "always, delay 0, unlimited", restart: fast(schema.RestartAlways), ok: true},
		{name: "on-failure, delay 0, unlimited: failures only", restart: fast(schema.RestartOnFailure), ok: true, failure: true},
		{name: "a window changes nothing when unlimited", restart: func(r *schema.Restart) { fast(schema.RestartAlways)(r); r.Window = time.Minute }, ok: true},
		{name: "never", restart: fast(schema.RestartNever)},
		{name: "a delay", restart: func(r *schema.Restart) { fast(schema.RestartAlways)(r); r.Delay = time.Second }},
		{name: "limited attempts", restart: func(r *schema.Restart) { fast(schema.RestartAlways)(r); r.Attempts = 3 }},
		{name: "paused", restart: fast(schema.RestartAlways), setup: func(m *machine) {
			m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		}},
		{name: "stopping for good", restart: fast(schema.RestartAlways), setup: func(m *machine) { m.step(input{kind: inStop}) }},
		{name: "in a slot: its env", restart: fast(schema.RestartAlways), ok: true, setup: func(m *machine) {}, svc: nil},
		{name: "standby leading: the term's env", restart: fast(schema.RestartAlways), svc: standbyService, ok: true},
		{name: "standby whose term was lost", restart: fast(schema.RestartAlways), svc: standbyService, setup: func(m *machine) {
			m.step(input{kind: inTermLost, why: "session invalidated"})
		}},
	} {
		for _, status := range []int{1, 0} {
			name := c.name + map[int]string{1: ", exit 1", 0: ", exit 0"}[status]
			t.Run(name, func(t *testing.T) {
				m := newMachine(t, testService(func(s *schema.Service) {
					s.Restart = restartCfg(c.restart)
					if c.svc != nil {
						c.svc(s)
					}
				}))
				if c.name == "in a slot: its env" {
					m.s.slot = &SlotInfo{Unit: "web", Index: 2, Key: "mariposa/slots/web/2", Session: "s1", Term: 77}
				}
				if m.s.standby() {
					m.step(input{kind: inTermGained, term: termInfo{Key: "k", Session: "s", Index: 7}})
					m.step(input{kind: inStarted, pid: 42, started: m.now})
				} else {
					m.running(42)
				}
				if c.setup != nil {
					c.setup(m)
				}
				ok, failure, env := restartAtOnce(&m.s)
				if ok != c.ok || failure != c.failure {
					t.Fatalf("restartAtOnce = %v, failure only %v; want %v, %v", ok, failure, c.ok, c.failure)
				}
				if !ok || failure && status == 0 {
					return
				}
				m.advance(time.Millisecond)
				acts := m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: status}})
				a, started := has(acts, actStart)
				if !started || !slices.Equal(a.env, env) {
					t.Fatalf("exit %d: decide answered %v (start env %v), said in advance: a start with %v", status, kinds(acts), a.env, env)
				}
				for _, k := range kinds(acts) {
					if k != actStart && k != actDisarm {
						t.Fatalf("exit %d: decide did %v besides the start", status, kinds(acts))
					}
				}
			})
		}
	}
}
