package command

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// writeAudit writes records as the fleet does: each in a transaction.
func writeAudit(t *testing.T, c *api.Client, evs ...cluster.AuditEvent) {
	t.Helper()
	for _, e := range evs {
		ok, resp, _, err := c.Txn().Txn(api.TxnOps{cluster.AuditOp(e)}, nil)
		if err != nil || !ok {
			t.Fatalf("writing %+v: %v %+v", e, err, resp)
		}
	}
}

func runEvents(t *testing.T, agent *consultest.Agent, now func() time.Time, args ...string) (int, string, string) {
	t.Helper()
	ui := cli.NewMockUi()
	// No audit file of this machine's mariposa unless the test gives one.
	code := (&EventsCommand{UI: ui, now: now}).Run(append([]string{"-consul-addr", agent.HTTPAddr(),
		"-audit-file", filepath.Join(t.TempDir(), "none.jsonl")}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

// The website's example: a deploy, its claims and success, then a node's
// instance exhausting its restarts and its slot moving.
func exampleEvents() (now time.Time, evs []cluster.AuditEvent) {
	at := func(s string) time.Time {
		t, _ := time.Parse(time.RFC3339, "2026-11-23T"+s+"Z")
		return t
	}
	return at("10:30:00"), []cluster.AuditEvent{
		{At: at("08:55:00"), Node: "node-1", Service: "web", Slot: "web/0", Action: "claim", To: "node-1", Reason: "rank 0"},
		{At: at("10:02:11"), Node: "-", Actor: "alice@ops-1", Service: "web", Action: "deploy", From: "1", To: "2", Reason: "spec 3f9a2c1e"},
		{At: at("10:02:12"), Node: "node-1", Service: "web", Slot: "web/0", Action: "healthy", To: "3f9a2c1e", Reason: "healthy for min_healthy_time", TermIndex: 40},
		{At: at("10:02:14"), Node: "node-2", Service: "web", Slot: "web/1", Action: "healthy", To: "3f9a2c1e", Reason: "healthy for min_healthy_time", TermIndex: 52},
		{At: at("10:02:15"), Node: "node-1", Service: "web", Action: "deploy-successful", To: "2", Reason: "every instance healthy at spec 3f9a2c1e"},
		{At: at("10:14:07"), Node: "node-2", Service: "web", Slot: "web/1", Action: "reschedule", From: "node-2", To: "released",
			Reason: "rescheduled: web: failed: 3 restarts in 10m (last: exit 1)", TermIndex: 52},
		{At: at("10:14:08"), Node: "node-3", Service: "web", Slot: "web/1", Action: "claim", From: "node-2", To: "node-3", Reason: "rank 0"},
		{At: at("10:20:41"), Node: "node-3", Service: "db", Slot: "db/0", Action: "claim", To: "node-3", Reason: "rank 0"},
	}
}

func TestEvents(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	now, evs := exampleEvents()
	clock := func() time.Time { return now }
	writeAudit(t, c, evs...)
	// A corrupt record (written by hand): reported and skipped.
	corrupt := cluster.AuditDay(now) + "00000000000000000000-hand-1"
	if _, err := c.KV().Put(&api.KVPair{Key: corrupt, Value: []byte("{oops")}, nil); err != nil {
		t.Fatal(err)
	}
	// A record of yesterday, outside any window below but -since 48h.
	writeAudit(t, c, cluster.AuditEvent{At: now.Add(-26 * time.Hour), Node: "node-1", Service: "web", Slot: "web/0", Action: "release",
		From: "node-1", To: "released", Reason: "mariposa stopped"})

	code, out, errOut := runEvents(t, agent, clock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "mariposa events: skipping the corrupt record " + corrupt + ": "; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[0], "TIME ") {
		t.Fatalf("the last hour: %d lines:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[1], "2026-11-23T10:02:11Z") || !strings.Contains(lines[1], "alice@ops-1") ||
		!strings.Contains(lines[1], "1 -> 2") || !strings.HasSuffix(lines[1], "spec 3f9a2c1e") {
		t.Errorf("the deploy: %q", lines[1])
	}
	if !strings.Contains(lines[6], "web/1") || !strings.Contains(lines[6], "node-2 -> node-3") {
		t.Errorf("the claim of web/1: %q", lines[6])
	}
	page, err := os.ReadFile("../website/commands/events.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "$ mariposa events\n"+out) {
		t.Errorf("events.md does not show what mariposa events prints:\n%s", out)
	}

	// Filters.
	count := func(args ...string) (int, string) {
		t.Helper()
		code, out, errOut := runEvents(t, agent, clock, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if strings.HasPrefix(out, "No events") {
			return 0, out
		}
		return strings.Count(out, "\n") - 1, out // the header
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-service", "web"}, 6},
		{[]string{"-service", "web/1"}, 3},
		{[]string{"-service", "db"}, 1},
		{[]string{"-node", "node-2"}, 3}, // node-2's records, and the claim of its slot by node-3
		{[]string{"-node", "node-3", "-service", "web"}, 1},
		{[]string{"-since", "10m"}, 1},
		{[]string{"-since", "3h"}, 8},
		{[]string{"-since", "48h"}, 9},
		{[]string{"-service", "nothing"}, 0},
	} {
		if n, out := count(tc.args...); n != tc.want {
			t.Errorf("%v: %d records, want %d:\n%s", tc.args, n, tc.want, out)
		}
	}
	if _, out := count("-node", "node-9", "-since", "2h"); out != "No events in the last 2h0m0s involving node node-9.\n" {
		t.Errorf("none: %q", out)
	}
	// The web/1 filter shows the page's second example.
	_, out, _ = runEvents(t, agent, clock, "-service", "web/1")
	if !strings.Contains(string(page), "$ mariposa events -service web/1\n"+out) {
		t.Errorf("events.md does not show what -service web/1 prints:\n%s", out)
	}

	// -json: one record a line, as stored.
	code, out, _ = runEvents(t, agent, clock, "-json", "-service", "web/1")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("-json: exit %d:\n%s", code, out)
	}
	for i, l := range lines {
		var ev cluster.AuditEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("-json line %d: %v: %q", i, err, l)
		}
		if want := evs[[]int{3, 5, 6}[i]]; ev.Action != want.Action || !ev.At.Equal(want.At) || ev.TermIndex != want.TermIndex {
			t.Errorf("-json line %d: %+v, want %+v", i, ev, want)
		}
	}
	if !strings.Contains(string(page), "$ mariposa events -json -service web/1\n"+out) {
		t.Errorf("events.md does not show what -json prints:\n%s", out)
	}
	if code, out, _ := runEvents(t, agent, clock, "-json", "-service", "nothing"); code != 0 || out != "" {
		t.Errorf("-json with no record: exit %d, %q", code, out)
	}

	// Usage errors.
	for _, args := range [][]string{{"web"}, {"-since", "0s"}, {"-since", "soon"}} {
		if code, _, errOut := runEvents(t, agent, clock, args...); code != 1 || !strings.HasPrefix(errOut, "mariposa events: ") {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
	if code, _, errOut := runEvents(t, agent, clock, "-consul-addr", "127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "reading mariposa/audit/") {
		t.Errorf("no Consul: exit %d, %q", code, errOut)
	}
}

// follow starts events -follow and returns its UI and a stop that waits
// for it to return.
func follow(t *testing.T, agent *consultest.Agent, now func() time.Time, args ...string) (*cli.MockUi, func() int) {
	t.Helper()
	ui := cli.NewMockUi()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- (&EventsCommand{UI: ui, Context: ctx, now: now}).Run(append([]string{"-consul-addr", agent.HTTPAddr(), "-follow"}, args...))
	}()
	stop := func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(5 * time.Second):
			t.Fatal("events -follow did not end within 5s of its interrupt")
			return -1
		}
	}
	t.Cleanup(func() { cancel() })
	return ui, stop
}

// waitOutput waits until the output holds want, for at most d.
func waitOutput(ui *cli.MockUi, want string, d time.Duration) bool {
	return consultest.WaitFor(d, func() bool { return strings.Contains(ui.OutputWriter.String(), want) })
}

// -follow prints a record another writer commits within a second (a
// blocking query, not polling), in time order, filtered, and only once.
func TestEventsFollow(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	writeAudit(t, c, cluster.AuditEvent{At: time.Now().Add(-time.Minute), Node: "node-1", Service: "web", Slot: "web/0",
		Action: "claim", To: "node-1", Reason: "rank 0"})
	ui, stop := follow(t, agent, nil, "-service", "web")
	if !waitOutput(ui, "node-1", 10*time.Second) {
		t.Fatalf("the earlier record was not printed: %q", ui.OutputWriter.String())
	}
	time.Sleep(200 * time.Millisecond) // the blocking query is waiting

	for i, reason := range []string{"first move", "second move"} {
		// Another service's record first: filtered out.
		writeAudit(t, c, cluster.AuditEvent{At: time.Now(), Node: "node-2", Service: "db", Slot: "db/0", Action: "claim",
			To: "node-2", Reason: "db " + reason})
		start := time.Now()
		writeAudit(t, c, cluster.AuditEvent{At: time.Now(), Node: "node-2", Service: "web", Slot: "web/0", Action: "reschedule",
			From: "node-2", To: "released", Reason: reason})
		if !waitOutput(ui, reason, time.Second+500*time.Millisecond) {
			t.Fatalf("move %d not printed within 1.5s: %q", i, ui.OutputWriter.String())
		}
		t.Logf("move %d printed %s after its write", i, time.Since(start).Round(time.Millisecond))
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	out := ui.OutputWriter.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TIME ") || strings.Contains(out, "db/0") ||
		!strings.HasSuffix(lines[2], "first move") || !strings.HasSuffix(lines[3], "second move") {
		t.Fatalf("output:\n%s", out)
	}
	if e := ui.ErrorWriter.String(); e != "" {
		t.Fatalf("stderr %q", e)
	}
}

// At midnight UTC -follow moves on to the new day's prefix, after a last
// read of the day that ended, and a corrupt record is reported once.
func TestEventsFollowMidnight(t *testing.T) {
	defer func(g time.Duration) { dayGrace = g }(dayGrace)
	dayGrace = 300 * time.Millisecond
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	// A clock 1.5 s before midnight.
	real := time.Now()
	midnight := real.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	offset := midnight.Add(-1500 * time.Millisecond).Sub(real)
	clock := func() time.Time { return time.Now().Add(offset) }

	ui, stop := follow(t, agent, clock, "-json")
	time.Sleep(300 * time.Millisecond)
	writeAudit(t, c, cluster.AuditEvent{At: clock(), Node: "node-1", Action: "storm-brake", Reason: "before midnight"})
	if !waitOutput(ui, "before midnight", 1500*time.Millisecond) {
		t.Fatalf("the day's record: %q", ui.OutputWriter.String())
	}
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.AuditDay(clock()) + "x", Value: []byte("nope")}, nil); err != nil {
		t.Fatal(err)
	}
	// After midnight and the grace: the next day's records.
	time.Sleep(time.Until(midnight.Add(-offset).Add(dayGrace + 200*time.Millisecond)))
	writeAudit(t, c, cluster.AuditEvent{At: clock(), Node: "node-1", Actor: "op", Action: "resume", Reason: "after midnight"})
	if !waitOutput(ui, "after midnight", 1500*time.Millisecond) {
		t.Fatalf("the next day's record: %q", ui.OutputWriter.String())
	}
	stop()
	if got := strings.Count(ui.ErrorWriter.String(), "skipping the corrupt record"); got != 1 {
		t.Fatalf("the corrupt record reported %d times: %q", got, ui.ErrorWriter.String())
	}
	if got := strings.Count(ui.OutputWriter.String(), "\n"); got != 2 {
		t.Fatalf("%d lines:\n%s", got, ui.OutputWriter.String())
	}
}

// Every action the fleet records (the operator's commands' and the step
// machine's) and every kind of instance event is documented in
// website/operations.md.
func TestAuditDocs(t *testing.T) {
	page, err := os.ReadFile("../website/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // name -> where
	scan := func(glob string, re *regexp.Regexp) {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = f
			}
		}
	}
	// The fleet's records: the operator's commands (cluster) and the step
	// machine's decisions (fleet/agent, fleet/executor), less the actions
	// the step machine only logs (fleet/agent's logged: never written).
	action := regexp.MustCompile(`(?:Action:\s*|action\s*:?=\s*)"([a-z-]+)"`)
	for _, glob := range []string{"../cluster/*.go", "../fleet/agent/*.go", "../fleet/executor/*.go"} {
		scan(glob, action)
	}
	records, err := os.ReadFile("../fleet/agent/records.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`var logged = map\[string\]bool\{([^}]*)\}`).FindSubmatch(records)
	if m == nil {
		t.Fatal("fleet/agent/records.go: no logged map")
	}
	for _, l := range regexp.MustCompile(`"([a-z-]+)": true`).FindAllSubmatch(m[1], -1) {
		delete(names, string(l[1]))
	}
	scan("../supervisor/events.go", regexp.MustCompile(`EventKind\s*=\s*"([a-z-]+)"`))
	for _, want := range []string{"claim", "release", "reschedule", "fail", "deploy", "started", "exited"} {
		if names[want] == "" {
			t.Fatalf("the scan did not find %q: %v", want, names)
		}
	}
	for name, where := range names {
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("website/operations.md does not document %q (%s)", name, where)
		}
	}
}

// TestEventsLocal (issue 25 item 8): a node outside the fleet has no fleet
// records, only its audit file's instance events. Without -local, events
// says how many there are and how to see them; -local merges them with
// the fleet's records in time order (filters apply; -json prints them as
// records); -local with no audit file, or with -follow, is refused.
func TestEventsLocal(t *testing.T) {
	agent := consultest.NewDev(t)
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	var lines []string
	add := func(e supervisor.Event) {
		b, _ := json.Marshal(e)
		lines = append(lines, string(b))
	}
	add(supervisor.Event{Time: now.Add(-2 * time.Hour), Node: "n1", Service: "crash", ServiceID: "crash-n1", Kind: supervisor.EventRestarting, Reason: "too old"})
	for i := range 5 {
		at := now.Add(time.Duration(i-10) * time.Minute)
		add(supervisor.Event{Time: at, Node: "n1", Service: "crash", ServiceID: "crash-n1", Kind: supervisor.EventExited, PID: 100 + i, Reason: "exit 1"})
		add(supervisor.Event{Time: at.Add(time.Second), Node: "n1", Service: "crash", ServiceID: "crash-n1", Kind: supervisor.EventRestarting, Reason: "restarting after exit 1"})
	}
	add(supervisor.Event{Time: now.Add(-time.Minute), Node: "n1", Service: "web", ServiceID: "web-n1", Kind: supervisor.EventStarted, PID: 7})
	// The older half in the rotated file, as the audit file rotates.
	if err := os.WriteFile(file+".1", []byte(strings.Join(lines[:4], "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines[4:], "\n")+"\n{torn"), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runEvents(t, agent, clock, "-audit-file", file)
	if code != 0 || out != "No events in the last 1h0m0s.\nThis machine's mariposa recorded 11 events of its own in that time (restarts, exits, health): mariposa events -local shows them.\n" {
		t.Errorf("without -local: exit %d %q %s", code, out, errOut)
	}
	code, out, errOut = runEvents(t, agent, clock, "-audit-file", file, "-local", "-service", "crash")
	rows := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(rows) != 11 || !strings.HasPrefix(rows[0], "TIME ") {
		t.Fatalf("-local -service crash: exit %d %s\n%s", code, errOut, out)
	}
	if f := strings.Fields(rows[2]); f[0] != "2026-11-23T10:20:01Z" || f[1] != "n1" || f[2] != "crash" || f[3] != "restarting" || !strings.HasSuffix(rows[2], "restarting after exit 1") {
		t.Errorf("a restart: %q", rows[2])
	}
	if f := strings.Fields(rows[1]); f[3] != "exited" || !strings.HasSuffix(rows[1], "exit 1") {
		t.Errorf("an exit: %q", rows[1])
	}
	// Merged with the fleet's records, in time order.
	writeAudit(t, agent.Client(t), cluster.AuditEvent{At: now.Add(-5*time.Minute - 30*time.Second), Node: "-", Actor: "ops", Action: "pause", To: "all", Reason: "the fleet: incident"})
	code, out, _ = runEvents(t, agent, clock, "-audit-file", file, "-local", "-since", "6m")
	rows = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(rows) != 5 || !strings.Contains(rows[1], "exited") || !strings.Contains(rows[2], "restarting") ||
		!strings.Contains(rows[3], "pause") || !strings.Contains(rows[4], "web") {
		t.Errorf("merged: exit %d %d rows\n%s", code, len(rows), out)
	}
	if page := commandPage(t, "events"); !strings.Contains(page, "$ mariposa events -local -since 6m\n"+out) {
		t.Errorf("events.md does not show what events -local prints:\n%s", out)
	}
	code, out, _ = runEvents(t, agent, clock, "-audit-file", file, "-local", "-json", "-service", "web")
	var ev cluster.AuditEvent
	if code != 0 || json.Unmarshal([]byte(out), &ev) != nil || ev.Action != "started" || ev.Node != "n1" || ev.Reason != "pid 7" {
		t.Errorf("-json: exit %d %q", code, out)
	}
	if code, _, errOut := runEvents(t, agent, clock, "-local"); code != 1 || !strings.Contains(errOut, "-local: no audit file at ") {
		t.Errorf("-local without a file: exit %d %q", code, errOut)
	}
	if code, _, errOut := runEvents(t, agent, clock, "-local", "-follow"); code != 1 || !strings.Contains(errOut, "-local cannot be followed") {
		t.Errorf("-local -follow: exit %d %q", code, errOut)
	}
}
