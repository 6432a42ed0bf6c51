package command

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	fagent "github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/report"
)

// TestDeployWaitDoc: deploy -wait, with the test playing the fleet (slot
// keys held by a session, with the version and health the holders
// publish; the state transitions the fleet's judge writes, and the unit's
// record as the step machine's judge moves it: fleet/agent.Judge), prints what
// website/commands/deploy.md shows and exits as it says: 0 successful, 2
// failed with the revert named; a deploy over a running deployment is
// refused and changes nothing; promote of a deployment without canaries
// is refused.
func TestDeployWaitDoc(t *testing.T) {
	b, err := os.ReadFile("../website/commands/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	fleetNodes(t, c, 6) // what deploy's fit check counts; the test plays the fleet
	t.Chdir(t.TempDir())
	consul := []string{"-consul-addr", agent.HTTPAddr()}
	hash := regexp.MustCompile(`\b[0-9a-f]{24}\b|\b[0-9a-f]{8}…`)
	norm := func(s string) string { return hash.ReplaceAllString(strings.TrimSpace(s), "HASH") }
	shown := func(cmd string, nth int) string {
		t.Helper()
		parts := strings.Split(page, "```text\n$ "+cmd+"\n")
		if len(parts) <= nth {
			t.Fatalf("deploy.md has no %d. example of %q", nth, cmd)
		}
		return norm(parts[nth][:strings.Index(parts[nth], "```")])
	}
	write := func(version string) {
		t.Helper()
		body := `service "web" {
  command = ["web", "` + version + `"]
  count   = 3

  update {
    max_parallel = 1
    auto_revert  = true
  }
}
`
		if err := os.WriteFile("web.hcl", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		code     int
		out, err string
	}
	start := func(args ...string) (*cli.MockUi, chan result) {
		ui := cli.NewMockUi()
		done := make(chan result, 1)
		go func() {
			code := (&DeployCommand{UI: ui}).Run(append(append(consul, args...), "web.hcl"))
			done <- result{code, ui.OutputWriter.String(), ui.ErrorWriter.String()}
		}()
		return ui, done
	}
	waitOut := func(ui *cli.MockUi, want string) {
		t.Helper()
		if !consultest.WaitFor(10*time.Second, func() bool { return strings.Contains(ui.OutputWriter.String(), want) }) {
			t.Fatalf("deploy -wait never printed %q:\n%s", want, ui.OutputWriter.String())
		}
	}
	sess, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: "release"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	holdSlot := func(k int, version string, healthy bool) {
		t.Helper()
		v := cluster.SlotValue{Node: "n1", State: cluster.SlotHeld, Since: time.Now(), Version: version}
		if healthy {
			now := time.Now()
			v.HealthyAt = &now
		}
		b, _ := json.Marshal(v)
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cluster.SlotKey("web", k), Value: b, Session: sess}, nil); !ok || err != nil {
			t.Fatalf("slot %d: %v %v", k, ok, err)
		}
	}
	setState := func(n uint64, mut func(*cluster.DeployState)) {
		t.Helper()
		st, err := cluster.ReadDeployState(c, "web", n)
		if err != nil || st == nil {
			t.Fatalf("state %d: %v", n, err)
		}
		mut(st)
		b, _ := json.Marshal(st)
		if _, err := c.KV().Put(&api.KVPair{Key: cluster.StateKey("web", n), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}

	// judge moves the unit's record as the step machine's judge (the holder
	// of slot 0) does: agent.Judge on the holders' statuses, written with
	// check-index on the record.
	judge := func(status map[int]fagent.Status) {
		t.Helper()
		p, _, err := c.KV().Get(cluster.RecordKey("web"), nil)
		if err != nil || p == nil {
			t.Fatalf("web's record: %v", err)
		}
		rec, err := cluster.DecodeUnitRecord(p.Value)
		if err != nil {
			t.Fatal(err)
		}
		for k, st := range status {
			st.Version = rec.Version
			status[k] = st
		}
		next, what := fagent.Judge(rec, 3, status, time.Now(), true)
		if next == nil {
			t.Fatalf("the judge decides nothing on %+v", rec)
		}
		if ok, _, err := c.KV().CAS(&api.KVPair{Key: cluster.RecordKey("web"), Value: next.Encode(), ModifyIndex: p.ModifyIndex}, nil); !ok || err != nil {
			t.Fatalf("%s: %v %v", what, ok, err)
		}
	}
	allHealthy := func() map[int]fagent.Status {
		now := time.Now()
		m := map[int]fagent.Status{}
		for k := range 3 {
			m[k] = fagent.Status{HoldStatus: cluster.HoldStatus{HealthyAt: &now}}
		}
		return m
	}

	// Spec 1, successful: the fleet runs it.
	write("v1")
	if _, done := start("-name", "web"); (<-done).code != 0 {
		t.Fatal("deploy v1")
	}
	sp1, _ := cluster.DesiredSpec(c, "web")
	for k := range 3 {
		holdSlot(k, cluster.VersionOf(sp1, "web"), true)
	}
	setState(1, func(st *cluster.DeployState) { st.Status = cluster.DeploySuccessful })
	judge(allHealthy())

	// Spec 2 rolls out, one instance after the other.
	write("v2")
	ui, done := start("-name", "web", "-wait")
	waitOut(ui, "running: web 0/3 healthy")
	sp2, _ := cluster.DesiredSpec(c, "web")
	for k := range 3 {
		holdSlot(k, cluster.VersionOf(sp2, "web"), true)
		waitOut(ui, "running: web "+string(rune('1'+k))+"/3 healthy")
	}
	setState(2, func(st *cluster.DeployState) { st.Status = cluster.DeploySuccessful })
	r := <-done
	if want := shown("mariposa deploy -name web -wait web.hcl", 1); r.code != 0 || norm(r.out) != want || r.err != "" {
		t.Fatalf("deploy -wait: exit %d\n%s\n%q\ndeploy.md shows:\n%s", r.code, r.out, r.err, want)
	}
	judge(allHealthy())

	// Spec 3 fails: slot 0's instance was not healthy within
	// healthy_deadline, and the judge's failure moves the unit's record
	// back to web/2 (auto_revert) in the same write.
	write("v3")
	ui, done = start("-name", "web", "-wait")
	waitOut(ui, "running: web 0/3 healthy")
	judge(map[int]fagent.Status{0: {Failed: "not healthy within healthy_deadline (5m0s) at web/3"}})
	r = <-done
	got := norm(r.out + r.err)
	if want := shown("mariposa deploy -name web -wait web.hcl", 2); r.code != 2 || got != want {
		t.Fatalf("deploy -wait of a failing spec: exit %d\n%s\ndeploy.md shows:\n%s", r.code, got, want)
	}

	// A deploy while a deployment runs: refused, nothing written (the
	// revert is the unit's, not a deployment of its own: spec 4 is
	// accepted while it runs).
	write("v4")
	if _, done := start("-name", "web"); (<-done).code != 0 {
		t.Fatal("deploy v4 during the revert")
	}
	write("v5")
	before, _, _ := c.KV().Keys(cluster.DeployPrefix, "", nil)
	_, done = start("-name", "web")
	r = <-done
	refused := regexp.MustCompile(`^mariposa deploy: deployment web/4 in progress \([0-9a-f]{24}, since [0-9TZ:-]+\): it ends once every instance is healthy at it, or fails when no instance becomes healthy for 10m0s \(progress_deadline; a count no node can hold stays in progress until then\); later deploys are refused until it ends: -force to supersede it now$`)
	if r.code != 1 || !refused.MatchString(strings.TrimSpace(r.err)) {
		t.Fatalf("deploy over a running deployment: exit %d %q", r.code, r.err)
	}
	if !strings.Contains(page, "(progress_deadline; a count no node can hold stays in progress until then); later deploys are refused until it ends: -force to supersede it now") {
		t.Error("deploy.md does not show the refusal")
	}
	if after, _, _ := c.KV().Keys(cluster.DeployPrefix, "", nil); len(after) != len(before) {
		t.Fatalf("a refused deploy wrote keys: %d before, %d after", len(before), len(after))
	}
	ui = cli.NewMockUi()
	if code := (&DeployPromoteCommand{UI: ui}).Run(append(consul, "web")); code != 1 ||
		ui.ErrorWriter.String() != "mariposa deploy promote: deployment web/4: no canaries wait for promotion\n" {
		t.Fatalf("promote without canaries: exit %d %q", code, ui.ErrorWriter.String())
	}
}

// TestDeployHealthDoc: deploy health marks held slots at the version they
// run, prints what deploy-health.md shows, and refuses a free slot.
func TestDeployHealthDoc(t *testing.T) {
	b, err := os.ReadFile("../website/commands/deploy-health.md")
	if err != nil {
		t.Fatal(err)
	}
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	sess, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: "release"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const version = "1f0c3a9d52e87b46"
	for _, k := range []int{0, 3} {
		v, _ := json.Marshal(cluster.SlotValue{Node: "n1", State: cluster.SlotHeld, Version: version})
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cluster.SlotKey("web", k), Value: v, Session: sess}, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	ui := cli.NewMockUi()
	if code := (&DeployHealthCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "web/0", "web/3"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if shown := "$ mariposa deploy health web/0 web/3\n" + ui.OutputWriter.String(); !strings.Contains(string(b), shown) {
		t.Errorf("deploy-health.md does not show:\n%s", shown)
	}
	for _, k := range []int{0, 3} {
		if p, _, _ := c.KV().Get(cluster.ManualHealthKey("web", version, k), nil); p == nil {
			t.Errorf("web/%d not marked", k)
		}
	}
	ui = cli.NewMockUi()
	if code := (&DeployHealthCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "web/1"}); code != 1 ||
		ui.ErrorWriter.String() != "mariposa deploy health: slot web/1 is not held: no instance to mark healthy\n" {
		t.Fatalf("a free slot: exit %d %q", code, ui.ErrorWriter.String())
	}
}

// TestDeployPromoteDoc: deploy-promote.md's examples are what status and
// deploy promote print for a deployment waiting for its canary, and what
// a second promote says.
func TestDeployPromoteDoc(t *testing.T) {
	b, err := os.ReadFile("../website/commands/deploy-promote.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	deployPage, err := os.ReadFile("../website/commands/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	fleetNodes(t, c, 6) // what deploy's fit check counts; the test plays the fleet
	t.Chdir(t.TempDir())
	consul := []string{"-consul-addr", agent.HTTPAddr()}
	write := func(version string) {
		body := `service "web" {
  command = ["web", "` + version + `"]
  count   = 6

  update {
    canary = 1
  }
}
`
		if err := os.WriteFile("web.hcl", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deploy := func(args ...string) string {
		t.Helper()
		ui := cli.NewMockUi()
		if code := (&DeployCommand{UI: ui}).Run(append(append(consul, args...), "web.hcl")); code != 0 {
			t.Fatalf("deploy: exit %d %s", code, ui.ErrorWriter.String())
		}
		return ui.OutputWriter.String()
	}
	norm := func(s string) string {
		s = regexp.MustCompile(`\b[0-9a-f]{24}\b|\b[0-9a-f]{8}…`).ReplaceAllString(s, "HASH")
		return regexp.MustCompile(`running for \d+s`).ReplaceAllString(s, "running for Ns")
	}
	// Specs 1 to 4 (the page's deployment is at spec 5, stable 4).
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		write(v)
		deploy("-name", "web")
		finishDeployment(t, c, "web")
	}
	write("v5")
	out := deploy("-name", "web")
	if shown := "$ mariposa deploy -name web web.hcl\n" + out; !strings.Contains(norm(string(deployPage)), norm(shown)) {
		t.Errorf("deploy.md does not show:\n%s", shown)
	}
	// Its canary (slot 0) is healthy at spec 5, as its holder says in the
	// slot's status key, and its instance runs and passes in the catalog.
	sp5, _ := cluster.DesiredSpec(c, "web")
	sess, _, _ := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: "release"}, nil)
	now := time.Now()
	node := agent.Name
	v, _ := json.Marshal(cluster.SlotValue{Node: node, State: cluster.SlotHeld, Version: cluster.VersionOf(sp5, "web")})
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: cluster.SlotKey("web", 0), Value: v, Session: sess}, nil); !ok || err != nil {
		t.Fatal(ok, err)
	}
	held, _, _ := c.KV().Get(cluster.SlotKey("web", 0), nil)
	st, _ := json.Marshal(cluster.HoldStatus{Index: held.ModifyIndex, Version: cluster.VersionOf(sp5, "web"), HealthyAt: &now})
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.StatusKey("web", 0), Value: st}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-0", Name: "web",
		Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue},
		Check: &api.AgentServiceCheck{CheckID: checks.SupervisorCheckID("web-0"), Name: "mariposa supervisor", TTL: "1m",
			Status: api.HealthCritical}, // the update below changes the status: synced at once
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().UpdateTTL(checks.SupervisorCheckID("web-0"),
		report.Encode(report.Instance{State: "running", PID: 7, Reason: "running (pid 7)", Slot: "web/0", Since: now}), api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if !consultest.WaitFor(10*time.Second, func() bool {
		rows, err := Instances(c, "web")
		return err == nil && len(rows) == 1 && rows[0].Slot == "web/0"
	}) {
		t.Fatal("the canary's instance never showed in the catalog")
	}
	ui := cli.NewMockUi()
	if code := (&StatusCommand{UI: ui}).Run(consul); code != 0 {
		t.Fatalf("status: exit %d %s", code, ui.ErrorWriter.String())
	}
	line := ""
	for _, l := range strings.Split(ui.OutputWriter.String(), "\n") {
		if strings.HasPrefix(l, "  web: spec 5") {
			line = l
		}
	}
	if line == "" || !strings.Contains(norm(page), norm("Deployments:\n"+line+"\n")) {
		t.Errorf("deploy-promote.md does not show status's line:\n%s\n(status printed:\n%s)", line, ui.OutputWriter.String())
	}
	ui = cli.NewMockUi()
	if code := (&DeployPromoteCommand{UI: ui}).Run(append(consul, "web")); code != 0 {
		t.Fatalf("promote: exit %d %s", code, ui.ErrorWriter.String())
	}
	if shown := "$ mariposa deploy promote web\n" + ui.OutputWriter.String(); !strings.Contains(page, shown) {
		t.Errorf("deploy-promote.md does not show:\n%s", shown)
	}
	ui = cli.NewMockUi()
	if code := (&DeployPromoteCommand{UI: ui}).Run(append(consul, "web")); code != 1 {
		t.Fatalf("second promote: exit %d", code)
	}
	if shown := "$ mariposa deploy promote web\n" + ui.ErrorWriter.String(); !strings.Contains(page, shown) {
		t.Errorf("deploy-promote.md does not show:\n%s", shown)
	}
}

// TestDeployWaitReadsRecords: under the step machine (which moves the
// units' records and never the deployment's state), deploy -wait ends as
// the records say: successful once every unit's record is, failed (exit
// 2, the unit and its reason named) when one unit's judge failed it; and
// status shows the records' outcome.
func TestDeployWaitReadsRecords(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	fleetNodes(t, c, 6)
	t.Chdir(t.TempDir())
	consul := []string{"-consul-addr", agent.HTTPAddr()}
	write := func(version string) {
		t.Helper()
		body := `service "web" {
  command = ["web", "` + version + `"]
  count   = 2
}
service "db" {
  command = ["db", "` + version + `"]
  count   = 1
}
`
		if err := os.WriteFile("shop.hcl", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// judge plays the step machine's judge: the record moves, with a
	// check-index, once it names spec n.
	judge := func(unit string, n uint64, status, reason string) {
		t.Helper()
		if !consultest.WaitFor(10*time.Second, func() bool {
			p, _, err := c.KV().Get(cluster.RecordKey(unit), nil)
			if err != nil || p == nil {
				return false
			}
			r, err := cluster.DecodeUnitRecord(p.Value)
			if err != nil || r.Spec != cluster.SpecVersion("shop", n) {
				return false
			}
			r.Status, r.Reason = status, reason
			ok, _, err := c.KV().CAS(&api.KVPair{Key: p.Key, Value: r.Encode(), ModifyIndex: p.ModifyIndex}, nil)
			return err == nil && ok
		}) {
			t.Fatalf("no record of %s for spec %d", unit, n)
		}
	}
	run := func(n uint64, moves func(*cli.MockUi)) (int, string, string) {
		ui := cli.NewMockUi()
		done := make(chan int, 1)
		go func() {
			done <- (&DeployCommand{UI: ui}).Run(append(append(consul, "-name", "shop", "-wait"), "shop.hcl"))
		}()
		moves(ui)
		select {
		case code := <-done:
			return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
		case <-time.After(30 * time.Second):
			t.Fatalf("deploy -wait of spec %d never ended:\n%s", n, ui.OutputWriter.String())
		}
		return 0, "", ""
	}
	write("v1")
	code, out, errOut := run(1, func(ui *cli.MockUi) {
		// A holder of web says slot 0 is healthy at the record's version:
		// the progress counts it.
		at := time.Now().UTC()
		if !consultest.WaitFor(10*time.Second, func() bool {
			p, _, _ := c.KV().Get(cluster.RecordKey("web"), nil)
			return p != nil
		}) {
			t.Fatal("no record of web")
		}
		b, _ := json.Marshal(cluster.HoldStatus{Index: 1, Version: "shop/1", HealthyAt: &at})
		if _, err := c.KV().Put(&api.KVPair{Key: cluster.UnitStatusKey("web", 0), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
		if !consultest.WaitFor(10*time.Second, func() bool {
			return strings.Contains(ui.OutputWriter.String(), "running: web 1/2 healthy: db 0/1 healthy")
		}) {
			t.Fatalf("deploy -wait never showed web's healthy slot:\n%s", ui.OutputWriter.String())
		}
		judge("web", 1, cluster.DeploySuccessful, "")
		judge("db", 1, cluster.DeploySuccessful, "")
	})
	if code != 0 || !strings.Contains(out, "Deployment shop/1 successful") {
		t.Fatalf("deploy 1: %d\n%s\n%s", code, out, errOut)
	}
	if st, err := cluster.ReadDeployState(c, "shop", 1); err != nil || st.Status != cluster.DeployRunning {
		t.Fatalf("the state was moved (the step machine never moves it): %+v %v", st, err)
	}
	write("v2")
	code, out, errOut = run(2, func(*cli.MockUi) {
		judge("web", 2, cluster.DeploySuccessful, "")
		judge("db", 2, cluster.DeployFailed, "slot 0: not healthy within healthy_deadline")
	})
	if code != 2 || !strings.Contains(errOut, "Deployment shop/2 failed: db: slot 0: not healthy within healthy_deadline") {
		t.Fatalf("deploy 2: %d\n%s\n%s", code, out, errOut)
	}
	ui := cli.NewMockUi()
	if code := (&StatusCommand{UI: ui}).Run(append(consul, "-json")); code != 0 {
		t.Fatalf("status: %d %s", code, ui.ErrorWriter.String())
	}
	var status struct {
		Deployments []struct {
			N     uint64
			State struct{ Status, Reason string }
		}
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &status); err != nil || len(status.Deployments) != 1 ||
		status.Deployments[0].N != 2 || status.Deployments[0].State.Status != cluster.DeployFailed ||
		!strings.HasPrefix(status.Deployments[0].State.Reason, "db: ") {
		t.Fatalf("status -json: %+v %v\n%s", status, err, ui.OutputWriter.String())
	}
	// Spec 3 with a canary phase on web, promoted by the operator: the
	// records' canary phase ends (the failed spec 2 needs no -force).
	if err := os.WriteFile("shop.hcl", []byte(`service "web" {
  command = ["web", "v3"]
  count   = 2
  update {
    max_parallel = 1
    canary       = 1
  }
}
service "db" {
  command = ["db", "v2"]
  count   = 1
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ui = cli.NewMockUi()
	if code := (&DeployCommand{UI: ui}).Run(append(append(consul, "-name", "shop"), "shop.hcl")); code != 0 {
		t.Fatalf("deploy 3: %d %s", code, ui.ErrorWriter.String())
	}
	record := func(unit string) *cluster.UnitRecord {
		t.Helper()
		p, _, err := c.KV().Get(cluster.RecordKey(unit), nil)
		if err != nil || p == nil {
			t.Fatalf("record of %s: %v", unit, err)
		}
		r, err := cluster.DecodeUnitRecord(p.Value)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := record("web"); r.Spec != "shop/3" || r.Version != "shop/3" || r.Canaries != 1 || r.Promoted {
		t.Fatalf("web after deploy 3: %+v", r)
	}
	ui = cli.NewMockUi()
	if code := (&DeployPromoteCommand{UI: ui}).Run(append(consul, "shop")); code != 0 {
		t.Fatalf("promote: %d %s", code, ui.ErrorWriter.String())
	}
	if r := record("web"); !r.Promoted || r.Status != cluster.DeployRunning {
		t.Fatalf("web after promote: %+v", r)
	}
	ui = cli.NewMockUi()
	if code := (&DeployPromoteCommand{UI: ui}).Run(append(consul, "shop")); code != 1 {
		t.Fatalf("a second promote: %d %s", code, ui.OutputWriter.String())
	}
}
