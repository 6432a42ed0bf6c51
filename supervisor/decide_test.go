package supervisor

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

func testService(mod func(*schema.Service)) *schema.Service {
	s := &schema.Service{Name: "web", Command: []string{"web"},
		Restart: restartCfg(func(r *schema.Restart) { r.OnUnhealthy = true }),
		Stop:    schema.Stop{Signal: syscall.SIGTERM, Timeout: 10 * time.Second}}
	if mod != nil {
		mod(s)
	}
	return s
}

// machine drives decide the way the loop does, on a fake clock.
type machine struct {
	t    *testing.T
	s    instState
	now  time.Time
	acts []action // of the last step
}

func newMachine(t *testing.T, svc *schema.Service) *machine {
	return &machine{t: t, s: newInstState(svc, "web-n1", t0), now: t0}
}

func (m *machine) step(in input) []action {
	m.s, m.acts = decide(m.s, in, m.now, 0)
	return m.acts
}

func (m *machine) advance(d time.Duration) { m.now = m.now.Add(d) }

func kinds(acts []action) []actionKind {
	var out []actionKind
	for _, a := range acts {
		if a.kind != actEmit {
			out = append(out, a.kind)
		}
	}
	return out
}

func has(acts []action, k actionKind) (action, bool) {
	for _, a := range acts {
		if a.kind == k {
			return a, true
		}
	}
	return action{}, false
}

func (m *machine) want(state State, reasonPart string) {
	m.t.Helper()
	if m.s.state != state || !strings.Contains(m.s.reason, reasonPart) {
		m.t.Fatalf("state %s %q, want %s containing %q", m.s.state, m.s.reason, state, reasonPart)
	}
}

// boot and start a process with pid.
func (m *machine) running(pid int) {
	m.t.Helper()
	acts := m.step(input{kind: inBoot})
	if _, ok := has(acts, actStart); !ok {
		m.t.Fatalf("boot did not start: %v", kinds(acts))
	}
	m.step(input{kind: inStarted, pid: pid, started: m.now})
	m.want(StateRunning, "running (pid")
}

func TestDecideBootRegistersAndStarts(t *testing.T) {
	m := newMachine(t, testService(nil))
	got := kinds(m.step(input{kind: inBoot}))
	if !slices.Equal(got, []actionKind{actRegister, actDisarm, actStart}) {
		t.Fatalf("boot: %v", got)
	}
	m.step(input{kind: inStarted, pid: 42, started: m.now})
	m.want(StateRunning, "running (pid 42)")
	if m.s.health() != api.HealthPassing {
		t.Fatal("running is not passing")
	}
}

func TestDecideExitRestartsWithBackoffAndStderr(t *testing.T) {
	m := newMachine(t, testService(nil))
	m.running(42)
	m.advance(time.Second)
	acts := m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 3}, stderr: "bind: Address already in use"})
	m.want(StateBackoff, `restarting at 00:00:02 after exit 3, attempt 1/10; last stderr: "bind: Address already in use"`)
	if a, ok := has(acts, actArm); !ok || a.timer != timerStart || a.d != time.Second {
		t.Fatalf("no backoff timer: %+v", acts)
	}
	if m.s.until != t0.Add(2*time.Second) {
		t.Errorf("until = %v", m.s.until)
	}
	if _, ok := has(m.step(input{kind: inTimer, timer: timerStart}), actStart); !ok {
		t.Fatal("backoff timer did not start the process")
	}
	m.step(input{kind: inStarted, pid: 43, started: m.now})
	m.want(StateRunning, "restarted 1 time, last after exit 3")
}

func TestDecideStaleExitIgnored(t *testing.T) {
	m := newMachine(t, testService(nil))
	m.running(42)
	if acts := m.step(input{kind: inExited, pid: 41, exit: proc.Exit{Code: 1}}); len(kinds(acts)) != 0 {
		t.Fatalf("a stale exit acted: %v", kinds(acts))
	}
	m.want(StateRunning, "pid 42")
}

// Regression (issue 10): a command that cannot start, with restart
// { delay = "0s" attempts = 0 }, recursed start <-> after without end and
// Stop never returned.
func TestDecideStartFailureNeverSpins(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) {
		s.Restart.Delay, s.Restart.Attempts, s.Restart.Window = 0, 0, 0
	}))
	m.step(input{kind: inBoot})
	err := &proc.StartError{Err: errors.New(`command "nope" not found in PATH`), Permanent: true}
	acts := m.step(input{kind: inStartFailed, err: err})
	if _, ok := has(acts, actStart); ok {
		t.Fatal("a start failure with delay 0 starts again at once")
	}
	a, ok := has(acts, actArm)
	if !ok || a.d < time.Second {
		t.Fatalf("start failure retried after %v, want >= 1s", a.d)
	}
	m.want(StateBackoff, `after cannot start: command "nope" not found in PATH`)
	// And a stop is served.
	m.step(input{kind: inStop})
	acts = m.step(input{kind: inDeregistered})
	if _, ok := has(acts, actDone); !ok || m.s.state != StateStopped {
		t.Fatalf("stop after start failures: %v %s", kinds(acts), m.s.state)
	}
}

func TestDecideStartFailureUnderPolicyNeverFails(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { s.Restart.Policy = schema.RestartNever }))
	m.step(input{kind: inBoot})
	m.step(input{kind: inStartFailed, err: errors.New("working directory /srv/x does not exist")})
	m.want(StateFailed, "failed: cannot start: working directory /srv/x does not exist")
}

func TestDecideExhaustedFails(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { s.Restart.Attempts = 2; s.Restart.Delay = 0 }))
	m.running(1)
	for pid := 1; pid <= 2; pid++ {
		m.step(input{kind: inExited, pid: pid, exit: proc.Exit{Code: 1}})
		m.step(input{kind: inStarted, pid: pid + 1, started: m.now})
	}
	m.step(input{kind: inExited, pid: 3, exit: proc.Exit{Code: 1}, stderr: "cannot connect to queue"})
	m.want(StateFailed, `failed: 2 restarts in 5m (last: exit 1); last stderr: "cannot connect to queue"`)
	if r := reportOf(&m.s); r.Stderr != "cannot connect to queue" || r.State != "failed" {
		t.Errorf("report: %+v", r)
	}
}

func healthy(status string) input {
	return input{kind: inHealth, states: []checks.CatalogCheck{{CheckID: "web-n1:http", Status: status}}}
}

func withHTTPCheck(s *schema.Service) {
	s.Checks = []*schema.Check{{Name: "http", Kind: schema.CheckHTTP, Interval: time.Second, Timeout: time.Second}}
}

// Regression (issue 10): the second SIGINT did not kill at once while a
// health restart waited out the stop timeout.
func TestDecideKillDuringHealthRestart(t *testing.T) {
	m := newMachine(t, testService(withHTTPCheck))
	m.running(42)
	m.step(healthy(api.HealthPassing))
	m.advance(time.Second)
	acts := m.step(healthy(api.HealthCritical))
	if a, ok := has(acts, actStop); !ok || a.kill {
		t.Fatalf("critical check: want a graceful stop, got %v", kinds(acts))
	}
	m.want(StateStarting, `check "http" critical; restarting`)
	m.step(input{kind: inStop}) // first SIGINT
	acts = m.step(input{kind: inKill})
	if _, ok := has(acts, actKill); !ok {
		t.Fatalf("second SIGINT during a health restart: %v, want actKill", kinds(acts))
	}
	// The exit completes the shutdown, not the health restart.
	m.step(input{kind: inDeregistered})
	acts = m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: -1, Signal: syscall.SIGKILL}})
	if _, ok := has(acts, actDone); !ok {
		t.Fatalf("exit after kill: %v", kinds(acts))
	}
	if _, ok := has(acts, actStart); ok {
		t.Fatal("restarted during shutdown")
	}
}

func TestDecideKillBeforeDeregisteredSkipsDrain(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { s.Stop.Drain = 5 * time.Second }))
	m.running(42)
	m.step(input{kind: inStop})
	acts := m.step(input{kind: inDeregistered})
	if a, ok := has(acts, actArm); !ok || a.timer != timerDrain {
		t.Fatalf("no drain: %v", kinds(acts))
	}
	acts = m.step(input{kind: inKill})
	if a, ok := has(acts, actStop); !ok || !a.kill {
		t.Fatalf("kill during drain: %v", kinds(acts))
	}
}

func TestDecideHealthIgnoresStaleCritical(t *testing.T) {
	m := newMachine(t, testService(withHTTPCheck))
	m.running(42)
	// Consul registers checks critical: right after the start, not yet ours.
	acts := m.step(healthy(api.HealthCritical))
	if _, ok := has(acts, actStop); ok {
		t.Fatal("restarted on the status a registration leaves")
	}
	if a, ok := has(acts, actArm); !ok || a.timer != timerHealth {
		t.Fatalf("no recheck: %v", kinds(acts))
	}
	m.advance(2 * time.Second)
	if _, ok := has(m.step(input{kind: inTimer, timer: timerHealth}), actStop); !ok {
		t.Fatal("still critical after interval+timeout: no restart")
	}
}

func dataState(ready bool, waiting string, events ...render.TemplateEvent) render.ServiceState {
	return render.ServiceState{DepsSatisfied: ready, TemplatesReady: true, Waiting: waiting, Events: events}
}

func TestDecideWaitsForData(t *testing.T) {
	m := newMachine(t, testService(nil))
	acts := m.step(input{kind: inBoot, hasData: true, data: dataState(false, "waiting: web needs 1 passing db, has 0")})
	if _, ok := has(acts, actStart); ok {
		t.Fatal("started with unmet dependencies")
	}
	m.want(StateWaiting, "needs 1 passing db")
	acts = m.step(input{kind: inData, data: dataState(true, "")})
	if _, ok := has(acts, actStart); !ok {
		t.Fatal("did not start when ready")
	}
}

func TestDecideTemplateThatCannotParseFails(t *testing.T) {
	m := newMachine(t, testService(nil))
	d := dataState(true, "")
	d.Failed = `failed: template web.conf: web.conf.tpl:3:12: function "kye" not defined`
	acts := m.step(input{kind: inBoot, hasData: true, data: d})
	if _, ok := has(acts, actStart); ok {
		t.Fatal("started")
	}
	m.want(StateFailed, `function "kye" not defined`)
}

func TestDecideTemplateSignalGoesToMainProcess(t *testing.T) {
	m := newMachine(t, testService(nil))
	m.step(input{kind: inBoot, hasData: true, data: dataState(true, "")})
	m.step(input{kind: inStarted, pid: 42, started: m.now})
	tmpl := &schema.Template{Destination: "web.conf", ChangeMode: "signal", Signal: syscall.SIGHUP}
	acts := m.step(input{kind: inData, data: dataState(true, "", render.TemplateEvent{Template: tmpl, Destination: "web.conf"})})
	a, ok := has(acts, actSignal)
	if !ok || a.sig != syscall.SIGHUP {
		t.Fatalf("template change: %v", kinds(acts))
	}
	if _, ok := has(acts, actStop); ok {
		t.Fatal("a signal template restarted the process")
	}
}

func TestDecideOperatorRestartAndReset(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { s.Restart.Attempts = 1 }))
	m.running(1)
	m.step(input{kind: inExited, pid: 1, exit: proc.Exit{Code: 1}})
	m.step(input{kind: inTimer, timer: timerStart})
	m.step(input{kind: inStarted, pid: 2, started: m.now})
	m.step(input{kind: inExited, pid: 2, exit: proc.Exit{Code: 1}})
	m.want(StateFailed, "failed: 1 restarts")
	// reset clears the history and starts it.
	acts := m.step(input{kind: inReset})
	if r, _ := has(acts, actReply); r.err != nil {
		t.Fatal(r.err)
	}
	if _, ok := has(acts, actStart); !ok {
		t.Fatalf("reset did not start a failed service: %v", kinds(acts))
	}
	m.step(input{kind: inStarted, pid: 3, started: m.now})
	// With a clear history, the next exit restarts again.
	m.step(input{kind: inExited, pid: 3, exit: proc.Exit{Code: 1}})
	m.want(StateBackoff, "attempt 1/1")
	m.step(input{kind: inTimer, timer: timerStart})
	m.step(input{kind: inStarted, pid: 4, started: m.now})
	// restart of a running process: stop, then start at once.
	acts = m.step(input{kind: inRestart})
	if a, ok := has(acts, actStop); !ok || a.kill {
		t.Fatalf("operator restart: %v", kinds(acts))
	}
	acts = m.step(input{kind: inExited, pid: 4, exit: proc.Exit{Code: 0}})
	if _, ok := has(acts, actStart); !ok {
		t.Fatalf("operator restart did not start again: %v", kinds(acts))
	}
	m.step(input{kind: inStarted, pid: 5, started: m.now})
	m.want(StateRunning, "last after restarted by an operator")
}

// The events of an operator's request name who asked (the audit file and
// /v1/events show it); the events of what follows on their own do not.
func TestDecideOperatorActor(t *testing.T) {
	emitted := func(acts []action) []Event {
		var out []Event
		for _, a := range acts {
			if a.kind == actEmit {
				out = append(out, a.ev)
			}
		}
		return out
	}
	m := newMachine(t, testService(func(s *schema.Service) { s.Restart.Attempts = 1 }))
	m.running(1)
	const by = "http accessor=2b4ac35f-6a1c-4c9e-9d1e-3f0a4a1c2b3d remote=127.0.0.1:50312"
	evs := emitted(m.step(input{kind: inRestart, by: by}))
	if len(evs) == 0 || evs[0].Kind != EventRestarting || evs[0].Reason != "restarted by an operator" {
		t.Fatalf("restart of a running process emitted %+v", evs)
	}
	for _, e := range evs {
		if e.Actor != by {
			t.Errorf("event %s: actor %q, want %q", e.Kind, e.Actor, by)
		}
	}
	for _, e := range emitted(m.step(input{kind: inExited, pid: 1, exit: proc.Exit{Code: 0}})) {
		if e.Actor != "" {
			t.Errorf("event %s after the restart: actor %q", e.Kind, e.Actor)
		}
	}
	m.step(input{kind: inStarted, pid: 2, started: m.now})
	m.step(input{kind: inExited, pid: 2, exit: proc.Exit{Code: 1}})
	m.step(input{kind: inTimer, timer: timerStart})
	m.step(input{kind: inStarted, pid: 3, started: m.now})
	m.step(input{kind: inExited, pid: 3, exit: proc.Exit{Code: 1}})
	m.want(StateFailed, "failed")
	evs = emitted(m.step(input{kind: inReset, by: "socket uid=0 pid=4242"}))
	if len(evs) == 0 || evs[0].Kind != EventOperator || evs[0].Reason != "reset" || evs[0].Actor != "socket uid=0 pid=4242" {
		t.Fatalf("reset emitted %+v", evs)
	}
}

func standbyService(s *schema.Service) {
	s.Leader = &schema.Leader{Mode: "standby", Key: "mariposa/leader/web", ChangeMode: "restart"}
}

func TestDecideStandbyLeadership(t *testing.T) {
	m := newMachine(t, testService(standbyService))
	if acts := m.step(input{kind: inBoot}); len(kinds(acts)) != 0 {
		t.Fatalf("a standby acted at boot: %v", kinds(acts))
	}
	m.want(StateStandby, "standby")
	acts := m.step(input{kind: inTermGained, term: termInfo{Key: "k", Session: "s", Index: 7}})
	if got := kinds(acts); !slices.Equal(got, []actionKind{actRegister, actDisarm, actStart}) {
		t.Fatalf("term gained: %v", got)
	}
	if a, _ := has(acts, actRegister); a.role != "leader" {
		t.Errorf("registered as %q", a.role)
	}
	if a, _ := has(acts, actStart); !slices.Contains(a.env, "MARIPOSA_LEADER_INDEX=7") {
		t.Errorf("leader env: %v", a.env)
	}
	m.step(input{kind: inStarted, pid: 9, started: m.now})
	m.want(StateRunning, "as leader")

	// An expired term kills at once; the term goes back only after the
	// child is dead and the registration withdrawn.
	acts = m.step(input{kind: inTermLost, expired: true})
	if a, ok := has(acts, actStop); !ok || !a.kill {
		t.Fatalf("expired term: %v", kinds(acts))
	}
	if _, ok := has(acts, actReleaseTerm); ok {
		t.Fatal("term handed back while the leader's child may run")
	}
	acts = m.step(input{kind: inExited, pid: 9, exit: proc.Exit{Code: -1, Signal: syscall.SIGKILL}})
	if got := kinds(acts); !slices.Contains(got, actDeregister) || slices.Contains(got, actReleaseTerm) {
		t.Fatalf("after the child died: %v", got)
	}
	acts = m.step(input{kind: inDeregistered})
	if _, ok := has(acts, actReleaseTerm); !ok {
		t.Fatalf("term not handed back: %v", kinds(acts))
	}
	m.want(StateStandby, "standby")
}

// A leader's graceful shutdown keeps the shutdown's order although ending
// the election ends the term at once (mariposa's elector stops first): the
// drain is served, the stop signal goes out only after it (with the
// deregistration when there is no drain), and the term goes back only once
// the process is gone; if the deregistration has not returned by then, the
// release withdraws the registration in its own transaction, so the
// catalog never lists two leaders. Only an expiry cuts the drain short.
func TestDecideLeaderShutdownOrder(t *testing.T) {
	type step struct {
		in          input
		stop, kill  bool // the step stops the process (kill: at once)
		release     bool // the step hands the term back
		withdraw    bool // ... withdrawing the registration in the release
		deregisters bool
	}
	lost := input{kind: inTermLost, why: "stopped: Run's context ended"}
	cases := []struct {
		name  string
		drain time.Duration
		steps []step
	}{
		{"drain", 2 * time.Second, []step{
			{in: input{kind: inStop}, deregisters: true},
			{in: lost},
			{in: input{kind: inDeregistered}},
			{in: input{kind: inTimer, timer: timerDrain}, stop: true},
			{in: input{kind: inExited, pid: 9}, release: true},
		}},
		{"no drain, exit first", 0, []step{
			{in: input{kind: inStop}, deregisters: true, stop: true},
			{in: lost},
			{in: input{kind: inExited, pid: 9}, release: true, withdraw: true},
			{in: input{kind: inDeregistered}},
		}},
		{"no drain, deregistration first", 0, []step{
			{in: input{kind: inStop}, deregisters: true, stop: true},
			{in: input{kind: inDeregistered}},
			{in: lost},
			{in: input{kind: inExited, pid: 9}, release: true},
		}},
		{"expiry during the drain", 2 * time.Second, []step{
			{in: input{kind: inStop}, deregisters: true},
			{in: input{kind: inDeregistered}},
			{in: input{kind: inTermLost, expired: true}, stop: true, kill: true},
			{in: input{kind: inTimer, timer: timerDrain}},
			{in: input{kind: inExited, pid: 9}, release: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t, testService(func(s *schema.Service) { standbyService(s); s.Stop.Drain = c.drain }))
			m.step(input{kind: inBoot})
			m.step(input{kind: inTermGained, term: termInfo{Key: "k", Session: "s", Index: 7}})
			m.step(input{kind: inStarted, pid: 9, started: m.now})
			for i, st := range c.steps {
				acts := m.step(st.in)
				a, stopped := has(acts, actStop)
				_, killed := has(acts, actKill)
				r, released := has(acts, actReleaseTerm)
				_, dereg := has(acts, actDeregister)
				if stopped != st.stop || (st.kill && !a.kill && !killed) || released != st.release || r.withdraw != st.withdraw || dereg != st.deregisters {
					t.Fatalf("step %d (input %d): actions %v (withdraw %v); want stop %v (kill %v), release %v (withdraw %v), deregister %v",
						i, st.in.kind, kinds(acts), r.withdraw, st.stop, st.kill, st.release, st.withdraw, st.deregisters)
				}
			}
			m.want(StateStopped, "stopped")
		})
	}
}

func TestDecideTermExpiresWhileStopping(t *testing.T) {
	m := newMachine(t, testService(standbyService))
	m.step(input{kind: inBoot})
	m.step(input{kind: inTermGained, term: termInfo{Key: "k"}})
	m.step(input{kind: inStarted, pid: 9, started: m.now})
	acts := m.step(input{kind: inTermLost}) // voluntary: graceful
	if a, ok := has(acts, actStop); !ok || a.kill {
		t.Fatalf("voluntary loss: %v", kinds(acts))
	}
	if acts := m.step(input{kind: inTermExpired}); !slices.Contains(kinds(acts), actKill) {
		t.Fatalf("expiry during the stop: %v", kinds(acts))
	}
}

func TestDecideLeaderGivesUpWhenExhausted(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { standbyService(s); s.Restart.Attempts = 1; s.Restart.Delay = 0 }))
	m.step(input{kind: inBoot})
	m.step(input{kind: inTermGained, term: termInfo{Key: "k"}})
	m.step(input{kind: inStarted, pid: 1, started: m.now})
	m.step(input{kind: inExited, pid: 1, exit: proc.Exit{Code: 1}})
	m.step(input{kind: inStarted, pid: 2, started: m.now})
	acts := m.step(input{kind: inExited, pid: 2, exit: proc.Exit{Code: 1}})
	if !slices.Contains(kinds(acts), actStopElecting) {
		t.Fatalf("exhausted leader kept contending: %v", kinds(acts))
	}
	acts = m.step(input{kind: inTermLost})
	if !slices.Contains(kinds(acts), actReleaseTerm) || slices.Contains(kinds(acts), actDeregister) {
		t.Fatalf("resigning: %v (stays registered as failed, hands the term back)", kinds(acts))
	}
	m.want(StateFailed, "failed")
}

func TestDecideTagModeRoleChange(t *testing.T) {
	for _, mode := range []string{"restart", "signal", "noop"} {
		t.Run(mode, func(t *testing.T) {
			m := newMachine(t, testService(func(s *schema.Service) {
				s.Leader = &schema.Leader{Mode: "tag", Key: "k", ChangeMode: mode, Signal: syscall.SIGUSR1}
			}))
			acts := m.step(input{kind: inBoot})
			if a, _ := has(acts, actRegister); a.role != "follower" {
				t.Fatalf("boot role %q", a.role)
			}
			m.step(input{kind: inStarted, pid: 1, started: m.now})
			acts = m.step(input{kind: inTermGained, term: termInfo{Key: "k"}})
			_, stop := has(acts, actStop)
			_, sig := has(acts, actSignal)
			if stop != (mode == "restart") || sig != (mode == "signal") {
				t.Fatalf("gained: %v", kinds(acts))
			}
			if mode == "restart" {
				m.step(input{kind: inExited, pid: 1, exit: proc.Exit{Code: 0}})
				m.step(input{kind: inStarted, pid: 2, started: m.now})
			}
			m.want(StateRunning, "as leader")
			acts = m.step(input{kind: inTermLost})
			_, released := has(acts, actReleaseTerm)
			if released == (mode == "restart") {
				t.Fatalf("lost: %v (restart mode hands the term back after the stop)", kinds(acts))
			}
			if mode == "restart" {
				acts = m.step(input{kind: inExited, pid: 2, exit: proc.Exit{Code: 0}})
				if got := kinds(acts); !slices.Contains(got, actReleaseTerm) || !slices.Contains(got, actStart) {
					t.Fatalf("after the leader's stop: %v", got)
				}
				m.step(input{kind: inStarted, pid: 3, started: m.now})
			}
			m.want(StateRunning, "as follower")
		})
	}
}

func TestDecideShutdownOrder(t *testing.T) {
	m := newMachine(t, testService(func(s *schema.Service) { s.Stop.Drain = time.Second }))
	m.running(42)
	acts := m.step(input{kind: inStop})
	if got := kinds(acts); !slices.Contains(got, actDeregister) || slices.Contains(got, actStop) {
		t.Fatalf("stop: %v (deregister first)", got)
	}
	m.step(input{kind: inDeregistered})
	acts = m.step(input{kind: inTimer, timer: timerDrain})
	if a, ok := has(acts, actStop); !ok || a.kill {
		t.Fatalf("after the drain: %v", kinds(acts))
	}
	acts = m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 0}})
	if _, ok := has(acts, actDone); !ok || m.s.state != StateStopped {
		t.Fatalf("exit during shutdown: %v %s", kinds(acts), m.s.state)
	}
}

func TestDecideSlot(t *testing.T) {
	slotted := func(t *testing.T) *machine {
		m := newMachine(t, testService(nil))
		m.s.slot = &SlotInfo{Unit: "web", Index: 2, Key: "mariposa/slots/web/2", Session: "s1", Term: 77}
		return m
	}
	t.Run("env carries the slot and its fencing token", func(t *testing.T) {
		m := slotted(t)
		a, _ := has(m.step(input{kind: inBoot}), actStart)
		for _, kv := range []string{"MARIPOSA_INSTANCE=2", "MARIPOSA_SLOT_KEY=mariposa/slots/web/2", "MARIPOSA_SLOT_SESSION=s1", "MARIPOSA_SLOT_INDEX=77"} {
			if !slices.Contains(a.env, kv) {
				t.Errorf("start env %v lacks %s", a.env, kv)
			}
		}
	})
	t.Run("lost: graceful stop, never started again", func(t *testing.T) {
		m := slotted(t)
		m.running(42)
		a, ok := has(m.step(input{kind: inSlotLost, why: "key released"}), actStop)
		if !ok || a.kill {
			t.Fatalf("lost slot: stop %+v %v", a, ok)
		}
		m.step(input{kind: inExited, pid: 42})
		m.want(StateStopped, "slot web/2 lost: key released")
		if _, ok := has(m.step(input{kind: inTimer, timer: timerStart}), actStart); ok {
			t.Fatal("started in a lost slot")
		}
		if _, ok := has(m.step(input{kind: inRestart}), actStart); ok {
			t.Fatal("an operator restart started in a lost slot")
		}
	})
	t.Run("expired: SIGKILL at once, also mid-stop", func(t *testing.T) {
		m := slotted(t)
		m.running(42)
		if a, ok := has(m.step(input{kind: inSlotLost, expired: true}), actStop); !ok || !a.kill {
			t.Fatalf("expired slot: stop %+v %v", a, ok)
		}
		m2 := slotted(t)
		m2.running(43)
		m2.step(input{kind: inSlotLost})
		if _, ok := has(m2.step(input{kind: inSlotExpired}), actKill); !ok {
			t.Fatal("deadline passed during a graceful stop: no SIGKILL")
		}
	})
	t.Run("lost in backoff: no start", func(t *testing.T) {
		m := slotted(t)
		m.running(42)
		m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}})
		m.want(StateBackoff, "")
		m.step(input{kind: inSlotLost})
		m.want(StateStopped, "slot web/2 lost")
		if _, ok := has(m.step(input{kind: inTimer, timer: timerStart}), actStart); ok {
			t.Fatal("backoff timer started in a lost slot")
		}
	})
}

// After an upgrade in place an instance without a process stays as it
// waited: in backoff until the same time (its restart then comes from the
// timer), failed or completed without a start; one with a process runs on
// as adopted, restarts and restart window carried over.
func TestDecideAdopted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      input
		state   State
		starts  bool
		armed   time.Duration // timerStart, 0: none
		reason  string
		restart int
	}{
		{"running", input{kind: inAdopted, pid: 42, restarts: 3, why: "exit 1"}, StateRunning, false, 0, "running (pid 42); restarted 3 times, last after exit 1", 3},
		{"backoff", input{kind: inAdopted, restarts: 2, idle: StateBackoff, reason: "restarting at 12:00:05", until: time.Unix(1005, 0)}, StateBackoff, false, 5 * time.Second, "restarting at 12:00:05", 2},
		{"backoff due", input{kind: inAdopted, restarts: 2, idle: StateBackoff, reason: "restarting", until: time.Unix(999, 0)}, StateBackoff, false, -1, "restarting", 2},
		{"failed", input{kind: inAdopted, restarts: 10, idle: StateFailed, reason: "failed: restarts exhausted"}, StateFailed, false, 0, "restarts exhausted", 10},
		{"completed", input{kind: inAdopted, idle: StateCompleted, reason: "completed (exit 0)"}, StateCompleted, false, 0, "completed", 0},
		{"paused", input{kind: inAdopted, restarts: 1, idle: StatePaused, reason: "paused: would restart after exit 1 (ops)", pause: Pause{Why: "ops"}}, StatePaused, false, 0, "would restart", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, testService(nil))
			m.now = time.Unix(1000, 0)
			tc.in.tracker = TrackerState{Restarts: []time.Time{time.Unix(990, 0)}, Consecutive: 2}
			acts := m.step(tc.in)
			m.want(tc.state, tc.reason)
			if _, ok := has(acts, actStart); ok != tc.starts {
				t.Errorf("start: %v", kinds(acts))
			}
			if _, ok := has(acts, actRegister); !ok {
				t.Errorf("not registered again: %v", kinds(acts))
			}
			a, armed := has(acts, actArm)
			switch {
			case tc.armed == 0 && armed:
				t.Errorf("armed %v", a)
			case tc.armed > 0 && (!armed || a.timer != timerStart || a.d != tc.armed):
				t.Errorf("arm: %+v, want timerStart in %s", a, tc.armed)
			case tc.armed < 0 && (!armed || a.d != 0):
				t.Errorf("arm: %+v, want timerStart at once", a)
			}
			if m.s.restarts != tc.restart || m.s.tracker.consecutive != 2 || len(m.s.tracker.restarts) != 1 {
				t.Errorf("restarts %d, tracker %+v", m.s.restarts, m.s.tracker)
			}
			if tc.state == StatePaused {
				if acts := m.step(input{kind: inPause, pause: Pause{}}); !slices.ContainsFunc(acts, func(a action) bool { return a.kind == actStart }) {
					t.Errorf("the resume did not start it: %v", kinds(acts))
				}
				return
			}
			if tc.in.pid == 0 {
				if acts := m.step(input{kind: inTimer, timer: timerStart}); tc.state == StateBackoff {
					if _, ok := has(acts, actStart); !ok {
						t.Errorf("the backoff's timer did not start it: %v", kinds(acts))
					}
				}
			}
		})
	}
}

// A template the previous build rendered and that changed before the
// adoption's first input: the adopted process is restarted for it, as for
// any change (change_mode restart).
func TestDecideAdoptedTemplateChanged(t *testing.T) {
	svc := testService(nil)
	svc.Templates = []*schema.Template{{Destination: "/x.conf", ChangeMode: "restart"}}
	m := newMachine(t, svc)
	d := render.ServiceState{DepsSatisfied: true, TemplatesReady: true,
		Events: []render.TemplateEvent{{Template: svc.Templates[0], Destination: "/x.conf"}}}
	acts := m.step(input{kind: inAdopted, pid: 42, hasData: true, data: d})
	if _, ok := has(acts, actStop); !ok {
		t.Fatalf("no restart for the template changed: %v", kinds(acts))
	}
	d.Events = nil
	m2 := newMachine(t, svc)
	if acts := m2.step(input{kind: inAdopted, pid: 42, hasData: true, data: d}); len(acts) > 0 {
		if _, ok := has(acts, actStop); ok {
			t.Fatalf("restarted without a change: %v", kinds(acts))
		}
	}
}
