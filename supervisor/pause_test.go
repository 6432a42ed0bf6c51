package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/proc"
)

const pauseWhy = "paused by ops@ci: incident 4721"

// A paused instance that exits stays down, saying what it would do; the
// resume restarts it at once. A pause that comes during a backoff holds
// the restart when the backoff ends. Stopping is never paused.
func TestDecidePause(t *testing.T) {
	t.Run("exit while paused: held, then restarted at the resume", func(t *testing.T) {
		m := newMachine(t, testService(nil))
		m.running(42)
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		m.want(StateRunning, "pid 42") // a running process is left alone
		acts := m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}})
		if _, ok := has(acts, actStart); ok {
			t.Fatal("restarted while paused")
		}
		if _, ok := has(acts, actArm); ok {
			t.Fatal("a backoff timer armed while paused")
		}
		m.want(StatePaused, "paused: would restart after exit 1 ("+pauseWhy+")")
		if m.s.held() != "restart after exit 1" || m.s.health() != api.HealthCritical {
			t.Fatalf("held %q, health %s", m.s.held(), m.s.health())
		}
		m.step(input{kind: inPause, pause: Pause{Why: "paused by someone else"}})
		m.want(StatePaused, "(paused by someone else)")
		if _, ok := has(m.step(input{kind: inPause}), actStart); !ok {
			t.Fatal("the resume did not restart")
		}
		m.step(input{kind: inStarted, pid: 43, started: m.now})
		m.want(StateRunning, "restarted 1 time, last after exit 1")
	})
	t.Run("paused during the backoff: held when it ends", func(t *testing.T) {
		m := newMachine(t, testService(nil))
		m.running(42)
		m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 3}})
		m.want(StateBackoff, "after exit 3")
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		if _, ok := has(m.step(input{kind: inTimer, timer: timerStart}), actStart); ok {
			t.Fatal("the backoff's end started it while paused")
		}
		m.want(StatePaused, "would restart after exit 3")
		if _, ok := has(m.step(input{kind: inPause}), actStart); !ok {
			t.Fatal("the resume did not restart")
		}
	})
	t.Run("dropped from the queue: failed, and the resume leaves it down", func(t *testing.T) {
		m := newMachine(t, testService(nil))
		m.running(42)
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}})
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy, Dropped: "ops@ci"}})
		m.want(StateFailed, "restart dropped from the queue by ops@ci, after exit 1")
		if _, ok := has(m.step(input{kind: inPause}), actStart); ok {
			t.Fatal("a dropped restart happened at the resume")
		}
		// An operator can still start it.
		if _, ok := has(m.step(input{kind: inRestart}), actStart); !ok {
			t.Fatal("mariposa restart of a dropped instance did not start it")
		}
	})
	t.Run("a critical check while paused: no health restart until the resume", func(t *testing.T) {
		m := newMachine(t, testService(withHTTPCheck))
		m.running(42)
		m.step(healthy(api.HealthPassing))
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		m.advance(time.Second)
		acts := m.step(healthy(api.HealthCritical))
		if _, ok := has(acts, actStop); ok {
			t.Fatal("a health restart while paused")
		}
		if m.s.held() != `restart: check "http" critical` {
			t.Fatalf("held %q", m.s.held())
		}
		if a, ok := has(m.step(input{kind: inPause}), actStop); !ok || a.kill {
			t.Fatalf("the resume did not do the health restart: %v", kinds(m.acts))
		}
		m.want(StateStarting, `check "http" critical; restarting`)
	})
	t.Run("stopping is never paused", func(t *testing.T) {
		m := newMachine(t, testService(nil))
		m.running(42)
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		if _, ok := has(m.step(input{kind: inStop}), actDeregister); !ok {
			t.Fatalf("a shutdown while paused: %v", kinds(m.acts))
		}
	})
	t.Run("events say so", func(t *testing.T) {
		m := newMachine(t, testService(nil))
		m.running(42)
		m.step(input{kind: inPause, pause: Pause{Why: pauseWhy}})
		acts := m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}})
		var kinds []string
		for _, a := range acts {
			if a.kind == actEmit {
				kinds = append(kinds, string(a.ev.Kind))
			}
		}
		if !strings.Contains(strings.Join(kinds, ","), "paused") {
			t.Fatalf("events %v", kinds)
		}
	})
}
