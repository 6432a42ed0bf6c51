package supervisor

import (
	"testing"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// LeaderTermEvents drives decide through a standby leader's two ends of a
// term, as the instance loop feeds it, and returns the events decide emits
// in their order, for the event consumers' tests (supervisor_test):
//
//	"resigned": the term won, the process exits until its restarts are
//	  exhausted, the instance resigns (stops contending) and the elector then
//	  reports the term's end;
//	"lost": the term won and the process running, the lock's session goes.
func LeaderTermEvents(t *testing.T) map[string][]Event {
	events := func(acts []action) []Event {
		var out []Event
		for _, a := range acts {
			if a.kind == actEmit {
				out = append(out, a.ev)
			}
		}
		return out
	}
	out := map[string][]Event{}

	m := newMachine(t, testService(func(s *schema.Service) { standbyService(s); s.Restart.Attempts = 1; s.Restart.Delay = 0 }))
	var evs []Event
	for _, in := range []input{
		{kind: inBoot},
		{kind: inTermGained, term: termInfo{Key: "k"}},
		{kind: inStarted, pid: 1, started: m.now},
		{kind: inExited, pid: 1, exit: proc.Exit{Code: 1}},
		{kind: inStarted, pid: 2, started: m.now},
		{kind: inExited, pid: 2, exit: proc.Exit{Code: 1}},
	} {
		evs = append(evs, events(m.step(in))...)
	}
	if _, ok := has(m.acts, actStopElecting); !ok {
		t.Fatalf("the exhausted leader did not stop contending: %v", kinds(m.acts))
	}
	// What the elector reports once it stopped: the term ended.
	evs = append(evs, events(m.step(input{kind: inTermLost, why: "stopped contending"}))...)
	out["resigned"] = evs

	m = newMachine(t, testService(standbyService))
	evs = nil
	for _, in := range []input{
		{kind: inBoot},
		{kind: inTermGained, term: termInfo{Key: "k"}},
		{kind: inStarted, pid: 1, started: m.now},
		{kind: inTermLost, why: "session invalidated"},
	} {
		evs = append(evs, events(m.step(in))...)
	}
	out["lost"] = evs
	return out
}
