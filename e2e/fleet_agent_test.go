package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// removedEngine asks for a fleet engine that is gone ("fleet"):
// `mariposa run -cluster` warns that it no longer reads it and runs the
// fleet's step machine (fleet/agent under fleet/executor), the only one.
var removedEngine = []string{"MARIPOSA_FLEET_ENGINE=fleet"}

// `mariposa run -cluster` on the fleet's step machine, on a real fleet (1
// server, 3 clients), each started with MARIPOSA_FLEET_ENGINE=fleet, the
// removed engine's name: each runs the step machine all the same (its
// liveness check says "fleet engine: step machine"). Then: an exclusive
// count-2 unit deployed with `mariposa deploy` runs exactly 2 instances on
// distinct nodes, and `mariposa status` reads the agent's slot keys; kill -9 of a holder's mariposa moves its slot
// to another node only after the old child is dead (never two children of
// one slot at once), the old fencing token refused and the new one
// accepted; a graceful stop (SIGTERM) of a holder releases its slot (the
// key kept, unlocked with the released state, not deleted by a session
// invalidation) and another node takes it.
//
// Mutation checks: with run -cluster refusing MARIPOSA_FLEET_ENGINE=fleet
// (exit 1), no supervisor is live (the first wait times out); with
// agentFleet.Start never handing the slot to the runner, no child runs
// (the first wait for a placement times out); with the release
// skipped on a graceful stop (agentFleet.release not calling the
// executor's Stop), the slot key is deleted with the session and created
// again (its CreateIndex changes).
func TestFleetAgentEngine(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 3})
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	spec := writeHCL(t, fmt.Sprintf(`
service "api" {
  command   = ["/bin/sh", "-c", "exec %s -stamp-file %s/$MARIPOSA_NODE.$MARIPOSA_INSTANCE.stamps -env-file %s/$MARIPOSA_NODE.$MARIPOSA_INSTANCE.env"]
  count     = 2
  exclusive = true
  stop {
    timeout = "2s"
  }
}
`, childBin, dir, dir))
	type nodeSlot struct {
		node string
		slot int
	}
	watches := map[nodeSlot]*childWatch{}
	for _, a := range cl.Clients {
		for k := range 3 {
			watches[nodeSlot{a.Name, k}] = watchChildren(t, filepath.Join(dir, fmt.Sprintf("%s.%d.stamps", a.Name, k)))
		}
	}
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(t, a, removedEngine, "-cluster")
	}
	waitFor(t, 90*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	// The liveness check's output as each node's agent has it (the
	// catalog takes output-only changes every check_update_interval).
	waitFor(t, 30*time.Second, "every supervisor on the step machine", func() (bool, string) {
		for _, a := range cl.Clients {
			hcs, err := a.Client(t).Agent().Checks()
			if err != nil {
				return false, err.Error()
			}
			hc := hcs[checks.SupervisorCheckID(checks.SupervisorServiceID(a.Name))]
			if hc == nil || !strings.Contains(hc.Output, "fleet engine: step machine") {
				return false, fmt.Sprintf("%s: %+v", a.Name, hc)
			}
		}
		return true, ""
	})
	deploy(t, cl.Servers[0], "-name", "api", spec)

	// placed waits until exactly 2 slots are held on distinct nodes, none
	// of them excluded, each running exactly one child, and no other child
	// runs anywhere; it returns slot -> node.
	placed := func(not ...string) map[int]string {
		t.Helper()
		var holders map[int]string
		waitFor(t, 120*time.Second, fmt.Sprintf("2 slots held on distinct nodes, none on %v", not), func() (bool, string) {
			holders = slotHolders(t, c, "api")
			nodes := map[string]bool{}
			for k := range 2 {
				n := holders[k]
				if n == "" || nodes[n] {
					return false, fmt.Sprint(holders)
				}
				for _, x := range not {
					if n == x {
						return false, fmt.Sprint(holders)
					}
				}
				nodes[n] = true
			}
			if holders[2] != "" {
				return false, fmt.Sprintf("%v: slot 2, above the count, is held", holders)
			}
			for ns, w := range watches {
				want := 0
				if ns.slot < 2 && holders[ns.slot] == ns.node {
					want = 1
				}
				if got := len(w.running()); got != want {
					return false, fmt.Sprintf("%v; %d children of slot %d on %s", holders, got, ns.slot, ns.node)
				}
			}
			return true, ""
		})
		return holders
	}
	fenced := func(node string, slot int) error {
		env := readEnv(t, filepath.Join(dir, fmt.Sprintf("%s.%d.env", node, slot)))
		idx, err := strconv.ParseUint(env["MARIPOSA_SLOT_INDEX"], 10, 64)
		if err != nil || env["MARIPOSA_SLOT_KEY"] != cluster.SlotKey("api", slot) || env["MARIPOSA_SLOT_SESSION"] == "" {
			return fmt.Errorf("the child's environment: %v", env)
		}
		ok, resp, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: cluster.SlotKey("api", slot), Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: cluster.SlotKey("api", slot), Session: env["MARIPOSA_SLOT_SESSION"]}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "api-data", Value: []byte(node)}},
		}, nil)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("refused: %v", resp.Errors)
		}
		return nil
	}
	createIndex := func(slot int) uint64 {
		p, _, err := c.KV().Get(cluster.SlotKey("api", slot), &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			t.Fatalf("slot key %d: %v %v", slot, p, err)
		}
		return p.CreateIndex
	}

	holders := placed()
	consistently(t, 5*time.Second, "exactly 2 slots held, one child each", func() (bool, string) {
		h := slotHolders(t, c, "api")
		if h[0] != holders[0] || h[1] != holders[1] || h[2] != "" {
			return false, fmt.Sprint(h)
		}
		n := 0
		for _, w := range watches {
			n += len(w.running())
		}
		return n == 2, fmt.Sprintf("%d children", n)
	})
	for k := range 2 {
		if err := fenced(holders[k], k); err != nil {
			t.Fatalf("slot %d's child on %s cannot write with its fencing token: %v", k, holders[k], err)
		}
	}
	// mariposa status reads the agent's slot keys.
	out, err := exec.Command(mariposaBin, "status", "-json", "-consul-addr", cl.Servers[0].HTTPAddr()).Output()
	if err != nil {
		t.Fatalf("mariposa status -json: %v\n%s", err, out)
	}
	var st struct {
		Units []struct {
			Unit  string `json:"unit"`
			Held  int    `json:"held"`
			Slots []struct {
				Index int    `json:"index"`
				State string `json:"state"`
				Node  string `json:"node"`
			} `json:"slots"`
		} `json:"units"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	if len(st.Units) != 1 || st.Units[0].Unit != "api" || st.Units[0].Held != 2 || len(st.Units[0].Slots) != 2 {
		t.Fatalf("status -json units: %+v", st.Units)
	}
	for _, s := range st.Units[0].Slots {
		if s.State != "held" || s.Node != holders[s.Index] {
			t.Errorf("status -json slot %+v, holders %v", s, holders)
		}
	}

	// Takeover: kill -9 of slot 0's holder's mariposa.
	victim := holders[0]
	_ = ms[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-ms[victim].done
	holders = placed(victim)
	if err := fenced(victim, 0); err == nil {
		t.Errorf("the killed holder %s's fencing token still writes after the takeover", victim)
	}
	if err := fenced(holders[0], 0); err != nil {
		t.Errorf("the new holder %s cannot write with its fencing token: %v", holders[0], err)
	}
	ms[victim] = startMariposa(t, clientNamed(cl, victim), nil, "-cluster")
	waitFor(t, 90*time.Second, "the restarted supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})

	// Graceful stop of slot 1's holder: released, then taken elsewhere.
	leaving := holders[1]
	created := createIndex(1)
	if code := ms[leaving].stop(t, syscall.SIGTERM, 60*time.Second); code != 0 {
		t.Errorf("the stopped mariposa exited %d", code)
	}
	holders = placed(leaving)
	if got := createIndex(1); got != created {
		t.Errorf("slot 1's key was created again (CreateIndex %d -> %d): deleted with the session, not released", created, got)
	}

	// Never two children of one slot at once.
	type run struct {
		leadertest.Interval
		node string
		slot int
	}
	var all []run
	for ns, w := range watches {
		for _, iv := range w.intervals(t) {
			all = append(all, run{Interval: iv, node: ns.node, slot: ns.slot})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Start < all[j].Start })
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].slot == all[j].slot && overlaps(all[i].Interval, all[j].Interval) {
				t.Errorf("slot %d: two children overlapped: %s %s and %s %s", all[i].slot, all[i].node, all[i].Who, all[j].node, all[j].Who)
			}
		}
	}
	if len(all) < 4 {
		t.Errorf("only %d runs", len(all))
	}
}

// A rolling deploy on the fleet's step machine, on a real fleet (1
// server, 1 client holding all 3 slots of a unit, max_parallel 1): `mariposa
// deploy -wait` of v1, then of v2, each returns successful (the units'
// records, judged by the step machine from the runner's health); the v2
// children start one after the other, each at least about min_healthy_time
// after the previous one (never more than max_parallel down or unproven at
// once), in the same holds (MARIPOSA_SLOT_INDEX unchanged), and each
// child's fenced write with its MARIPOSA_SLOT_INDEX passes after the
// update.
//
// Mutation checks: with agentFleet running every slot at the unit's
// current (desired) definition instead of its version's, the three v2
// children start together at the desired change (the spacing fails); with
// the health loop never telling the executor, deploy -wait of v1 never
// returns (its timeout fails the test).
func TestFleetAgentRollingDeploy(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 1})
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	child := filepath.Join(dir, "child.sh")
	// Each start appends "<V> <slot> <unix ns>" to starts and leaves its
	// environment and PID in env.<slot> (written whole, then renamed).
	script := `#!/bin/sh
d=` + dir + `
trap 'exit 0' TERM INT
echo "$V $MARIPOSA_INSTANCE $(date +%s%N)" >> "$d/starts"
f="$d/env.$MARIPOSA_INSTANCE"
{ env; echo "PID=$$"; } > "$f.$$"
mv "$f.$$" "$f"
while :; do sleep 1 & wait $!; done
`
	if err := os.WriteFile(child, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	const minHealthy = 2 * time.Second
	spec := func(v string) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command      = [%q]
  version      = %q
  env          = { V = %q }
  count        = 3
  max_per_node = 3
  check "ready" {
    args     = ["true"]
    interval = "250ms"
  }
  update {
    max_parallel     = 1
    min_healthy_time = %q
    healthy_deadline = "60s"
  }
  stop {
    timeout = "2s"
  }
}
`, child, v, v, minHealthy.String()))
	}
	for _, a := range cl.Clients {
		startMariposa(t, a, nil, "-cluster")
	}
	waitFor(t, 90*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	deployWait := func(file string) {
		t.Helper()
		cmd := exec.Command(mariposaBin, "deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "web", "-wait", file)
		timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy -wait: %v\n%s", err, out)
		}
	}
	envOf := func(k int) map[string]string {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("env.%d", k)))
		if err != nil {
			return nil
		}
		env := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if key, v, ok := strings.Cut(line, "="); ok {
				env[key] = v
			}
		}
		return env
	}
	running := func(v string) map[int]map[string]string {
		t.Helper()
		envs := map[int]map[string]string{}
		waitFor(t, 90*time.Second, "every slot's child at "+v, func() (bool, string) {
			for k := range 3 {
				env := envOf(k)
				pid, _ := strconv.Atoi(env["PID"])
				if env["V"] != v || pid <= 0 || syscall.Kill(pid, 0) != nil {
					return false, fmt.Sprintf("slot %d: %v", k, env)
				}
				envs[k] = env
			}
			return true, ""
		})
		return envs
	}
	fenced := func(env map[string]string) error {
		idx, err := strconv.ParseUint(env["MARIPOSA_SLOT_INDEX"], 10, 64)
		if err != nil || env["MARIPOSA_SLOT_SESSION"] == "" {
			return fmt.Errorf("the child's environment: %v", env)
		}
		ok, resp, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: env["MARIPOSA_SLOT_KEY"], Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: env["MARIPOSA_SLOT_KEY"], Session: env["MARIPOSA_SLOT_SESSION"]}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "web-data", Value: []byte(env["PID"])}},
		}, nil)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("refused: %v", resp.Errors)
		}
		return nil
	}

	deployWait(spec("v1"))
	envs1 := running("v1")
	deployWait(spec("v2"))
	envs2 := running("v2")
	for k := range 3 {
		if envs2[k]["MARIPOSA_SLOT_INDEX"] != envs1[k]["MARIPOSA_SLOT_INDEX"] {
			t.Errorf("slot %d: the update in the same hold changed the token %s -> %s", k, envs1[k]["MARIPOSA_SLOT_INDEX"], envs2[k]["MARIPOSA_SLOT_INDEX"])
		}
		if err := fenced(envs2[k]); err != nil {
			t.Errorf("slot %d: the fenced write after the update with MARIPOSA_SLOT_INDEX %s: %v", k, envs2[k]["MARIPOSA_SLOT_INDEX"], err)
		}
	}
	// The v2 starts: one per slot, each at least about min_healthy_time
	// after the previous one (max_parallel 1: the next slot moves only
	// once the previous one has been healthy that long).
	b, err := os.ReadFile(filepath.Join(dir, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	slots := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "v2" {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("starts: %q", line)
		}
		starts = append(starts, ns)
		slots[f[1]] = true
	}
	if len(starts) != 3 || len(slots) != 3 {
		t.Fatalf("v2 started %d times in slots %v, want once in each of 3:\n%s", len(starts), slots, b)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	for i := 1; i < len(starts); i++ {
		if gap := time.Duration(starts[i] - starts[i-1]); gap < minHealthy*3/4 {
			t.Errorf("v2 starts %v apart (max_parallel 1, min_healthy_time %s): more than one slot moved at once\n%s", gap, minHealthy, b)
		}
	}
}
