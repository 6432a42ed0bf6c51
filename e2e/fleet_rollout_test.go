package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// Deployments on a real fleet (3 servers, 5 clients, count 6, so some
// nodes hold two slots, each taking a token of its own):
//
//   - a good rollout with max_parallel 2, sampled every 100 ms from the
//     catalog: never more than 6 instances, never fewer than 4 passing;
//     deploy -wait exits 0 and status -verify passes;
//   - a bad version (its check fails): max_parallel instances move to it,
//     are not healthy within healthy_deadline, the deployment fails and
//     auto_revert deploys the stable spec again with no canary phase;
//     deploy -wait exits 2 and says so; the instances that never left the
//     old version keep their processes (same PIDs, alive); the reverted
//     deployment ends successful with every instance on the old version;
//   - two deploys at once: exactly one wins;
//   - canary = 1: one instance moves, the deployment waits (running, not
//     promoted) with the other five on the old version, until mariposa
//     deploy promote; then it ends successful.
//
// Mutation checks, run by hand on an older engine (since removed): with the
// rollout semaphore's limit raised to the count, the sampler saw fewer
// than 4 passing; with its canary hold-back always false, the canary
// phase moved every instance.
//
// The states are read as deploy -wait reads them (cluster.Effective: the
// units' records, which the step machine moves), and the revert is a
// record at the stable version (web/2), not a spec 4, so the next deploy
// is spec 4.
func TestFleetDeployments(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 5})
	c := cl.Servers[0].Client(t)
	fleetOf(t, cl)
	pids := t.TempDir()
	spec := func(version, check, extra string) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["sh", "-c", "echo $$ > %s/web-$MARIPOSA_INSTANCE.$MARIPOSA_NODE.$V; exec sleep 600"]
  version = %q
  env     = { V = %q }
  count   = 6
  max_per_node = 2
  check "ready" {
    args     = ["sh", "-c", %q]
    interval = "500ms"
  }
  update {
    max_parallel     = 2
    min_healthy_time = "2s"
    healthy_deadline = "12s"
    auto_revert      = true
%s  }
}
`, pids, version, version, check, extra))
	}
	versions := func() map[string][]string { // version -> passing nodes
		out := map[string][]string{}
		es, _, _ := c.Health().Service("web", "", true, nil)
		for _, e := range es {
			out[e.Service.Meta["version"]] = append(out[e.Service.Meta["version"]], e.Node.Node)
		}
		return out
	}
	// deployWait runs deploy -wait and returns its exit code and output.
	deployWait := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(mariposaBin, append([]string{"deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "web", "-wait"}, args...)...)
		done := make(chan struct{})
		timer := time.AfterFunc(3*time.Minute, func() {
			select {
			case <-done:
			default:
				_ = cmd.Process.Kill()
			}
		})
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		close(done)
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("deploy -wait: %v\n%s", err, out)
		return 0, ""
	}
	type sample struct{ total, passing int }
	var mu sync.Mutex
	var worst []sample
	sampling := func() (stop func()) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				all, _, err1 := c.Health().Service("web", "", false, nil)
				pass, _, err2 := c.Health().Service("web", "", true, nil)
				if err1 != nil || err2 != nil {
					continue
				}
				if s := (sample{len(all), len(pass)}); s.total > 6 || s.passing < 4 {
					mu.Lock()
					worst = append(worst, s)
					mu.Unlock()
				}
			}
		}()
		return func() { close(done); wg.Wait() }
	}
	state := func(n uint64) *cluster.DeployState {
		return effectiveState(t, c, "web", n)
	}

	if code, out := deployWait(spec("v1", "exit 0", "")); code != 0 {
		t.Fatalf("deploy -wait v1: exit %d\n%s", code, out)
	}

	// A good rollout.
	stop := sampling()
	code, out := deployWait(spec("v2", "exit 0", ""))
	stop()
	if code != 0 || !strings.Contains(out, "Deployment web/2 successful") {
		t.Fatalf("deploy -wait v2: exit %d\n%s", code, out)
	}
	if len(worst) > 0 {
		t.Errorf("during the rollout to v2 (max_parallel 2 of 6), samples out of bounds (total > 6 or passing < 4): %v", worst)
	}
	if out, err := exec.Command(mariposaBin, "status", "-consul-addr", cl.Servers[0].HTTPAddr(), "-verify", "v2").CombinedOutput(); err != nil {
		t.Fatalf("status -verify v2 after a successful deployment: %v\n%s", err, out)
	}
	if st := state(2); st == nil || st.Status != cluster.DeploySuccessful {
		t.Fatalf("state of spec 2: %+v", st)
	}

	// A bad version: its check fails. The processes at v2 now, by slot.
	before := instancePIDs(t, pids, "v2")
	if len(before) != 6 {
		t.Fatalf("v2 processes by slot: %v", before)
	}
	code, out = deployWait(spec("v3", "exit 2", ""))
	revertSays := "(reverted to web/2)"
	if code != 2 || !strings.Contains(out, "Deployment web/3 failed") || !strings.Contains(out, revertSays) {
		t.Fatalf("deploy -wait v3: exit %d, want 2 with the revert\n%s", code, out)
	}
	st3 := state(3)
	if st3 == nil || st3.Status != cluster.DeployFailed {
		t.Fatalf("state of spec 3: %+v", st3)
	}
	waitFor(t, 90*time.Second, "the revert (a record at web/2) successful", func() (bool, string) {
		r := unitRecord(t, c, "web")
		return r != nil && r.RevertOf != 0 && r.Version == "web/2" && r.Spec == "web/3" && r.Status == cluster.DeploySuccessful, fmt.Sprintf("%+v", r)
	})
	if v := versions(); len(v["v2"]) != 6 {
		t.Errorf("after the revert, passing by version: %v", v)
	}
	moved := instancePIDs(t, pids, "v3")
	if len(moved) != 2 {
		t.Errorf("%d instances moved to v3 (max_parallel 2): %v", len(moved), moved)
	}
	after := instancePIDs(t, pids, "v2")
	for slot, pid := range before {
		if _, bad := moved[slot]; bad {
			continue
		}
		if after[slot] != pid || syscall.Kill(pid, 0) != nil {
			t.Errorf("slot %s stayed on v2 but its process changed: pid %d before, %d after", slot, pid, after[slot])
		}
	}
	// The records of website/operations.md: an
	// "update" for each instance a rollout moved (two to the bad version,
	// at least), the bad one's rollout-failed, the judge's deploy-failed
	// and deploy-revert.
	if a := auditActions(t, c, "web"); a["deploy-failed"] != 1 || a["rollout-failed"] < 1 || a["deploy-revert"] != 1 || a["update"] < 2 {
		t.Errorf("audit: %v", a)
	}
	next := uint64(4) // the revert is a record, not a spec

	// Two deploys at once: exactly one wins.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, v := range []string{"v5", "v6"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "web", spec(v, "exit 0", "    canary = 1\n")}
			if err := exec.Command(mariposaBin, args...).Run(); err != nil {
				codes[i] = 1
			}
		}()
	}
	wg.Wait()
	if slices.Index(codes, 0) < 0 || codes[0] == codes[1] {
		t.Fatalf("two deploys at once: exit codes %v, want exactly one 0", codes)
	}
	winner := []string{"v5", "v6"}[slices.Index(codes, 0)]

	// Its canary: one instance moves; the other five wait for promotion.
	waitFor(t, 60*time.Second, "the canary healthy at "+winner, func() (bool, string) {
		v := versions()
		return len(v[winner]) == 1 && len(v["v2"]) == 5, fmt.Sprint(v)
	})
	consistently(t, 4*time.Second, "five instances wait on v2 for the promotion", func() (bool, string) {
		v := versions()
		st := state(next)
		return len(v["v2"]) == 5 && st.Status == cluster.DeployRunning && !st.Promoted, fmt.Sprintf("%v %+v", v, st)
	})
	if out, err := exec.Command(mariposaBin, "status", "-consul-addr", cl.Servers[0].HTTPAddr(), "-verify", winner).CombinedOutput(); err == nil {
		t.Errorf("status -verify %s passed with five instances on v2:\n%s", winner, out)
	}
	if out, err := exec.Command(mariposaBin, "deploy", "promote", "-consul-addr", cl.Servers[0].HTTPAddr(), "web").CombinedOutput(); err != nil {
		t.Fatalf("deploy promote: %v\n%s", err, out)
	}
	waitFor(t, 90*time.Second, "the promoted deployment successful", func() (bool, string) {
		st := state(next)
		return st.Status == cluster.DeploySuccessful, fmt.Sprintf("%+v %v", st, versions())
	})
	if out, err := exec.Command(mariposaBin, "status", "-consul-addr", cl.Servers[0].HTTPAddr(), "-verify", winner).CombinedOutput(); err != nil {
		t.Errorf("status -verify %s: %v\n%s", winner, err, out)
	}
	if a := auditActions(t, c, "web"); a["deploy-promote"] != 1 || a["deploy-successful"] != 4 {
		t.Errorf("audit: %v", a)
	}
}

// instancePIDs reads the PID files the test's children write
// (web-<k>.<node>.<version>): slot "k@node" -> PID, for one version.
func instancePIDs(t *testing.T, dir, version string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "web-*."+version))
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "web-"), "."+version)
		k, node, _ := strings.Cut(name, ".")
		out[k+"@"+node] = pid
	}
	return out
}

// health_check = "manual" on one node: an updated instance is healthy
// only once mariposa deploy health marks it (after min_healthy_time); until
// then the rollout waits with its token (max_parallel 1: the other slot
// stays on the old version) and the deployment stays running. Each mark
// moves the rollout on; the second makes it successful. A mark names the
// version the slot runs: the marks of v1 do not count for v2.
func TestFleetManualHealth(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	startMariposa(t, agent, nil, "-cluster")
	waitFor(t, 30*time.Second, "the supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == 1, ""
	})
	spec := func(version string) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command      = ["sleep", "600"]
  version      = %q
  env          = { V = %q }
  count        = 2
  max_per_node = 2
  update {
    max_parallel     = 1
    health_check     = "manual"
    min_healthy_time = "1s"
    healthy_deadline = "2m"
  }
}
`, version, version))
	}
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(mariposaBin, append(args[:1:1], append([]string{"-consul-addr", agent.HTTPAddr()}, args[1:]...)...)...).CombinedOutput()
		return string(out), err
	}
	mark := func(slots ...string) {
		t.Helper()
		if out, err := exec.Command(mariposaBin, append([]string{"deploy", "health", "-consul-addr", agent.HTTPAddr()}, slots...)...).CombinedOutput(); err != nil {
			t.Fatalf("deploy health %v: %v\n%s", slots, err, out)
		}
	}
	running := func(version string) int {
		es, _, _ := c.Health().Service("web", "", false, nil)
		n := 0
		for _, e := range es {
			if e.Service.Meta["version"] == version {
				n++
			}
		}
		return n
	}
	// state is spec n's status as deploy -wait reads it (its state, or its
	// unit's record, which the step machine moves).
	state := func(n uint64) string {
		st := effectiveState(t, c, "web", n)
		if st == nil {
			return ""
		}
		return st.Status
	}
	if out, err := cli("deploy", "-name", "web", spec("v1")); err != nil {
		t.Fatalf("deploy v1: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "both instances at v1", func() (bool, string) { return running("v1") == 2, "" })
	consistently(t, 3*time.Second, "spec 1 running: nobody marked its instances", func() (bool, string) {
		return state(1) == cluster.DeployRunning, state(1)
	})
	mark("web/0", "web/1")
	waitFor(t, 30*time.Second, "spec 1 successful once both are marked", func() (bool, string) {
		return state(1) == cluster.DeploySuccessful, state(1)
	})

	if out, err := cli("deploy", "-name", "web", spec("v2")); err != nil {
		t.Fatalf("deploy v2: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "one instance at v2", func() (bool, string) { return running("v2") == 1, "" })
	consistently(t, 3*time.Second, "the rollout waits for the mark: one at v1, one at v2", func() (bool, string) {
		return running("v1") == 1 && running("v2") == 1 && state(2) == cluster.DeployRunning, fmt.Sprint(running("v1"), running("v2"), state(2))
	})
	// Marking both: the v2 instance is healthy and the other slot moves to
	// v2; its mark was for v1, so the deployment waits for a new one.
	mark("web/0", "web/1")
	waitFor(t, 30*time.Second, "both instances at v2", func() (bool, string) { return running("v2") == 2, "" })
	consistently(t, 3*time.Second, "spec 2 running: the second instance is not marked at v2", func() (bool, string) {
		return state(2) == cluster.DeployRunning, state(2)
	})
	mark("web/0", "web/1")
	waitFor(t, 30*time.Second, "spec 2 successful", func() (bool, string) {
		return state(2) == cluster.DeploySuccessful, state(2)
	})
	if a := auditActions(t, c, "web"); a["mark-healthy"] != 6 {
		t.Errorf("audit: %v", a)
	}
}

// effectiveState is spec n of deployment name's state as deploy -wait and
// status read it (cluster.Effective: its state, or its units' records,
// which the step machine moves); nil when it has none.
func effectiveState(t *testing.T, c *api.Client, name string, n uint64) *cluster.DeployState {
	t.Helper()
	st, err := cluster.ReadDeployState(c, name, n)
	if err != nil {
		t.Fatal(err)
	}
	if st == nil {
		return nil
	}
	p, _, err := c.KV().Get(cluster.SpecKey(name, n), nil)
	if err != nil || p == nil {
		t.Fatalf("spec %s/%d: %v", name, n, err)
	}
	spec, err := cluster.DecodeSpec(p.Value)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]*cluster.UnitRecord{}
	for _, u := range spec.Units() {
		if r := unitRecord(t, c, u.Unit.Name); r != nil {
			recs[u.Unit.Name] = r
		}
	}
	eff := cluster.Effective(*st, spec, recs)
	return &eff
}

// unitRecord is the unit's deployment record (nil: none).
func unitRecord(t *testing.T, c *api.Client, unit string) *cluster.UnitRecord {
	t.Helper()
	p, _, err := c.KV().Get(cluster.RecordKey(unit), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return nil
	}
	r, err := cluster.DecodeUnitRecord(p.Value)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
