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
)

// Regression tests of issue 25 item 1: no acknowledged write is lost in a
// planned move of a slot with a snapshot volume.

// volumeFleet starts a real cluster (3 servers, 3 clients) with a mariposa
// -cluster on each client, its node API on and its volumes under
// root/<node>.
func volumeFleet(t *testing.T) (*consultest.Cluster, *api.Client, string, map[string]*mariposa) {
	t.Helper()
	cl := consultest.NewCluster(t, 3, 3)
	c := cl.Servers[0].Client(t)
	root := t.TempDir()
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startVolumeMariposa(t, a, root, "127.0.0.1:0")
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	return cl, c, root, ms
}

// startVolumeMariposa starts a mariposa -cluster on agent with its node
// API on addr and its volumes under root/<node>.
func startVolumeMariposa(t *testing.T, a *consultest.Agent, root, addr string) *mariposa {
	t.Helper()
	return startMariposa(t, a, nil, "-cluster", "-http-addr", addr,
		"-volume-dir", filepath.Join(root, a.Name), "-liveness-ttl", "2s")
}

// passingOn waits for unit's one instance to pass on a node other than
// the ones in not, and returns that node.
func passingOn(t *testing.T, c *api.Client, unit string, not ...string) string {
	t.Helper()
	var h string
	waitFor(t, 120*time.Second, unit+" passing on a node other than "+strings.Join(not, ","), func() (bool, string) {
		es, _, _ := c.Health().Service(unit, "", true, nil)
		if len(es) != 1 {
			return false, fmt.Sprint(len(es), slotHolders(t, c, unit))
		}
		for _, n := range not {
			if es[0].Node.Node == n {
				return false, n
			}
		}
		h = es[0].Node.Node
		return true, h
	})
	return h
}

// notesLine writes and reads the file "line" in the volume "data" of slot
// notes/0 on a node (volumes under root/<node>, as volumeFleet keeps
// them); read gives the error's text when there is no such file.
func notesLine(t *testing.T, root string) (write func(node, text string), read func(node string) string) {
	line := func(node string) string { return filepath.Join(root, node, "notes", "0", "data", "line") }
	write = func(node, text string) {
		t.Helper()
		if err := os.WriteFile(line(node), []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read = func(node string) string {
		b, err := os.ReadFile(line(node))
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(string(b))
	}
	return write, read
}

// auditOf is every audit record of a unit, oldest first.
func auditOf(t *testing.T, c *api.Client, unit string) []cluster.AuditEvent {
	t.Helper()
	recs, _, err := c.KV().List(cluster.AuditPrefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []cluster.AuditEvent
	for _, p := range recs {
		var e cluster.AuditEvent
		if json.Unmarshal(p.Value, &e) == nil && e.Service == unit {
			out = append(out, e)
		}
	}
	return out
}

// noRescheduleAfter fails the test if a node other than the first
// holders rescheduled the unit's slot since the records' index from (a
// failed restore is a reschedule).
func noReschedule(t *testing.T, recs []cluster.AuditEvent, from int) {
	t.Helper()
	for _, e := range recs[from:] {
		if e.Action == "reschedule" || e.Action == "fail" {
			t.Errorf("a %s of the slot in a planned move: %+v", e.Action, e)
		}
	}
}

// A line written into the volume on its holder survives its mariposa's
// stop (SIGINT): the stopping holder serves its snapshot until the next
// holder has it (issue 25: the node API had exited, the next holder's
// fetch was refused, it handed off its own empty volume, and a third node
// restored that). Then the second variant: the slot moves away from a
// node by a drain, comes back to it after a write elsewhere, and that
// node restores the newer handoff instead of keeping its own older copy.
func TestFleetVolumeStopHandsOff(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl, c, root, ms := volumeFleet(t)
	hcl := writeHCL(t, `
service "notes" {
  command   = ["/bin/sh", "-c", "exec sleep 3600"]
  count     = 1
  exclusive = true

  volume "data" {
    handoff = "snapshot"
  }
  stop {
    timeout = "5s"
  }
}
`)
	deploy(t, cl.Servers[0], "-name", "notes", hcl)
	write, read := notesLine(t, root)

	// The main case: SIGINT to the holder's mariposa.
	first := passingOn(t, c, "notes")
	write(first, "written on "+first)
	start := len(auditOf(t, c, "notes"))
	if code := ms[first].stop(t, syscall.SIGINT, 3*time.Minute); code != 0 {
		t.Fatalf("mariposa on %s exited %d", first, code)
	}
	second := passingOn(t, c, "notes", first)
	if got := read(second); got != "written on "+first {
		t.Fatalf("the volume on %s after %s's mariposa stopped: %q, want the line written on %s", second, first, got, first)
	}
	recs := auditOf(t, c, "notes")
	noReschedule(t, recs, start)
	var restored bool
	for _, e := range recs[start:] {
		if e.Action == "restore" && e.To == second && e.From == first {
			restored = true
		}
	}
	if !restored {
		t.Errorf("no restore record from %s to %s: %+v", first, second, recs[start:])
	}
	ho := handoffOf(t, c, "notes", 0)
	if ho.Node != first || ho.Restored == nil || ho.Restored.Node != second {
		t.Errorf("the handoff after the stop: %+v, want one from %s restored by %s", ho, first, second)
	}

	// Variant: drain second to third; undo the drain; write on third;
	// stop third's mariposa: the slot comes back to second (the only node
	// left), which must restore third's handoff, not keep its own copy.
	third := ""
	for n := range ms {
		if n != first && n != second {
			third = n
		}
	}
	write(second, "written on "+second)
	if out, err := exec.Command(mariposaBin, "drain", "-consul-addr", cl.Servers[0].HTTPAddr(), "-wait", "-deadline", "2m", second).CombinedOutput(); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	if got := passingOn(t, c, "notes", first, second); got != third {
		t.Fatalf("drained to %s, want %s", got, third)
	}
	if got := read(third); got != "written on "+second {
		t.Fatalf("the volume on %s after the drain: %q", third, got)
	}
	if out, err := exec.Command(mariposaBin, "drain", "-consul-addr", cl.Servers[0].HTTPAddr(), "-undo", second).CombinedOutput(); err != nil {
		t.Fatalf("drain -undo: %v\n%s", err, out)
	}
	write(third, "written on "+third)
	start = len(auditOf(t, c, "notes"))
	if code := ms[third].stop(t, syscall.SIGINT, 3*time.Minute); code != 0 {
		t.Fatalf("mariposa on %s exited %d", third, code)
	}
	if got := passingOn(t, c, "notes", first, third); got != second {
		t.Fatalf("the slot went to %s, want %s", got, second)
	}
	if got := read(second); got != "written on "+third {
		t.Fatalf("the volume on %s after %s's mariposa stopped: %q, want the line written on %s (its own older copy kept?)", second, third, got, third)
	}
	noReschedule(t, auditOf(t, c, "notes"), start)
	if ho := handoffOf(t, c, "notes", 0); ho.Node != third || ho.Restored == nil || ho.Restored.Node != second {
		t.Errorf("the handoff after the second stop: %+v, want one from %s restored by %s", ho, third, second)
	}
}

// A snapshot hook that cannot run once the instance has stopped
// (`redis-cli save`, in a planned move) does not move the slot without its
// data: the stopped directory is handed off as it is, with a warning in
// the handoff and the record, and every key is on the next holder.
func TestFleetVolumeHookFailsInPlannedMove(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	redis, err := exec.LookPath("redis-server")
	consultest.Require(t, err == nil, "redis-server (Debian package redis-server) is not installed")
	cli, err := exec.LookPath("redis-cli")
	consultest.Require(t, err == nil, "redis-cli (Debian package redis-tools) is not installed")
	cl, c, _, _ := volumeFleet(t)
	port := freePort(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "cache" {
  command   = ["/bin/sh", "-c", "exec %s --port %d --bind 127.0.0.1 --dir \"$MARIPOSA_VOLUME_DATA\" --appendonly yes --save ''"]
  port      = %d
  count     = 1
  exclusive = true

  volume "data" {
    handoff  = "snapshot"
    snapshot = ["%s", "-p", "%d", "save"]
  }
  check "up" {
    tcp      = "127.0.0.1:%d"
    interval = "500ms"
  }
  stop {
    timeout = "10s"
  }
}
`, redis, port, port, cli, port, port))
	deploy(t, cl.Servers[0], "-name", "cache", hcl)
	redisCmd := func(args ...string) (string, error) {
		out, err := exec.Command(cli, append([]string{"-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	first := passingOn(t, c, "cache")
	const keys = 100
	for i := 0; i < keys; i++ {
		if out, err := redisCmd("SET", fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i)); err != nil || out != "OK" {
			t.Fatalf("SET: %v %s", err, out)
		}
	}
	if out, err := exec.Command(mariposaBin, "drain", "-consul-addr", cl.Servers[0].HTTPAddr(), "-wait", "-deadline", "2m", first).CombinedOutput(); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	second := passingOn(t, c, "cache", first)
	waitFor(t, 30*time.Second, "redis answering on "+second, func() (bool, string) {
		out, err := redisCmd("DBSIZE")
		return err == nil && out == strconv.Itoa(keys), fmt.Sprint(out, err)
	})
	ho := handoffOf(t, c, "cache", 0)
	if ho.Node != first || ho.HookFailed["data"] == "" {
		t.Errorf("the handoff: %+v, want one from %s that says its snapshot hook failed", ho, first)
	}
}

// A stop that cannot wait for a next holder (no other supervisor is live:
// here they are frozen) leaves the data on the stopped node (recorded:
// handoff-unserved); the next holders, whose fetches fail, pass
// the handoff on instead of handing off their own empty volumes (issue
// 25: the next holder then restored an empty volume, or a node kept its
// own older copy), and once the stopped node's mariposa runs again the
// line written on it is on the slot's holder.
func TestFleetVolumeStopCutShort(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewCluster(t, 3, 3)
	c := cl.Servers[0].Client(t)
	root := t.TempDir()
	ms, addrs := map[string]*mariposa{}, map[string]string{}
	for _, a := range cl.Clients {
		addrs[a.Name] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		ms[a.Name] = startVolumeMariposa(t, a, root, addrs[a.Name])
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	hcl := writeHCL(t, `
service "notes" {
  command   = ["/bin/sh", "-c", "exec sleep 3600"]
  count     = 1
  exclusive = true

  volume "data" {
    handoff         = "snapshot"
    restore_timeout = "20s"
  }
  reschedule {
    attempts       = 50
    interval       = "1h"
    delay          = "1s"
    delay_function = "constant"
    penalty        = "1s"
  }
}
`)
	deploy(t, cl.Servers[0], "-name", "notes", hcl)
	line := func(node string) string { return filepath.Join(root, node, "notes", "0", "data", "line") }
	first := passingOn(t, c, "notes")
	if err := os.WriteFile(line(first), []byte("written on "+first+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The other supervisors frozen (their liveness checks critical),
	// first's stop finds no other supervisor live to take the slot, and
	// stops serving its handoff at once, with a record.
	var others []*mariposa
	for n, m := range ms {
		if n != first {
			others = append(others, m)
			if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			for _, m := range others {
				_ = m.cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	}
	defer thaw()
	waitFor(t, 60*time.Second, "only "+first+"'s supervisor passing", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == 1, fmt.Sprint(live)
	})
	if code := ms[first].stop(t, syscall.SIGINT, 2*time.Minute); code != 0 {
		t.Fatalf("mariposa on %s exited %d", first, code)
	}
	var unserved bool
	for _, e := range auditOf(t, c, "notes") {
		if e.Action == "handoff-unserved" && e.Node == first {
			unserved = true
		}
	}
	if !unserved {
		t.Errorf("no handoff-unserved record from %s", first)
	}
	thaw()
	// The others try and fail to fetch it (a reschedule record by another
	// node), and pass the handoff on: it stays first's.
	waitFor(t, 90*time.Second, "another node failing to fetch the data", func() (bool, string) {
		for _, e := range auditOf(t, c, "notes") {
			if e.Action == "reschedule" && e.Node != first {
				return true, e.Reason
			}
		}
		return false, ""
	})
	if ho := handoffOf(t, c, "notes", 0); ho.Node != first || ho.ForwardedBy == "" {
		t.Errorf("the handoff after a failed fetch: %+v, want first's (%s) passed on", ho, first)
	}
	// first's mariposa runs again, its node API where it was: the data
	// reaches the slot's holder, whichever node it is.
	ms[first] = startVolumeMariposa(t, clientNamed(cl, first), root, addrs[first])
	var holder string
	waitFor(t, 3*time.Minute, "the line written on "+first+" on a passing holder", func() (bool, string) {
		es, _, _ := c.Health().Service("notes", "", true, nil)
		if len(es) != 1 {
			return false, fmt.Sprint(len(es), slotHolders(t, c, "notes"))
		}
		holder = es[0].Node.Node
		b, err := os.ReadFile(line(holder))
		return err == nil && strings.TrimSpace(string(b)) == "written on "+first, fmt.Sprint(holder, " ", string(b), err)
	})
	t.Logf("the data written on %s reached %s", first, holder)
}
