package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// kvIndex is the index of everything under mariposa/: it moves with every
// write there, deletes included.
func kvIndex(t *testing.T, c *api.Client) uint64 {
	t.Helper()
	_, meta, err := c.KV().List(cluster.Prefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return meta.LastIndex
}

// keysSince lists the keys under mariposa/ written after index idx (a
// key deleted since shows only in the index).
func keysSince(t *testing.T, c *api.Client, idx uint64) []string {
	t.Helper()
	pairs, _, _ := c.KV().List(cluster.Prefix, &api.QueryOptions{RequireConsistent: true})
	var moved []string
	for _, p := range pairs {
		if p.ModifyIndex > idx {
			moved = append(moved, fmt.Sprintf("%s@%d", p.Key, p.ModifyIndex))
		}
	}
	return moved
}

// The audit log of one node of a fleet, end to end: the node's audit file
// holds its instance's events as JSON lines; the fleet deletes an audit day
// past retention shortly after it starts; mariposa events prints the
// node's claim; and once the instance runs, the idle fleet writes nothing:
// no KV write under mariposa/ (no audit record), no line in the file.
func TestFleetAuditIdle(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	// An old day, past the default retention.
	old := cluster.AuditEvent{At: time.Now().Add(-10 * 24 * time.Hour), Node: "gone", Service: "web", Action: "claim", Reason: "old"}
	if ok, _, _, err := c.Txn().Txn(api.TxnOps{cluster.AuditOp(old)}, nil); err != nil || !ok {
		t.Fatal(ok, err)
	}
	oldDay := cluster.AuditDay(old.At)
	auditFile := filepath.Join(t.TempDir(), "audit", "events.jsonl")
	startMariposa(t, agent, nil, "-cluster", "-audit-file", auditFile)
	waitFor(t, 30*time.Second, "the supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == 1, ""
	})
	// -wait: the deployment ends (its instance healthy for
	// min_healthy_time, 10 s, then successful) before the fleet is idle:
	// a deployment under way writes its holder's status and its moves.
	deploy(t, agent, "-wait", writeHCL(t, `
service "idle" {
  command = ["sleep", "600"]
  count   = 1
}
`))
	waitFor(t, 30*time.Second, "idle running", func() (bool, string) {
		return len(passingInstances(c, "idle")) == 1, ""
	})
	waitFor(t, 30*time.Second, "the old audit day deleted", func() (bool, string) {
		keys, _, _ := c.KV().Keys(oldDay, "", nil)
		return len(keys) == 0, fmt.Sprint(keys)
	})

	// The node's audit file: the instance's start, with its node and slot.
	var started bool
	waitFor(t, 10*time.Second, "the start in the audit file", func() (bool, string) {
		b, _ := os.ReadFile(auditFile)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e supervisor.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				return false, fmt.Sprintf("a line does not parse: %v: %q", err, l)
			}
			started = started || e.Kind == supervisor.EventStarted && e.Service == "idle" && e.Slot == "idle/0" &&
				e.Node == agent.Name && e.PID > 0
		}
		return started, string(b)
	})
	if fi, err := os.Stat(auditFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file: %v %v", fi, err)
	}

	// mariposa events, from the binary: the node's claim.
	out, err := exec.Command(mariposaBin, "events", "-consul-addr", agent.HTTPAddr(), "-json", "-service", "idle").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"action":"claim"`) || !strings.Contains(string(out), `"slot":"idle/0"`) {
		t.Fatalf("mariposa events: %v\n%s", err, out)
	}

	// Idle: a settled fleet of one node with one instance writes nothing.
	// Settled: the KV index under mariposa/ holds between two looks.
	last := kvIndex(t, c)
	waitFor(t, 30*time.Second, "the fleet settled", func() (bool, string) {
		now := kvIndex(t, c)
		same := now == last
		last = now
		return same, fmt.Sprint(now)
	})
	idx := kvIndex(t, c)
	fi, _ := os.Stat(auditFile)
	records, _, _ := c.KV().Keys(cluster.AuditPrefix, "", nil)
	const idle = 20 * time.Second
	consistently(t, idle, "nothing written while idle", func() (bool, string) {
		now := kvIndex(t, c)
		return now == idx, fmt.Sprintf("index %d -> %d, keys written since: %v", idx, now, keysSince(t, c, idx))
	})
	after := kvIndex(t, c)
	fi2, _ := os.Stat(auditFile)
	records2, _, _ := c.KV().Keys(cluster.AuditPrefix, "", nil)
	t.Logf("idle for %s: KV index under mariposa/ %d -> %d, audit records %d -> %d, audit file %d -> %d bytes",
		idle, idx, after, len(records), len(records2), fi.Size(), fi2.Size())
	if after != idx || len(records2) != len(records) {
		t.Errorf("the idle fleet wrote under mariposa/: index %d -> %d, keys %v", idx, after, keysSince(t, c, idx))
	}
	if fi2.Size() != fi.Size() {
		t.Errorf("the idle node wrote to its audit file: %d -> %d bytes", fi.Size(), fi2.Size())
	}
}

// followedLine is a line mariposa events -follow printed, and when.
type followedLine struct {
	at   time.Time
	text string
}

// The acceptance: `events -follow` on one node sees another node's
// reschedule within a second. A fleet of two nodes; mariposa events
// -follow runs against the first node's agent; a service that exhausts its
// restarts is rescheduled between the nodes until its slot fails. Each
// record shows in the follower within a second of its writer's "at" (the
// same machine's clock), and the follower misses none of them.
func TestFleetEventsFollowReschedule(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 2})
	c := cl.Servers[0].Client(t)
	fleetOf(t, cl)
	watcher := cl.Clients[0]

	cmd := exec.Command(mariposaBin, "events", "-follow", "-json", "-service", "flaky", "-consul-addr", watcher.HTTPAddr())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []followedLine
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, followedLine{time.Now(), sc.Text()})
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	time.Sleep(500 * time.Millisecond) // the follower is waiting

	deploy(t, cl.Servers[0], writeHCL(t, `
service "flaky" {
  command = ["/bin/sh", "-c", "exit 3"]
  count   = 1
  restart {
    attempts     = 1
    delay        = "100ms"
    on_exhausted = "reschedule"
  }
  reschedule {
    attempts = 2
    interval = "1h"
    delay    = "1s"
  }
}
`))
	waitFor(t, 60*time.Second, "flaky's slot failed after its reschedules", func() (bool, string) {
		p, _, err := c.KV().Get(cluster.SlotKey("flaky", 0), nil)
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		v, _ := cluster.DecodeSlotValue(p.Value)
		return p.Session == "" && v.State == cluster.SlotFailed, fmt.Sprintf("%+v", v)
	})
	// flaky's records: those written by now, and by the end (the
	// deployment's failure may come later).
	records := func() map[string]cluster.AuditEvent {
		recs, _, err := c.KV().List(cluster.AuditPrefix, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]cluster.AuditEvent{}
		for _, p := range recs {
			var e cluster.AuditEvent
			// As -service flaky: the unit's records, and those of its
			// deployment that name it (deploy-failed names the unit as
			// the slot).
			if json.Unmarshal(p.Value, &e) == nil && (e.Service == "flaky" || e.Slot == "flaky" || strings.HasPrefix(e.Slot, "flaky/")) {
				out[string(p.Value)] = e
			}
		}
		return out
	}
	time.Sleep(2 * time.Second)
	want := records()
	waitFor(t, 5*time.Second, "every record of flaky followed", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(lines) >= len(want), fmt.Sprintf("%d of %d", len(lines), len(want))
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-readDone:
	case <-time.After(5 * time.Second):
		t.Fatal("mariposa events -follow did not end on SIGINT")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("mariposa events -follow: %v; stderr %q", err, stderr.String())
	}

	all := records()
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	var slowest time.Duration
	others, reschedules := 0, 0
	for _, l := range lines {
		e, ok := all[l.text]
		if !ok {
			t.Errorf("followed a line that is not one of flaky's records: %q", l.text)
			continue
		}
		seen[l.text] = true
		lag := l.at.Sub(e.At)
		t.Logf("%-14s by %-18s shown %4dms after its at", e.Action, e.Node, lag.Milliseconds())
		if e.Node != watcher.Name {
			others++
			slowest = max(slowest, lag)
			if e.Action == "reschedule" {
				reschedules++
			}
			if lag > time.Second {
				t.Errorf("%s by %s shown %s after it was written, more than a second", e.Action, e.Node, lag)
			}
		}
	}
	for text := range want {
		if !seen[text] {
			t.Errorf("not followed: %s", text)
		}
	}
	if reschedules == 0 {
		t.Errorf("no reschedule by the other node was followed (%d records by it)", others)
	}
	// The reschedule delay (1s, then 2s: exponential): the claim that
	// follows a reschedule comes no sooner than its delay after it (less
	// the moments between the failure and its record).
	evs := make([]cluster.AuditEvent, 0, len(all))
	for _, e := range all {
		evs = append(evs, e)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	n := 0
	for i, e := range evs {
		if e.Action != "reschedule" {
			continue
		}
		delay := time.Second << n
		n++
		for _, next := range evs[i+1:] {
			if next.Action == "claim" {
				if gap := next.At.Sub(e.At); gap < delay-250*time.Millisecond {
					t.Errorf("%s claimed by %s %s after its reschedule by %s: before the reschedule delay (%s)", next.Slot, next.Node, gap, e.Node, delay)
				}
				break
			}
		}
	}
	t.Logf("slowest record of another node: %s", slowest)
}

// documentedActions are the actions of website/operations.md's table of
// the audit log (its rows "| `action` | ...", after "The actions:").
func documentedActions(t *testing.T) map[string]bool {
	t.Helper()
	page := readFile(t, "../website/operations.md")
	_, table, ok := strings.Cut(page, "\nThe actions:\n")
	if !ok {
		t.Fatal("website/operations.md has no table of the audit log's actions")
	}
	out := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| `") {
			a, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			out[a] = true
		} else if len(out) > 0 && !strings.HasPrefix(line, "|") {
			break
		}
	}
	return out
}

// eventsJSON is what mariposa events -json prints with args, decoded.
func eventsJSON(t *testing.T, agent *consultest.Agent, args ...string) []cluster.AuditEvent {
	t.Helper()
	cmd := exec.Command(mariposaBin, append([]string{"events", "-json", "-since", "1h", "-consul-addr", agent.HTTPAddr()}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mariposa events %v: %v", args, err)
	}
	var evs []cluster.AuditEvent
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var e cluster.AuditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("mariposa events -json printed %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// checkTakeoverEvents checks, through mariposa events and its filters, the
// story of slot lost with node victim, in the words of
// website/operations.md: every record's action is one of its table (no
// "takeover", no "lost"), and the slot's takeover is the next holder's
// claim, "rank N; takeover from a lost node", from victim to the holder,
// shown by -node victim (it moves a slot from it) and by -service slot.
func checkTakeoverEvents(t *testing.T, agent *consultest.Agent, slot, victim, holder string) {
	t.Helper()
	documented := documentedActions(t)
	unit := auditUnit(slot)
	for _, e := range eventsJSON(t, agent, "-service", unit) {
		if !documented[e.Action] {
			t.Errorf("record %+v: action %q is not in website/operations.md's table", e, e.Action)
		}
	}
	takeover := regexp.MustCompile(`^rank [0-9]+; takeover from a lost node$`)
	var found []string
	for _, e := range eventsJSON(t, agent, "-service", slot, "-node", victim) {
		found = append(found, fmt.Sprintf("%s %s %s->%s %q", e.Node, e.Action, e.From, e.To, e.Reason))
		if e.Action == "claim" && e.Slot == slot && e.From == victim && e.To == holder && e.Node == holder && takeover.MatchString(e.Reason) {
			return
		}
	}
	t.Errorf("mariposa events -service %s -node %s shows no claim of %s by %s from %s saying its rank and \"takeover from a lost node\": %v",
		slot, victim, slot, holder, victim, found)
}

// auditUnit is the unit of slot "<unit>/<k>".
func auditUnit(slot string) string {
	if i := strings.LastIndexByte(slot, '/'); i > 0 {
		return slot[:i]
	}
	return slot
}
