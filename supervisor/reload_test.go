package supervisor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// The stepper's side of coordinated reloads: what it asks of the gate and
// when. The gate is played by the test, feeding inReloadGranted back.

// coordTemplates: web.conf (coordinated, mode and max_parallel as given),
// and plain.conf (not coordinated, restart).
func coordTemplates(mode string, maxParallel int) func(*schema.Service) {
	return func(s *schema.Service) {
		s.Templates = []*schema.Template{
			{Destination: "web.conf", ChangeMode: mode, Signal: syscall.SIGHUP, Coordinate: &schema.Coordinate{MaxParallel: maxParallel}},
			{Destination: "plain.conf", ChangeMode: "restart"},
		}
	}
}

// change is a data change of the templates named (by index), with the
// rendered hashes given.
func (m *machine) change(hashes []string, changed ...int) []action {
	var evs []render.TemplateEvent
	for _, i := range changed {
		t := m.s.svc.Templates[i]
		evs = append(evs, render.TemplateEvent{Template: t, Destination: t.Destination})
	}
	d := dataState(true, "", evs...)
	d.Hashes = hashes
	return m.step(input{kind: inData, data: d})
}

// bootData boots with data and starts pid.
func (m *machine) bootData(pid int) {
	m.t.Helper()
	d := dataState(true, "")
	d.Hashes = []string{"h0", "p0"}
	if _, ok := has(m.step(input{kind: inBoot, hasData: true, data: d}), actStart); !ok {
		m.t.Fatal("boot did not start")
	}
	m.step(input{kind: inStarted, pid: pid, started: m.now})
}

func acquired(t *testing.T, acts []action) action {
	t.Helper()
	a, ok := has(acts, actAcquireReload)
	if !ok {
		t.Fatalf("no reload token asked for: %v", kinds(acts))
	}
	return a
}

func released(acts []action) []uint64 {
	var out []uint64
	for _, a := range acts {
		if a.kind == actReleaseReload {
			out = append(out, a.seq)
		}
	}
	return out
}

func passingHTTP() input { return healthy(api.HealthPassing) }

func TestReloadDecisions(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*schema.Service)
		run  func(t *testing.T, m *machine)
	}{
		{"restart waits for the token, then restarts", coordTemplates("restart", 2), func(t *testing.T, m *machine) {
			m.bootData(42)
			acts := m.change([]string{"h1", "p0"}, 0)
			if _, ok := has(acts, actStop); ok {
				t.Fatal("a coordinated change restarted before its token")
			}
			a := acquired(t, acts)
			if a.reload.Service != "web" || a.reload.Unit != "web" || a.reload.Limit != 2 || a.reload.Hash == "" || a.reload.Slot != nil || a.reload.Session != "" {
				t.Errorf("request %+v", a.reload)
			}
			m.want(StateRunning, "template web.conf changed: waiting for a reload token")
			if m.s.health() != api.HealthPassing {
				t.Error("waiting for a token is not passing")
			}
			acts = m.step(input{kind: inReloadGranted, seq: a.seq})
			if s, ok := has(acts, actStop); !ok || s.kill {
				t.Fatalf("granted: %v, want a graceful stop", kinds(acts))
			}
			m.step(input{kind: inExited, pid: 42})
			// Without checks, running again gives the token back.
			acts = m.step(input{kind: inStarted, pid: 43, started: m.now})
			if got := released(acts); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("running again without checks: released %v, want [%d]", got, a.seq)
			}
			m.want(StateRunning, "restarted 1 time, last after template web.conf changed")
		}},
		{"with checks: the token goes back once they pass about the new process", func(s *schema.Service) {
			coordTemplates("restart", 1)(s)
			withHTTPCheck(s) // interval 1s, timeout 1s
			s.Restart.Grace = 10 * time.Second
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			m.step(passingHTTP())
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inReloadGranted, seq: a.seq})
			m.step(input{kind: inExited, pid: 42})
			m.advance(100 * time.Millisecond)
			acts := m.step(input{kind: inStarted, pid: 43, started: m.now})
			if len(released(acts)) != 0 {
				t.Fatal("released on a status about the old process")
			}
			if r, ok := has(acts, actArm); !ok || r.timer != timerReload || r.d != 2*time.Second {
				t.Fatalf("no look again after interval+timeout: %+v", acts)
			}
			// The check turns critical (the new process is not listening
			// yet), then passing: released at once.
			m.advance(500 * time.Millisecond)
			if acts := m.step(healthy(api.HealthCritical)); len(released(acts)) != 0 {
				t.Fatal("released while critical")
			}
			m.advance(500 * time.Millisecond)
			if got := released(m.step(passingHTTP())); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("passing after critical: released %v", got)
			}
		}},
		{"with checks that never flickered: released once they had time to report", func(s *schema.Service) {
			coordTemplates("restart", 1)(s)
			withHTTPCheck(s)
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			m.step(passingHTTP())
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inReloadGranted, seq: a.seq})
			m.step(input{kind: inExited, pid: 42})
			m.step(input{kind: inStarted, pid: 43, started: m.now})
			m.advance(time.Second)
			if acts := m.step(input{kind: inTimer, timer: timerReload}); len(released(acts)) != 0 {
				t.Fatal("released before the check could report")
			}
			m.advance(time.Second)
			if got := released(m.step(input{kind: inTimer, timer: timerReload})); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("after interval+timeout, passing: released %v", got)
			}
		}},
		{"signal: signals after the token, released at once without checks", coordTemplates("signal", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			acts := m.change([]string{"h1", "p0"}, 0)
			if _, ok := has(acts, actSignal); ok {
				t.Fatal("signalled before the token")
			}
			a := acquired(t, acts)
			acts = m.step(input{kind: inReloadGranted, seq: a.seq})
			if s, ok := has(acts, actSignal); !ok || s.sig != syscall.SIGHUP {
				t.Fatalf("granted: %v", kinds(acts))
			}
			if _, ok := has(acts, actStop); ok {
				t.Fatal("a signal template restarted")
			}
			if got := released(acts); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("signal sent without checks: released %v", got)
			}
		}},
		{"signal with checks: released once they pass after the signal", func(s *schema.Service) {
			coordTemplates("signal", 1)(s)
			withHTTPCheck(s)
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			m.step(passingHTTP())
			m.advance(time.Minute)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			acts := m.step(input{kind: inReloadGranted, seq: a.seq})
			if len(released(acts)) != 0 {
				t.Fatal("released on the status from before the signal")
			}
			m.advance(2 * time.Second)
			if got := released(m.step(input{kind: inTimer, timer: timerReload})); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("released %v", got)
			}
		}},
		{"env templates restart", func(s *schema.Service) {
			s.Templates = []*schema.Template{{Destination: "web.env", Env: true, ChangeMode: "restart", Coordinate: &schema.Coordinate{MaxParallel: 1}}}
		}, func(t *testing.T, m *machine) {
			d := dataState(true, "")
			d.Hashes = []string{"e0"}
			m.step(input{kind: inBoot, hasData: true, data: d})
			m.step(input{kind: inStarted, pid: 42, started: m.now})
			a := acquired(t, m.change([]string{"e1"}, 0))
			if _, ok := has(m.step(input{kind: inReloadGranted, seq: a.seq}), actStop); !ok {
				t.Fatal("env template: no restart")
			}
		}},
		{"a newer change while waiting: wait for the newest only", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			acts := m.change([]string{"h2", "p0"}, 0)
			b := acquired(t, acts)
			if got := released(acts); !slices.Equal(got, []uint64{a.seq}) || b.seq == a.seq || b.reload.Hash == a.reload.Hash {
				t.Fatalf("newer change: released %v, asked %+v after %+v", got, b, a)
			}
			// The older grant, had it raced in, is given back untouched.
			acts = m.step(input{kind: inReloadGranted, seq: a.seq})
			if _, ok := has(acts, actStop); ok || !slices.Equal(released(acts), []uint64{a.seq}) {
				t.Fatalf("stale grant: %v", kinds(acts))
			}
			if _, ok := has(m.step(input{kind: inReloadGranted, seq: b.seq}), actStop); !ok {
				t.Fatal("newest grant: no restart")
			}
		}},
		{"the same content again while waiting: one request", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			acquired(t, m.change([]string{"h1", "p0"}, 0))
			acts := m.change([]string{"h1", "p0"}, 0)
			if _, ok := has(acts, actAcquireReload); ok || len(released(acts)) != 0 {
				t.Fatalf("same hash: %v", kinds(acts))
			}
		}},
		{"only coordinated templates name the change", coordTemplates("signal", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			other := newMachine(t, testService(coordTemplates("signal", 1)))
			other.bootData(7)
			b := acquired(t, other.change([]string{"h1", "p9"}, 0))
			if a.reload.Hash != b.reload.Hash {
				t.Errorf("same coordinated output, other plain output: hashes %q and %q differ", a.reload.Hash, b.reload.Hash)
			}
			// Another max_parallel (files of another version): another
			// semaphore, which Consul would otherwise refuse.
			third := newMachine(t, testService(coordTemplates("signal", 2)))
			third.bootData(8)
			if c := acquired(t, third.change([]string{"h1", "p0"}, 0)); c.reload.Hash == a.reload.Hash {
				t.Errorf("limits 1 and 2 share the hash %q", c.reload.Hash)
			}
		}},
		{"an uncoordinated restart in the same change covers it", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			acts := m.change([]string{"h1", "p1"}, 0, 1)
			if _, ok := has(acts, actStop); !ok {
				t.Fatal("the plain template did not restart at once")
			}
			if _, ok := has(acts, actAcquireReload); ok {
				t.Fatal("asked for a token although the restart reads the new file")
			}
		}},
		{"a crash while waiting: the new process reads the new file", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}})
			acts := m.step(input{kind: inTimer, timer: timerStart})
			if _, ok := has(acts, actStart); !ok || !slices.Equal(released(acts), []uint64{a.seq}) {
				t.Fatalf("start after a crash: %v, released %v", kinds(acts), released(acts))
			}
		}},
		{"a health restart while waiting drops the request", func(s *schema.Service) {
			coordTemplates("restart", 1)(s)
			withHTTPCheck(s)
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			m.step(passingHTTP())
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.advance(time.Minute)
			acts := m.step(healthy(api.HealthCritical))
			if _, ok := has(acts, actStop); !ok || !slices.Equal(released(acts), []uint64{a.seq}) {
				t.Fatalf("health restart: %v, released %v", kinds(acts), released(acts))
			}
		}},
		{"a change while holding: asked for once the token is back", func(s *schema.Service) {
			coordTemplates("restart", 1)(s)
			withHTTPCheck(s)
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			m.step(passingHTTP())
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inReloadGranted, seq: a.seq})
			m.step(input{kind: inExited, pid: 42})
			m.step(input{kind: inStarted, pid: 43, started: m.now})
			acts := m.change([]string{"h2", "p0"}, 0)
			if _, ok := has(acts, actAcquireReload); ok || len(released(acts)) != 0 {
				t.Fatalf("a second token while holding one: %v", kinds(acts))
			}
			m.advance(2 * time.Second)
			acts = m.step(input{kind: inTimer, timer: timerReload})
			b := acquired(t, acts)
			if !slices.Equal(released(acts), []uint64{a.seq}) || b.reload.Hash == a.reload.Hash {
				t.Fatalf("after the first reload: released %v, asked %+v", released(acts), b.reload)
			}
		}},
		{"shutdown while waiting or holding gives the token back", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			if got := released(m.step(input{kind: inStop})); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("stop while waiting: released %v", got)
			}
			m2 := newMachine(t, testService(func(s *schema.Service) { coordTemplates("restart", 1)(s); withHTTPCheck(s) }))
			m2.bootData(42)
			b := acquired(t, m2.change([]string{"h1", "p0"}, 0))
			m2.step(input{kind: inReloadGranted, seq: b.seq})
			m2.step(input{kind: inExited, pid: 42})
			m2.step(input{kind: inStarted, pid: 43, started: m2.now})
			if got := released(m2.step(input{kind: inStop})); !slices.Equal(got, []uint64{b.seq}) {
				t.Fatalf("stop while holding: released %v", got)
			}
		}},
		{"failing after the reload gives the token back", func(s *schema.Service) {
			coordTemplates("restart", 1)(s)
			s.Restart.Attempts, s.Restart.Delay = 1, 0
		}, func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inReloadGranted, seq: a.seq})
			acts := m.step(input{kind: inExited, pid: 42})
			if _, ok := has(acts, actStart); !ok {
				t.Fatalf("no start after the reload's stop: %v", kinds(acts))
			}
			// The new process exits at once, twice: restarts exhausted.
			m.step(input{kind: inStartFailed, err: errors.New("bad config")})
			m.step(input{kind: inTimer, timer: timerStart})
			acts = m.step(input{kind: inStartFailed, err: errors.New("bad config")})
			if m.s.state != StateFailed || !slices.Equal(released(acts), []uint64{a.seq}) {
				t.Fatalf("failed: state %s, released %v", m.s.state, released(acts))
			}
		}},
		{"in a count slot: the slot's unit and session", coordTemplates("restart", 3), func(t *testing.T, m *machine) {
			m.s.slot = &SlotInfo{Unit: "shop", Index: 2, Key: "mariposa/slots/shop/2", Session: "s1", Term: 7}
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			if a.reload.Unit != "shop" || a.reload.Session != "s1" || a.reload.Slot == nil || a.reload.Slot.Index != 2 || a.reload.Limit != 3 {
				t.Fatalf("request %+v", a.reload)
			}
			if got := released(m.step(input{kind: inSlotLost, why: "key released"})); !slices.Equal(got, []uint64{a.seq}) {
				t.Fatalf("slot lost while waiting: released %v", got)
			}
		}},
		{"without a gate: at once, as without coordinate", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.s.ungated = true
			m.bootData(42)
			acts := m.change([]string{"h1", "p0"}, 0)
			if _, ok := has(acts, actStop); !ok {
				t.Fatalf("ungated change: %v, want a restart", kinds(acts))
			}
			if _, ok := has(acts, actAcquireReload); ok {
				t.Fatal("asked for a token without a gate")
			}
		}},
		{"a grant while not running: nothing to reload", coordTemplates("restart", 1), func(t *testing.T, m *machine) {
			m.bootData(42)
			a := acquired(t, m.change([]string{"h1", "p0"}, 0))
			m.step(input{kind: inExited, pid: 42, exit: proc.Exit{Code: 1}}) // backoff
			acts := m.step(input{kind: inReloadGranted, seq: a.seq})
			if _, ok := has(acts, actStart); ok || !slices.Equal(released(acts), []uint64{a.seq}) {
				t.Fatalf("grant in backoff: %v, released %v", kinds(acts), released(acts))
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newMachine(t, testService(tt.mod)))
		})
	}
}

// fakeGate grants when told to, and counts releases.
type fakeGate struct {
	mu       sync.Mutex
	reqs     []ReloadRequest
	grant    chan struct{}
	fail     int // the first fail calls fail
	released int
}

func (g *fakeGate) Acquire(ctx context.Context, req ReloadRequest) (func(), error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	fail := g.fail > 0
	g.fail--
	g.mu.Unlock()
	if fail {
		return nil, errors.New("no leader")
	}
	select {
	case <-g.grant:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { g.mu.Lock(); g.released++; g.mu.Unlock() }) }, nil
}

func (g *fakeGate) count() (reqs, released int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.reqs), g.released
}

// The loop's side: a request goes to the gate off the loop (retried after
// an error), its grant comes back as an input, a release or a cancel
// reaches the gate, and a grant no longer wanted is given back at once.
func TestReloadLoopGate(t *testing.T) {
	g := &fakeGate{grant: make(chan struct{}), fail: 1}
	in := &Instance{gate: g, log: hclog.NewNullLogger()}
	l := &loop{in: in, reloads: map[uint64]*reloadHold{}, granted: make(chan reloadGrant)}
	l.acquireReload(1, ReloadRequest{Service: "web", Hash: "h", Limit: 1})
	g.grant <- struct{}{} // after the first attempt's error and the retry
	gr := <-l.granted
	if gr.seq != 1 {
		t.Fatalf("grant %+v", gr)
	}
	l.reloads[1].release = gr.release
	l.releaseReload(1)
	waitFor(t, "the release", 5*time.Second, func() bool { _, r := g.count(); return r == 1 })
	if n, _ := g.count(); n != 2 {
		t.Errorf("%d attempts, want 2 (one failed)", n)
	}

	// Cancelled while waiting: the gate's Acquire ends, nothing is held.
	l.acquireReload(2, ReloadRequest{Service: "web", Hash: "h2", Limit: 1})
	waitFor(t, "the second request", 5*time.Second, func() bool { n, _ := g.count(); return n == 3 })
	l.releaseReload(2)
	select {
	case g.grant <- struct{}{}:
		t.Fatal("a cancelled request still waited at the gate")
	case <-time.After(100 * time.Millisecond):
	}

	// No gate (never asked: see "without a gate"): granted at once.
	l2 := &loop{in: &Instance{}, reloads: map[uint64]*reloadHold{}}
	l2.acquireReload(5, ReloadRequest{})
	if len(l2.queue) != 1 || l2.queue[0].kind != inReloadGranted || l2.queue[0].seq != 5 {
		t.Fatalf("no gate: queue %+v", l2.queue)
	}
	l2.releaseReload(5)
}
