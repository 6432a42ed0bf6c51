package e2e

import (
	"encoding/json"
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
	"github.com/mariposa-sh/mariposa/internal/report"
)

// A stateful service's data follows its slot, on a real cluster (3
// servers, 3 clients) with a real redis-server from Debian: keys written
// to the instance are all there after its node is drained and the
// instance runs on another node (the old holder snapshots the stopped
// volume and publishes the handoff with the release, the new one fetches
// it from the old one's HTTP API, verifies it and restores it before the
// start). Then the holder's mariposa is frozen (SIGSTOP) past its lease:
// another node takes the slot, and once thawed the stale holder's child is
// dead and the handoff key is not its (its release transaction, fenced by
// check-session, fails).
//
// Mutation check, run by hand: with the restore skipped (prepareVolumes
// returning at once for a planned handoff), redis starts empty on the new
// node and the test fails. The fence itself is TestHandoffFenced's (a
// holder whose session is gone while it believes it holds the slot): here
// the thawed holder finds its slot lost and does not even try.
func TestFleetVolumeFollowsSlot(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	redis, err := exec.LookPath("redis-server")
	consultest.Require(t, err == nil, "redis-server (Debian package redis-server) is not installed")
	cli, err := exec.LookPath("redis-cli")
	consultest.Require(t, err == nil, "redis-cli (Debian package redis-tools) is not installed")

	cl := consultest.NewCluster(t, 3, 3)
	c := cl.Servers[0].Client(t)
	root := t.TempDir()
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(t, a, nil, "-cluster", "-http-addr", "127.0.0.1:0",
			"-volume-dir", filepath.Join(root, a.Name), "-liveness-ttl", "2s")
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	port := freePort(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "cache" {
  command   = ["/bin/sh", "-c", "exec %s --port %d --bind 127.0.0.1 --dir \"$MARIPOSA_VOLUME_DATA\" --appendonly yes --save ''"]
  port      = %d
  count     = 1
  exclusive = true

  volume "data" {
    handoff  = "snapshot"
    replicas = 1
    interval = "2s"
  }
  check "up" {
    tcp      = "127.0.0.1:%d"
    interval = "500ms"
  }
  stop {
    timeout = "10s"
  }
}
`, redis, port, port, port))
	deploy(t, cl.Servers[0], "-name", "cache", hcl)
	holder := func(not string) string {
		var h string
		waitFor(t, 90*time.Second, "cache passing on a node other than "+not, func() (bool, string) {
			es, _, _ := c.Health().Service("cache", "", true, nil)
			if len(es) != 1 || es[0].Node.Node == not {
				return false, fmt.Sprint(len(es), slotHolders(t, c, "cache"))
			}
			h = es[0].Node.Node
			return true, h
		})
		return h
	}
	redisCmd := func(args ...string) (string, error) {
		out, err := exec.Command(cli, append([]string{"-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	first := holder("")
	const keys = 200
	for i := 0; i < keys; i++ {
		if out, err := redisCmd("SET", fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i)); err != nil || out != "OK" {
			t.Fatalf("SET: %v %s", err, out)
		}
	}

	// A planned move: drain the holder.
	out, err := exec.Command(mariposaBin, "drain", "-consul-addr", cl.Servers[0].HTTPAddr(), "-wait", "-deadline", "2m", first).CombinedOutput()
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	second := holder(first)
	waitFor(t, 30*time.Second, "redis answering on "+second, func() (bool, string) {
		out, err := redisCmd("DBSIZE")
		return err == nil && out == strconv.Itoa(keys), fmt.Sprint(out, err)
	})
	for i := 0; i < keys; i++ {
		if out, _ := redisCmd("GET", fmt.Sprintf("key:%d", i)); out != fmt.Sprintf("value-%d", i) {
			t.Fatalf("key:%d after the move from %s to %s: %q", i, first, second, out)
		}
	}
	ho := handoffOf(t, c, "cache", 0)
	if ho.Node != first || ho.Volumes["data"].Size == 0 {
		t.Fatalf("handoff: %+v, want one from %s", ho, first)
	}
	if a := auditActions(t, c, ""); a["restore"] == 0 {
		t.Errorf("no restore in the audit log: %v", a)
	}
	if _, err := os.Stat(filepath.Join(root, second, "cache", "0", "data", "appendonlydir")); err != nil {
		t.Errorf("the restored volume on %s: %v", second, err)
	}

	// A stale holder: freeze its mariposa past its lease. Its node drops
	// out (the liveness check), another node takes the slot; thawed, it
	// finds the slot gone and cannot publish a handoff. The handoff in
	// Consul is still the drain's, restored by the frozen holder: it is
	// used once (website/stateful.md), so the next holder applies
	// on_missing. Mutation check, run by hand: with Handoff.PlannedFor
	// always true, the next holder restores that handoff again and never
	// passes (this wait times out).
	if out, err := exec.Command(mariposaBin, "drain", "-consul-addr", cl.Servers[0].HTTPAddr(), "-undo", first).CombinedOutput(); err != nil {
		t.Fatalf("drain -undo: %v\n%s", err, out)
	}
	before := handoffOf(t, c, "cache", 0)
	stale := ms[second]
	childPID := redisPID(t, port)
	if err := stale.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	third := ""
	waitFor(t, 90*time.Second, "another node holding cache/0", func() (bool, string) {
		h := slotHolders(t, c, "cache")
		third = h[0]
		return third != "" && third != second, fmt.Sprint(h)
	})
	if err := stale.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the stale holder's redis dead", func() (bool, string) {
		return syscall.Kill(childPID, 0) != nil, fmt.Sprint("pid ", childPID)
	})
	// The stale holder had its chance to release (and publish) by now:
	// wait for the new holder's instance, then compare.
	fourth := holder(second)
	after := handoffOf(t, c, "cache", 0)
	if after.Node == second && after.LockIndex != before.LockIndex {
		t.Fatalf("the stale holder published a handoff after losing its slot: %+v", after)
	}

	// An unplanned loss: kill -9 the holder's node (its mariposa and its
	// agent). The next holder restores the newest periodic copy, pushed
	// every 2s to another node; what was written after it is lost, and
	// the restore record says how long ago it was taken.
	waitFor(t, 30*time.Second, "redis answering on "+fourth, func() (bool, string) {
		out, err := redisCmd("PING")
		return err == nil && out == "PONG", fmt.Sprint(out, err)
	})
	for i := 0; i < keys; i++ {
		if _, err := redisCmd("SET", fmt.Sprintf("late:%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	wrote := time.Now()
	waitFor(t, 30*time.Second, "a copy taken after the writes", func() (bool, string) {
		p, _, err := c.KV().Get(cluster.CopiesKey("cache", 0, "data"), nil)
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		cs, err := cluster.DecodeCopies(p.Value)
		return err == nil && len(cs) > 0 && cs[0].TakenAt.After(wrote.Add(time.Second)), fmt.Sprint(cs, err)
	})
	if _, err := redisCmd("SET", "lost", "x"); err != nil {
		t.Fatal(err)
	}
	_ = ms[fourth].cmd.Process.Kill()
	clientNamed(cl, fourth).Kill()
	killedAt := time.Now()
	fifth := holder(fourth)
	waitFor(t, 30*time.Second, "redis answering on "+fifth, func() (bool, string) {
		out, err := redisCmd("GET", fmt.Sprintf("late:%d", keys-1))
		return err == nil && out == "x", fmt.Sprint(out, err)
	})
	if out, _ := redisCmd("DBSIZE"); out != strconv.Itoa(2*keys) && out != strconv.Itoa(2*keys+1) {
		t.Errorf("DBSIZE %s after the loss, want %d (or %d with the last write)", out, 2*keys, 2*keys+1)
	}
	var note string
	recs, _, _ := c.KV().List(cluster.AuditPrefix, nil)
	for _, p := range recs {
		var e cluster.AuditEvent
		if json.Unmarshal(p.Value, &e) == nil && e.Action == "restore" && e.To == fifth {
			note = e.Reason
		}
	}
	if !strings.Contains(note, "restored from the copy of") {
		t.Fatalf("the restore record after the loss: %q", note)
	}
	// The instance's supervisor check says it too, as data.
	waitFor(t, 10*time.Second, "the supervisor check on "+fifth+" says which copy", func() (bool, string) {
		es, _, err := c.Health().Service("cache", "", false, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, e := range es {
			if sc := checkByID(e, e.Service.ID+":mariposa"); sc != nil && e.Node.Node == fifth {
				r, ok := report.Decode(sc.Output)
				return ok && r.Volumes == note, fmt.Sprintf("%+v", r)
			}
		}
		return false, "no instance on " + fifth
	})
	t.Logf("node %s killed; back on %s %s later from its newest copy: %s", fourth, fifth, time.Since(killedAt).Round(time.Millisecond), note)
}

// handoffOf reads handoffs/<unit>/<k>.
func handoffOf(t *testing.T, c *api.Client, unit string, k int) cluster.Handoff {
	t.Helper()
	p, _, err := c.KV().Get(cluster.HandoffKey(unit, k), nil)
	if err != nil || p == nil {
		t.Fatalf("no handoff of %s/%d: %v", unit, k, err)
	}
	var h cluster.Handoff
	if err := json.Unmarshal(p.Value, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// redisPID is the pid of the redis-server listening on port.
func redisPID(t *testing.T, port int) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", fmt.Sprintf("redis-server 127.0.0.1:%d", port)).Output()
	if err != nil {
		t.Fatalf("no redis-server on port %d: %v", port, err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(out))[0])
	return pid
}
