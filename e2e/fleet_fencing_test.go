package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The fencing token holds for the whole hold (CLUSTER.md section 12, "Keys
// that do not move"), on a real fleet (1 server, 3 clients): an exclusive
// count-2 unit with an update block and a coordinated template. Each child
// makes a fenced write as the docs say (a Consul transaction with
// check-index on MARIPOSA_SLOT_KEY at MARIPOSA_SLOT_INDEX and check-session
// with MARIPOSA_SLOT_SESSION) after the first deployment (deploy -wait), a
// rolling update, a canary's promotion and a coordinated reload: each
// passes, and the slot key's ModifyIndex is still the token. After a
// takeover (the holder's mariposa killed), the previous holder's write
// fails and the new holder's passes.
//
// Mutation check: with publishHealthy writing the slot key again (the
// holder's version and healthy_at in the held key, as before the status
// key), the write after the first deployment fails ("failed index check
// ... current modify index 50 != 39"). (Consul skips a write that changes
// nothing in a key, so rewriting the same value would not show.)
func TestFleetFencingTokenKept(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 3})
	c := cl.Servers[0].Client(t)
	if _, err := c.KV().Put(&api.KVPair{Key: "fence/conf", Value: []byte("c1")}, nil); err != nil {
		t.Fatal(err)
	}
	ms := fleetOf(t, cl)
	dir := t.TempDir()
	child := filepath.Join(dir, "child.sh")
	// Each start leaves its environment, PID and rendered file in
	// env.<node> (written whole, then renamed).
	script := `#!/bin/sh
d=` + dir + `
trap 'exit 0' TERM INT
f="$d/env.$MARIPOSA_NODE"
{ env; echo "PID=$$"; echo "CONF=$(cat "$d/api.conf")"; } > "$f.$$"
mv "$f.$$" "$f"
while :; do sleep 1 & wait $!; done
`
	if err := os.WriteFile(child, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(version, extra string) string {
		return writeHCL(t, fmt.Sprintf(`
service "api" {
  command   = [%q]
  version   = %q
  env       = { V = %q }
  count     = 2
  exclusive = true
  template {
    contents    = "{{ key \"fence/conf\" }}"
    destination = "%s/api.conf"
    change_mode = "restart"
    coordinate {
      max_parallel = 1
    }
  }
  check "up" {
    args     = ["true"]
    interval = "250ms"
  }
  update {
    max_parallel     = 1
    min_healthy_time = "1s"
    healthy_deadline = "30s"
%s  }
  stop {
    timeout = "2s"
  }
}
`, child, version, version, dir, extra))
	}
	deployWait := func(file string) {
		t.Helper()
		cmd := exec.Command(mariposaBin, "deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "api", "-wait", file)
		timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy -wait: %v\n%s", err, out)
		}
	}
	envOf := func(node string) map[string]string {
		b, err := os.ReadFile(filepath.Join(dir, "env."+node))
		if err != nil {
			return nil
		}
		env := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		return env
	}
	// fencedWrite is the child's guarded write, with its own environment.
	fencedWrite := func(env map[string]string) error {
		idx, err := strconv.ParseUint(env["MARIPOSA_SLOT_INDEX"], 10, 64)
		k, _ := strconv.Atoi(env["MARIPOSA_INSTANCE"])
		if err != nil || env["MARIPOSA_SLOT_KEY"] != cluster.SlotKey("api", k) || env["MARIPOSA_SLOT_SESSION"] == "" {
			return fmt.Errorf("the child's environment: %v", env)
		}
		ok, resp, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: env["MARIPOSA_SLOT_KEY"], Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: env["MARIPOSA_SLOT_KEY"], Session: env["MARIPOSA_SLOT_SESSION"]}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "fence/data", Value: []byte(env["PID"])}},
		}, nil)
		if err != nil {
			return err
		}
		if !ok {
			var why []string
			for _, e := range resp.Errors {
				why = append(why, e.What)
			}
			return errors.New(strings.Join(why, "; "))
		}
		return nil
	}
	// running waits until each slot's holder runs a child whose
	// environment satisfies want, and returns the holders and those
	// environments, by slot.
	running := func(what string, want func(k int, env map[string]string) bool) (map[int]string, map[int]map[string]string) {
		t.Helper()
		var holders map[int]string
		envs := map[int]map[string]string{}
		waitFor(t, 90*time.Second, what, func() (bool, string) {
			holders = slotHolders(t, c, "api")
			for k := range 2 {
				node := holders[k]
				if node == "" {
					return false, fmt.Sprintf("slot api/%d not held", k)
				}
				env := envOf(node)
				pid, _ := strconv.Atoi(env["PID"])
				if env == nil || env["MARIPOSA_INSTANCE"] != strconv.Itoa(k) || pid <= 0 || syscall.Kill(pid, 0) != nil || !want(k, env) {
					return false, fmt.Sprintf("slot %d on %s: %v", k, node, env)
				}
				envs[k] = env
			}
			return true, ""
		})
		return holders, envs
	}
	// kept: every child's fenced write passes, and each slot key's
	// ModifyIndex is still its token.
	kept := func(when string, envs map[int]map[string]string) {
		t.Helper()
		for k, env := range envs {
			if err := fencedWrite(env); err != nil {
				p, _, _ := c.KV().Get(cluster.SlotKey("api", k), nil)
				t.Fatalf("%s: the fenced write of slot %d's child with MARIPOSA_SLOT_INDEX %s was refused: %v (slot key: %+v)",
					when, k, env["MARIPOSA_SLOT_INDEX"], err, p)
			}
		}
	}
	at := func(v string) func(int, map[string]string) bool {
		return func(_ int, env map[string]string) bool { return env["V"] == v }
	}

	deployWait(spec("v1", ""))
	_, envs1 := running("v1 running", at("v1"))
	kept("after the first deployment (deploy -wait)", envs1)

	deployWait(spec("v2", ""))
	_, envs := running("v2 running", at("v2"))
	for k, env := range envs {
		if env["MARIPOSA_SLOT_INDEX"] != envs1[k]["MARIPOSA_SLOT_INDEX"] {
			t.Errorf("a rolling update in the same hold gave slot %d a new token: %s, was %s", k, env["MARIPOSA_SLOT_INDEX"], envs1[k]["MARIPOSA_SLOT_INDEX"])
		}
	}
	kept("after a rolling update", envs)

	deploy(t, cl.Servers[0], "-name", "api", spec("v3", "    canary = 1\n"))
	waitFor(t, 60*time.Second, "the canary healthy, waiting for promotion", func() (bool, string) {
		d, prog, _, err := cluster.Watch(context.Background(), c, "api", 0)
		if err != nil || d.State == nil || len(prog) != 1 {
			return false, fmt.Sprint(err)
		}
		return d.State.N == 3 && d.State.Status == cluster.DeployRunning && !d.State.Promoted && prog[0].Healthy == 1,
			fmt.Sprintf("%+v %+v", d.State, prog)
	})
	if out, err := exec.Command(mariposaBin, "deploy", "promote", "-consul-addr", cl.Servers[0].HTTPAddr(), "api").CombinedOutput(); err != nil {
		t.Fatalf("deploy promote: %v\n%s", err, out)
	}
	waitFor(t, 90*time.Second, "the promoted deployment successful", func() (bool, string) {
		// As deploy -wait and status see it (cluster.Effective: the state
		// and the units' records, which the step machine moves).
		d, _, _, err := cluster.Watch(context.Background(), c, "api", 0)
		if err != nil || d.State == nil || d.State.N != 3 {
			return false, fmt.Sprint(err)
		}
		st := cluster.Effective(*d.State, d.Spec, d.Records)
		return st.Status == cluster.DeploySuccessful, fmt.Sprintf("%+v", st)
	})
	_, envs = running("v3 running", at("v3"))
	kept("after a canary's promotion", envs)

	before := map[int]string{0: envs[0]["PID"], 1: envs[1]["PID"]}
	if _, err := c.KV().Put(&api.KVPair{Key: "fence/conf", Value: []byte("c2")}, nil); err != nil {
		t.Fatal(err)
	}
	holders, envs := running("the coordinated reload onto c2", func(k int, env map[string]string) bool {
		return env["CONF"] == "c2" && env["PID"] != before[k]
	})
	kept("after a coordinated reload", envs)

	// A takeover: slot 0's holder's mariposa is killed; the free node
	// claims the slot once the session is gone.
	old, victim := envs[0], holders[0]
	_ = ms[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-ms[victim].done
	_, envs = running("slot 0 taken over", func(k int, env map[string]string) bool {
		return k != 0 || env["MARIPOSA_NODE"] != victim
	})
	if err := fencedWrite(old); err == nil {
		t.Errorf("the previous holder's fenced write passed after a takeover (token %s, now %s)",
			old["MARIPOSA_SLOT_INDEX"], envs[0]["MARIPOSA_SLOT_INDEX"])
	}
	kept("after a takeover", envs)
}
