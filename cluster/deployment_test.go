package cluster

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// unitSpec is a one-service unit for the deployment tests.
func depSpec(n uint64, version string, count, canary int, auto bool) *Spec {
	up := schema.Update{MaxParallel: 1, HealthCheck: schema.UpdateChecks, MinHealthyTime: time.Second,
		HealthyDeadline: time.Minute, ProgressDeadline: 10 * time.Minute, Canary: canary, AutoPromote: auto, AutoRevert: true}
	sp := &Spec{Format: SpecFormat, Name: "shop", N: n, Hash: "h-" + version,
		Services: []*schema.Service{{Name: "web", Command: []string{"web", version},
			Placement: &schema.Placement{Count: count, Update: up}}}}
	return sp
}

func TestCanaries(t *testing.T) {
	v1, v2 := depSpec(1, "v1", 3, 2, false), depSpec(2, "v2", 3, 2, false)
	if c := canaries(nil, v2); c != nil {
		t.Errorf("a first deployment has canaries %v", c)
	}
	if c := canaries(v1, depSpec(2, "v1", 5, 2, false)); c != nil {
		t.Errorf("a count change has canaries %v", c)
	}
	if c := canaries(v1, v2); c["web"] != 2 {
		t.Errorf("canaries %v, want web: 2", c)
	}
	if c := canaries(v1, depSpec(2, "v2", 1, 2, false)); c["web"] != 1 {
		t.Errorf("canaries %v, want web: 1 (no more than count)", c)
	}
}

// TestDeploymentTransitions on a real Consul: the state transitions the
// CLI writes (the step machine judges in the units' records, never in the
// state). A deploy starts a running state; a second deploy is refused
// while it runs and supersedes it with -force (cancelled), with a canary
// phase when the definition changes; promote ends a canary phase once, and
// is refused without one; each with its audit record.
func TestDeploymentTransitions(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	if _, err := Deploy(c, depSpec(0, "v1", 3, 1, false), DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	d, err := ReadDeployment(c, "shop")
	if err != nil || d.State == nil || d.State.Status != DeployRunning || !d.State.Promoted || d.State.Canaries != nil {
		t.Fatalf("first deploy: %+v %v", d, err)
	}
	if _, err := Deploy(c, depSpec(0, "v2", 3, 1, false), DeployOptions{By: "test"}); !errors.Is(err, ErrInProgress) {
		t.Fatalf("deploy over a running one: %v", err)
	}
	res, err := Deploy(c, depSpec(0, "v2", 3, 1, false), DeployOptions{By: "test", Force: true})
	if err != nil || res.N != 2 || res.Canaries["web"] != 1 || res.Superseded != 1 {
		t.Fatalf("deploy v2 -force: %+v %v", res, err)
	}
	if st1, _ := ReadDeployState(c, "shop", 1); st1 == nil || st1.Status != DeployCancelled || !strings.Contains(st1.Reason, "superseded by spec 2") {
		t.Fatalf("state 1 after -force: %+v", st1)
	}
	if d, _ = ReadDeployment(c, "shop"); d.State.Promoted || d.State.Canaries["web"] != 1 {
		t.Fatalf("before the promotion: %+v", d.State)
	}
	if _, err := Promote(c, "shop", "op"); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if _, err := Promote(c, "shop", "op"); !errors.Is(err, ErrNoCanaries) {
		t.Fatalf("second promote: %v", err)
	}
	if d, _ = ReadDeployment(c, "shop"); !d.State.Promoted || d.State.Status != DeployRunning {
		t.Fatalf("after the promotion: %+v", d.State)
	}
	var events []AuditEvent
	pairs, _, _ := c.KV().List(AuditPrefix, nil)
	for _, p := range pairs {
		var e AuditEvent
		_ = json.Unmarshal(p.Value, &e)
		events = append(events, e)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Before(events[j].At) })
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
	}
	if got := strings.Join(actions, ","); got != "deploy,deploy,deploy-promote" {
		t.Fatalf("audit: %s", got)
	}
}

// A state an older fleet wrote with reverted_to still decodes: the field is
// gone, not refused.
func TestDeployStateOldRevertedTo(t *testing.T) {
	var st DeployState
	if err := json.Unmarshal([]byte(`{"n":3,"hash":"h","status":"failed","revert_of":0,"reverted_to":4,"reason":"unhealthy"}`), &st); err != nil {
		t.Fatal(err)
	}
	if st.N != 3 || st.Status != DeployFailed || st.Reason != "unhealthy" {
		t.Errorf("decoded %+v", st)
	}
}
