package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// TestUnitKeysApartFromDeployments: a unit named like its deployment (the
// common case) has its record, statuses and tokens under a prefix that
// holds none of the deployment's keys, nor rollout/'s (RolloutPrefix): a
// watch on the unit's prefix never receives a spec.
func TestUnitKeysApartFromDeployments(t *testing.T) {
	prefix := UnitDeployPrefix("web")
	for _, k := range []string{RecordKey("web"), UnitStatusKey("web", 2), TokenKey("web", 0)} {
		if !strings.HasPrefix(k, prefix) {
			t.Errorf("%s is not under %s", k, prefix)
		}
	}
	for _, k := range []string{SpecKey("web", 1), DesiredKey("web"), StateKey("web", 1),
		rolloutFailedKey("web", "abc"), RolloutPrefix + "web/reload/abc/tokens", SlotKey("web", 0), StatusKey("web", 0)} {
		if strings.HasPrefix(k, prefix) {
			t.Errorf("%s is under the unit's deployment prefix %s", k, prefix)
		}
	}
	for _, c := range []struct {
		key, kind string
		n         int
		ok        bool
	}{
		{RecordKey("web"), UnitKeyRecord, 0, true},
		{UnitStatusKey("web", 3), UnitKeyStatus, 3, true},
		{TokenKey("web", 1), UnitKeyToken, 1, true},
		{prefix + "status/x", "", 0, false},
		{prefix + "status/01", "", 0, false},
		{prefix + "other", "", 0, false},
		{RecordKey("web2"), "", 0, false},
	} {
		kind, n, ok := ParseUnitDeployKey("web", c.key)
		if kind != c.kind || n != c.n || ok != c.ok {
			t.Errorf("ParseUnitDeployKey(%s) = %q %d %v, want %q %d %v", c.key, kind, n, ok, c.kind, c.n, c.ok)
		}
	}
}

func TestNextRecord(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	unit := func(version string, maxPar int) UnitSpec {
		sp := depSpec(1, version, 3, 1, true)
		sp.Services[0].Placement.Update.MaxParallel = maxPar
		return sp.Units()[0]
	}
	v1, v2 := unit("v1", 1), unit("v2", 1)
	wantUpdate := UpdateBlock{MaxParallel: 1, AutoPromote: true, AutoRevert: true, MinHealthyTime: time.Second, HealthyDeadline: time.Minute, ProgressDeadline: 10 * time.Minute}
	for _, c := range []struct {
		name     string
		prev     *UnitRecord
		prevUnit *UnitSpec
		u        UnitSpec
		canaries int
		want     UnitRecord
	}{
		{"first deployment", nil, nil, v1, 0,
			UnitRecord{N: 1, Version: "shop/1", Status: DeployRunning, Spec: "shop/1", Update: wantUpdate}},
		{"changed after a success: canaries, stable", &UnitRecord{N: 4, Version: "shop/1", Status: DeploySuccessful, Stable: "shop/1"}, &v1, v2, 1,
			UnitRecord{N: 5, Version: "shop/2", From: "shop/1", Stable: "shop/1", Status: DeployRunning, Canaries: 1, Spec: "shop/2", Update: wantUpdate}},
		{"unchanged: keeps its version, no canaries", &UnitRecord{N: 4, Version: "shop/1", Status: DeploySuccessful, Stable: "shop/1"}, &v1, v1, 0,
			UnitRecord{N: 5, Version: "shop/1", From: "shop/1", Stable: "shop/1", Status: DeployRunning, Spec: "shop/2", Update: wantUpdate}},
		{"supersedes a running one", &UnitRecord{N: 5, Version: "shop/2", From: "shop/1", Stable: "shop/1", Status: DeployRunning}, &v2, v1, 0,
			UnitRecord{N: 6, Version: "shop/2", From: "shop/2", Stable: "shop/1", Status: DeployRunning, Spec: "shop/2", Update: wantUpdate,
				Ended: &RecordOutcome{N: 5, Version: "shop/2", Status: DeployCancelled, Reason: "superseded by shop/2"}}},
		{"after a failure: from stable, moves even if unchanged", &UnitRecord{N: 5, Version: "shop/2", Stable: "shop/1", Status: DeployFailed}, &v2, v2, 0,
			UnitRecord{N: 6, Version: "shop/2", From: "shop/1", Stable: "shop/1", Status: DeployRunning, Spec: "shop/2", Update: wantUpdate}},
		{"max_parallel 0: the count at once", nil, nil, unit("v1", 0), 0,
			UnitRecord{N: 1, Version: "shop/1", Status: DeployRunning, Spec: "shop/1",
				Update: UpdateBlock{MaxParallel: 3, AutoPromote: true, AutoRevert: true, MinHealthyTime: time.Second, HealthyDeadline: time.Minute, ProgressDeadline: 10 * time.Minute}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := uint64(1)
			if c.prev != nil {
				n = 2
			}
			c.want.Started, c.want.Count = t0, 3 // the count the judge counts by
			got := NextRecord("shop", n, c.prev, c.prevUnit, c.u, c.canaries, t0)
			if string(got.Encode()) != string(c.want.Encode()) {
				t.Errorf("got  %s\nwant %s", got.Encode(), c.want.Encode())
			}
		})
	}
	// Canaries only for the units whose definition changed (canaries()).
	prev, next := depSpec(1, "v1", 3, 1, false), depSpec(2, "v2", 3, 1, false)
	next.Services = append(next.Services, &schema.Service{Name: "db", Command: []string{"db"},
		Placement: &schema.Placement{Count: 2, Update: schema.Update{MaxParallel: 1, Canary: 1}}})
	prev.Services = append(prev.Services, next.Services[1])
	if got := canaries(prev, next); len(got) != 1 || got["web"] != 1 {
		t.Errorf("canaries = %v, want web only", got)
	}
}

func TestRecordsOutcome(t *testing.T) {
	rec := func(spec, status string, mut func(*UnitRecord)) *UnitRecord {
		r := &UnitRecord{Spec: spec, Status: status, Version: spec}
		if mut != nil {
			mut(r)
		}
		return r
	}
	units := []string{"web", "db"}
	for _, c := range []struct {
		name   string
		recs   map[string]*UnitRecord
		status string
		ok     bool
	}{
		{"no records (an older deploy)", nil, "", false},
		{"one missing", map[string]*UnitRecord{"web": rec("shop/2", DeploySuccessful, nil)}, "", false},
		{"all successful", map[string]*UnitRecord{"web": rec("shop/2", DeploySuccessful, nil), "db": rec("shop/2", DeploySuccessful, nil)}, DeploySuccessful, true},
		{"running while any runs", map[string]*UnitRecord{"web": rec("shop/2", DeploySuccessful, nil), "db": rec("shop/2", DeployRunning, nil)}, DeployRunning, true},
		{"failed if any failed", map[string]*UnitRecord{"web": rec("shop/2", DeployFailed, nil), "db": rec("shop/2", DeployRunning, nil)}, DeployFailed, true},
		{"a revert is a failure", map[string]*UnitRecord{"web": rec("shop/2", DeploySuccessful, nil),
			"db": rec("shop/2", DeployRunning, func(r *UnitRecord) { r.RevertOf, r.Version = 3, "shop/1" })}, DeployFailed, true},
		{"superseded by a newer spec", map[string]*UnitRecord{"web": rec("shop/3", DeployRunning, nil), "db": rec("shop/2", DeploySuccessful, nil)}, DeployCancelled, true},
		{"an older spec's record", map[string]*UnitRecord{"web": rec("shop/1", DeploySuccessful, nil), "db": rec("shop/2", DeploySuccessful, nil)}, "", false},
	} {
		status, _, ok := RecordsOutcome("shop/2", units, c.recs)
		if status != c.status || ok != c.ok {
			t.Errorf("%s: %q %v, want %q %v", c.name, status, ok, c.status, c.ok)
		}
	}
	if s, _, ok := RecordsOutcome("shop/2", nil, nil); s != DeploySuccessful || !ok {
		t.Errorf("no units (a stop): %q %v", s, ok)
	}
	// Effective: whichever moved, the state or the records, says it.
	sp := depSpec(2, "v2", 3, 0, false)
	running := DeployState{N: 2, Status: DeployRunning}
	if st := Effective(running, sp, map[string]*UnitRecord{"web": rec("shop/2", DeploySuccessful, nil)}); st.Status != DeploySuccessful {
		t.Errorf("records moved: %s", st.Status)
	}
	if st := Effective(DeployState{N: 2, Status: DeployFailed}, sp, map[string]*UnitRecord{"web": rec("shop/2", DeployRunning, nil)}); st.Status != DeployFailed {
		t.Errorf("state moved: %s", st.Status)
	}
	if st := Effective(running, sp, map[string]*UnitRecord{"web": rec("shop/2", DeployRunning, nil)}); st.Status != DeployRunning {
		t.Errorf("neither moved: %s", st.Status)
	}
}

func TestUnitOf(t *testing.T) {
	sp := depSpec(3, "v3", 2, 0, false)
	b, _ := sp.Encode()
	key, err := VersionSpecKey("shop/3")
	if err != nil || key != SpecKey("shop", 3) {
		t.Fatalf("VersionSpecKey: %s %v", key, err)
	}
	u, err := UnitOf("shop/3", b, "web")
	if err != nil || u.Unit.Name != "web" || u.Services[0].Command[1] != "v3" {
		t.Fatalf("UnitOf: %+v %v", u, err)
	}
	for _, c := range []struct{ version, unit, want string }{
		{"shop/2", "web", "holds spec shop/3"},
		{"shop/3", "db", `has no unit "db"`},
		{"shop", "web", "not <deployment>/<n>"},
		{"shop/0", "web", "n must be a spec number from 1"},
		{"shop/x", "web", "n must be"},
	} {
		if _, err := UnitOf(c.version, b, c.unit); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("UnitOf(%s, %s) = %v, want %q", c.version, c.unit, err, c.want)
		}
	}
	if _, err := UnitOf("shop/3", nil, "web"); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("missing spec: %v", err)
	}
}

// TestDeployWritesRecords: on a real Consul agent, deploy writes each
// unit's record in its transaction; a deployment the step machine ended
// in the records (its state still running: nothing moves the state under
// the agent) does not make the next deploy need -force; an unchanged unit
// keeps its version; promote ends the records' canary phase; ReadState
// tells the records' outcome; a stop deletes the records; a record moved
// since it was read fails the deploy's transaction.
func TestDeployWritesRecords(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	two := func(n uint64, version string) *Spec {
		sp := depSpec(n, version, 2, 1, false)
		sp.Services = append(sp.Services, &schema.Service{Name: "db", Command: []string{"db"},
			Placement: &schema.Placement{Count: 1, Update: schema.Update{MaxParallel: 1}}})
		return sp
	}
	read := func(unit string) (*UnitRecord, uint64) {
		t.Helper()
		p, _, err := c.KV().Get(RecordKey(unit), nil)
		if err != nil || p == nil {
			t.Fatalf("record of %s: %v %v", unit, p, err)
		}
		r, err := DecodeUnitRecord(p.Value)
		if err != nil {
			t.Fatal(err)
		}
		return r, p.ModifyIndex
	}
	judge := func(unit, status string) {
		t.Helper()
		r, idx := read(unit)
		r.Status = status
		if ok, _, err := c.KV().CAS(&api.KVPair{Key: RecordKey(unit), Value: r.Encode(), ModifyIndex: idx}, nil); err != nil || !ok {
			t.Fatalf("judge %s: %v %v", unit, ok, err)
		}
	}
	if _, err := Deploy(c, two(0, "v1"), DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := read("web"); r.Version != "shop/1" || r.Spec != "shop/1" || r.Status != DeployRunning {
		t.Fatalf("web after deploy 1: %+v", r)
	}
	judge("web", DeploySuccessful)
	judge("db", DeploySuccessful)
	st, err := ReadState(c)
	if err != nil || len(st.Deployments) != 1 || st.Deployments[0].State.Status != DeploySuccessful {
		t.Fatalf("status after the judges: %+v %v", st, err)
	}
	// Spec 2 changes web only: the state of spec 1 still says running,
	// the records say successful: no -force needed.
	res, err := Deploy(c, two(0, "v2"), DeployOptions{By: "test"})
	if err != nil || res.N != 2 || res.Canaries["web"] != 1 {
		t.Fatalf("deploy 2: %+v %v", res, err)
	}
	web, _ := read("web")
	db, _ := read("db")
	if web.Version != "shop/2" || web.From != "shop/1" || web.Stable != "shop/1" || web.Canaries != 1 || web.Promoted {
		t.Fatalf("web after deploy 2: %+v", web)
	}
	if db.Version != "shop/1" || db.Spec != "shop/2" || db.Canaries != 0 {
		t.Fatalf("db after deploy 2 (unchanged): %+v", db)
	}
	// A judge moves a record between the deploy's reads and its
	// transaction: the deploy is refused and writes nothing (its spec key
	// goes again, so that the next deploy can write spec 3).
	deployTxnHook = func() { judge("db", DeploySuccessful) }
	_, err = Deploy(c, two(0, "v2b"), DeployOptions{By: "test", Force: true})
	deployTxnHook = nil
	if err == nil || !strings.Contains(err.Error(), "changed while it was being deployed") {
		t.Fatalf("deploy over a moving record: %v", err)
	}
	if p, _, _ := c.KV().Get(SpecKey("shop", 3), nil); p != nil {
		t.Fatal("a refused deploy left its spec key")
	}
	if sp, _ := DesiredSpec(c, "shop"); sp == nil || sp.N != 2 {
		t.Fatalf("desired after the refused deploy: %+v", sp)
	}
	if n, err := Promote(c, "shop", "test"); err != nil || n != 2 {
		t.Fatalf("promote: %d %v", n, err)
	}
	if web, _ = read("web"); !web.Promoted {
		t.Fatalf("web after promote: %+v", web)
	}
	// A judge's move between the deploy's read and its transaction: the
	// check-index on the record refuses it (the next read sees it).
	_, idx := read("web")
	ops := recordOps(two(3, "v3"), two(2, "v2"), map[string]*api.KVPair{"web": {ModifyIndex: idx - 1}, "db": {ModifyIndex: idx}}, nil, nil, time.Now())
	if ok, _, _, err := c.Txn().Txn(ops, nil); err != nil || ok {
		t.Fatalf("a stale record was overwritten: %v %v", ok, err)
	}
	// A stop: no units, no records.
	stop := &Spec{Format: SpecFormat, Name: "shop", Hash: "empty"}
	if _, err := Deploy(c, stop, DeployOptions{By: "test", Stop: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	if keys, _, _ := c.KV().Keys(UnitsPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("records after the stop: %v", keys)
	}
	// What a node runs for a version: spec 2's web, one read.
	if u, err := ReadUnitAt(c, web.Version, "web"); err != nil || u.Services[0].Command[1] != "v2" {
		t.Fatalf("ReadUnitAt(%s): %+v %v", web.Version, u, err)
	}
	if _, err := ReadUnitAt(c, "shop/9", "web"); err == nil || !strings.Contains(err.Error(), "mariposa/deploy/shop/spec/9 is missing") {
		t.Fatalf("ReadUnitAt of a missing spec: %v", err)
	}
}

// TestDeployTooManyUnits: the units' records go in the deploy's one
// transaction, and Consul takes at most 128 operations: a spec too big
// for it (63 units: 3 + 2×63 + the audit = 130) is refused with a clear
// error before anything is written, its spec key included; the largest
// one that fits (62: 128) is deployed whole (a real agent checks the count).
func TestDeployTooManyUnits(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	spec := func(name string, units int) *Spec {
		sp := &Spec{Format: SpecFormat, Name: name, Hash: name}
		for i := range units {
			sp.Services = append(sp.Services, &schema.Service{Name: fmt.Sprintf("%s%d", name, i), Command: []string{"x"},
				Placement: &schema.Placement{Count: 1, Update: schema.Update{MaxParallel: 1}}})
		}
		return sp
	}
	if _, err := Deploy(c, spec("big", 63), DeployOptions{By: "test"}); err == nil || !strings.Contains(err.Error(), "takes 130 operations in one transaction (its units' records with it), and Consul takes at most 128: split it into smaller deployments; nothing was deployed") {
		t.Fatalf("63 units: %v", err)
	}
	if keys, _, _ := c.KV().Keys(Prefix, "", nil); len(keys) != 0 {
		t.Fatalf("a refused deploy wrote %v", keys)
	}
	if _, err := Deploy(c, spec("fits", 62), DeployOptions{By: "test"}); err != nil {
		t.Fatalf("62 units: %v", err)
	}
	if keys, _, _ := c.KV().Keys(UnitsPrefix, "", nil); len(keys) != 62 {
		t.Fatalf("%d records, want 62", len(keys))
	}
}
