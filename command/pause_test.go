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

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestPauseQueueResumeDocs: pause, queue, queue drop and resume print
// what their pages show (the queue here is what three nodes would have
// written), refuse what the pages say they refuse, and write their keys
// and records.
func TestPauseQueueResumeDocs(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	consul := []string{"-consul-addr", agent.HTTPAddr()}
	page := func(name string) string {
		b, err := os.ReadFile("../website/commands/" + name + ".md")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	type cmd interface{ Run([]string) int }
	run := func(c cmd, ui *cli.MockUi, args ...string) int {
		return c.Run(append(append([]string{}, consul...), args...))
	}

	ui := cli.NewMockUi()
	if code := run(&PauseCommand{UI: ui}, ui); code != 1 || !strings.Contains(ui.ErrorWriter.String(), "say why with -reason") {
		t.Fatalf("pause without a reason: exit %d %q", code, ui.ErrorWriter.String())
	}
	ui = cli.NewMockUi()
	if code := run(&PauseCommand{UI: ui}, ui, "-scope", "everything", "-reason", "x"); code != 1 || !strings.Contains(ui.ErrorWriter.String(), `scope "everything"`) {
		t.Fatalf("pause with a bad scope: exit %d %q", code, ui.ErrorWriter.String())
	}
	if keys, _, _ := c.KV().Keys(cluster.ControlPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("refused pauses wrote %v", keys)
	}
	ui = cli.NewMockUi()
	if code := run(&PauseCommand{UI: ui}, ui, "-reason", "incident 4721"); code != 0 {
		t.Fatalf("pause: exit %d %s", code, ui.ErrorWriter.String())
	}
	if shown := "$ mariposa pause -reason \"incident 4721\"\n" + ui.OutputWriter.String(); !strings.Contains(page("pause"), shown) {
		t.Errorf("pause.md does not show:\n%s", shown)
	}
	p, _, _ := c.KV().Get(cluster.PauseAllKey, nil)
	var rec cluster.PauseRecord
	if p == nil || json.Unmarshal(p.Value, &rec) != nil || rec.Scope != cluster.PauseAll || rec.Reason != "incident 4721" || rec.Actor == "" {
		t.Fatalf("pause key: %+v", p)
	}

	// The queue of the page, as three nodes would have written it.
	ui = cli.NewMockUi()
	if code := (&QueueCommand{UI: ui}).Run(consul); code != 0 || ui.OutputWriter.String() != "The queue is empty.\n" {
		t.Fatalf("empty queue: exit %d %q", code, ui.OutputWriter.String())
	}
	since := time.Now().Add(-12 * time.Second)
	write := func(node string, list []cluster.Intent) {
		b, _ := json.Marshal(list)
		if _, err := c.KV().Put(&api.KVPair{Key: cluster.IntentsKey(node), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	write("node-1", []cluster.Intent{{ID: "3b960086", Node: "node-1", Kind: "restart", Target: "crash@crash/0", Detail: "restart after exit 1", Since: since}})
	write("node-2", []cluster.Intent{{ID: "9f2e44c1", Node: "node-2", Kind: "restart", Target: "crash@crash/1", Detail: "restart after exit 1", Since: since.Add(time.Second)}})
	write("node-3", []cluster.Intent{{ID: "5d07aa18", Node: "node-3", Kind: "claim", Target: "crash/3", Detail: "rank 1 of 3", Since: since.Add(8 * time.Second)}})
	ui = cli.NewMockUi()
	if code := (&QueueCommand{UI: ui}).Run(consul); code != 0 {
		t.Fatalf("queue: exit %d %s", code, ui.ErrorWriter.String())
	}
	ago := regexp.MustCompile(`\d+s ago`)
	if shown := "$ mariposa queue\n" + ui.OutputWriter.String(); !strings.Contains(ago.ReplaceAllString(page("queue"), "AGO"), ago.ReplaceAllString(shown, "AGO")) {
		t.Errorf("queue.md does not show:\n%s", shown)
	}
	ui = cli.NewMockUi()
	if code := (&QueueDropCommand{UI: ui}).Run(append(consul, "5d07aa18")); code != 1 || !strings.Contains(ui.ErrorWriter.String(), "only restarts can be dropped") {
		t.Fatalf("drop of a claim: exit %d %q", code, ui.ErrorWriter.String())
	}
	ui = cli.NewMockUi()
	if code := (&QueueDropCommand{UI: ui}).Run(append(consul, "3b960086")); code != 0 {
		t.Fatalf("drop: exit %d %s", code, ui.ErrorWriter.String())
	}
	if shown := "$ mariposa queue drop 3b960086\n" + ui.OutputWriter.String(); !strings.Contains(page("queue"), shown) {
		t.Errorf("queue.md does not show:\n%s", shown)
	}
	if p, _, _ := c.KV().Get(cluster.DropsPrefix+"3b960086", nil); p == nil {
		t.Fatal("no drop key")
	}

	// Resume: the pause and the drops go, with their records.
	ui = cli.NewMockUi()
	if code := (&ResumeCommand{UI: ui}).Run(consul); code != 0 {
		t.Fatalf("resume: exit %d %s", code, ui.ErrorWriter.String())
	}
	stamp := regexp.MustCompile(`paused by \S+ at \S+Z`)
	norm := func(s string) string { return stamp.ReplaceAllString(s, "paused by WHO at WHEN") }
	if shown := "$ mariposa resume\n" + ui.OutputWriter.String(); !strings.Contains(norm(page("resume")), norm(shown)) {
		t.Errorf("resume.md does not show:\n%s", shown)
	}
	if keys, _, _ := c.KV().Keys(cluster.ControlPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("after resume: %v", keys)
	}
	actions := map[string]int{}
	pairs, _, _ := c.KV().List(cluster.AuditPrefix, nil)
	for _, p := range pairs {
		var e cluster.AuditEvent
		_ = json.Unmarshal(p.Value, &e)
		actions[e.Action]++
	}
	if actions["pause"] != 1 || actions["queue-drop"] != 1 || actions["resume"] != 1 {
		t.Fatalf("audit: %v", actions)
	}
}
