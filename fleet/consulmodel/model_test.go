package consulmodel

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T, nodes ...string) *Store {
	t.Helper()
	s := New()
	for _, n := range nodes {
		if err := s.RegisterNode(n, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func mustSession(t *testing.T, s *Store, now time.Time, spec SessionSpec) string {
	t.Helper()
	id, err := s.CreateSession(now, spec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func lock(t *testing.T, s *Store, now time.Time, key, sess string) TxnResult {
	t.Helper()
	r, err := s.KVTxn(now, api.KVTxnOps{{Verb: api.KVLock, Key: key, Session: sess}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A node's serfHealth going critical invalidates its sessions in the same
// write: their keys are released and stay unlockable for the lock delay.
func TestCheckCriticalReleasesWithLockDelay(t *testing.T) {
	s := newStore(t, "n1", "n2")
	a := mustSession(t, s, t0, SessionSpec{Node: "n1", LockDelay: time.Second})
	b := mustSession(t, s, t0, SessionSpec{Node: "n2", LockDelay: time.Second})
	if r := lock(t, s, t0, "slots/web/0", a); !r.OK {
		t.Fatalf("lock: %v", r.Errors)
	}
	s.TakeCommits()
	before := s.Stats().RaftWrites
	now := t0.Add(5 * time.Second)
	if err := s.SetCheck(now, "n1", "serfHealth", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().RaftWrites - before; got != 1 {
		t.Errorf("raft writes for the check and the invalidation: %d, want 1", got)
	}
	e, _, _ := s.Get("slots/web/0", false)
	if e.Session != "" || e.LockIndex != 1 {
		t.Errorf("after invalidation: %+v", e)
	}
	cs := s.TakeCommits()
	if len(cs) != 1 || len(cs[0].Keys) != 1 || cs[0].Keys[0] != "slots/web/0" || cs[0].Index != e.ModifyIndex {
		t.Errorf("commits: %+v", cs)
	}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{999 * time.Millisecond, false}, {time.Second, true}} {
		r := lock(t, s, now.Add(tc.at), "slots/web/0", b)
		if r.OK != tc.want {
			t.Errorf("lock %v after invalidation: ok=%v want %v (%v)", tc.at, r.OK, tc.want, r.Errors)
		}
		if !tc.want && (r.Index != 0 || !strings.Contains(r.Errors[0].What, "lock delay")) {
			t.Errorf("a lock-delay refusal is not a Raft write: %+v", r)
		}
	}
	if _, err := s.CreateSession(now, SessionSpec{Node: "n1"}); err == nil || !strings.Contains(err.Error(), "critical") {
		t.Errorf("session on a critical check: %v", err)
	}
}

// A TTL session expires at 2 x TTL after its last renewal; without a
// leader nothing expires, and a new leader re-arms every timer.
func TestSessionTTLAndElections(t *testing.T) {
	s := newStore(t, "n1")
	id := mustSession(t, s, t0, SessionSpec{Node: "n1", TTL: 10 * time.Second, Behavior: api.SessionBehaviorDelete})
	lock(t, s, t0, "k", id)
	if got := s.NextSessionExpiry(); !got.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("expiry %v", got)
	}
	if ok, _ := s.RenewSession(t0.Add(15*time.Second), id); !ok {
		t.Fatal("renew")
	}
	if gone := s.ExpireSessions(t0.Add(34 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	s.LoseLeader()
	if _, err := s.KVTxn(t0.Add(36*time.Second), api.KVTxnOps{{Verb: api.KVSet, Key: "x"}}); err != ErrNoLeader {
		t.Errorf("write without a leader: %v", err)
	}
	if _, _, err := s.Get("k", false); err != ErrNoLeader {
		t.Errorf("consistent read without a leader: %v", err)
	}
	if e, _, err := s.Get("k", true); err != nil || e == nil || e.Session != id {
		t.Errorf("stale read without a leader: %+v %v", e, err)
	}
	if gone := s.ExpireSessions(t0.Add(40 * time.Second)); len(gone) != 0 {
		t.Errorf("expired without a leader: %v", gone)
	}
	s.ElectLeader(t0.Add(42 * time.Second))
	if gone := s.ExpireSessions(t0.Add(61 * time.Second)); len(gone) != 0 {
		t.Errorf("the new leader did not re-arm the timer: %v", gone)
	}
	if gone := s.ExpireSessions(t0.Add(62 * time.Second)); len(gone) != 1 {
		t.Errorf("not expired at the re-armed deadline: %v", gone)
	}
	if e, _, _ := s.Get("k", false); e != nil {
		t.Errorf("behavior delete kept the key: %+v", e)
	}
}

func TestTxnLimitsAndReadOnly(t *testing.T) {
	s := newStore(t, "n1")
	ops := make(api.KVTxnOps, MaxTxnOps+1)
	for i := range ops {
		ops[i] = &api.KVTxnOp{Verb: api.KVSet, Key: "k"}
	}
	if _, err := s.KVTxn(t0, ops); err == nil {
		t.Error("a transaction over the limit was accepted")
	}
	before := s.Stats().RaftWrites
	r, err := s.KVTxn(t0, api.KVTxnOps{{Verb: api.KVGetTree, Key: "a/"}, {Verb: api.KVCheckNotExists, Key: "a/b"}})
	if err != nil || !r.OK || r.Index != 0 || s.Stats().RaftWrites != before {
		t.Errorf("read-only txn: %+v %v, raft writes %d -> %d", r, err, before, s.Stats().RaftWrites)
	}
	r, _ = s.KVTxn(t0, api.KVTxnOps{{Verb: api.KVSet, Key: "a/b"}, {Verb: api.KVCheckIndex, Key: "a/c", Index: 1}})
	if r.OK || r.Index == 0 || s.Stats().RaftWrites != before+1 {
		t.Errorf("a failed write txn uses a Raft index and changes nothing: %+v", r)
	}
	if e, _, _ := s.Get("a/b", false); e != nil {
		t.Errorf("failed txn wrote: %+v", e)
	}
}

func TestHealthService(t *testing.T) {
	s := newStore(t, "n1", "n2")
	for _, n := range []string{"n1", "n2"} {
		if err := s.RegisterService(ServiceInstance{Node: n, ID: "mariposa-" + n, Service: "mariposa",
			Meta: map[string]string{"fleet": "true"}}, map[string]string{"mariposa-" + n + ":alive": api.HealthPassing}); err != nil {
			t.Fatal(err)
		}
	}
	es, idx, _ := s.HealthService("mariposa", true, false)
	if len(es) != 2 {
		t.Fatalf("passing: %+v", es)
	}
	s.TakeCommits()
	if err := s.SetCheck(t0, "n2", "serfHealth", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	es, idx2, _ := s.HealthService("mariposa", true, false)
	if len(es) != 1 || es[0].Instance.Node != "n1" || idx2 <= idx {
		t.Errorf("after n2's node check went critical: %+v, index %d -> %d", es, idx, idx2)
	}
	if cs := s.TakeCommits(); len(cs) != 1 || len(cs[0].Services) != 1 || cs[0].Services[0] != "mariposa" {
		t.Errorf("commits: %+v", cs)
	}
	all, _, _ := s.HealthService("mariposa", false, false)
	if len(all) != 2 || all[1].Status != api.HealthCritical {
		t.Errorf("all: %+v", all)
	}
}

// The same calls give the same store: session IDs, indexes and commits
// are deterministic.
func TestDeterministic(t *testing.T) {
	run := func() []Commit {
		s := newStore(t, "n1")
		id := mustSession(t, s, t0, SessionSpec{Node: "n1"})
		lock(t, s, t0, "a", id)
		_, _ = s.Put(t0, "b", []byte("v"), 0)
		_ = s.DestroySession(t0, id)
		return s.TakeCommits()
	}
	a, b := run(), run()
	if len(a) != len(b) {
		t.Fatalf("%v vs %v", a, b)
	}
	for i := range a {
		if a[i].Index != b[i].Index || strings.Join(a[i].Keys, ",") != strings.Join(b[i].Keys, ",") {
			t.Errorf("commit %d: %+v vs %+v", i, a[i], b[i])
		}
	}
}
