package command

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

func TestResume(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	run := func(args ...string) (int, string, string) {
		ui := cli.NewMockUi()
		code := (&ResumeCommand{UI: ui}).Run(append([]string{"-consul-addr", agent.HTTPAddr()}, args...))
		return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
	}
	if code, out, _ := run(); code != 0 || out != "Nothing is paused.\n" {
		t.Fatalf("nothing paused: exit %d, %q", code, out)
	}
	if code, _, errOut := run("api"); code != 1 || !strings.Contains(errOut, "takes no arguments") {
		t.Fatalf("an argument: exit %d, %q", code, errOut)
	}

	// The record of the website's examples: they show this output.
	rec := `{"at":"2026-11-23T10:00:00Z","node":"node-4","vanished":["node-1","node-2","node-3"],"base":5}`
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.StormKey, Value: []byte(rec)}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run()
	if code != 0 || !strings.HasPrefix(out, "Resumed: the storm brake engaged by node-4 at 2026-11-23T10:00:00Z (3 of 5 supervisors vanished within 1m0s)") {
		t.Fatalf("resume: exit %d, %q %q", code, out, errOut)
	}
	for _, page := range []string{"../website/commands/resume.md", "../website/cluster.md"} {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "$ mariposa resume\n"+out) {
			t.Errorf("%s does not show what mariposa resume prints:\n%s", page, out)
		}
	}
	if b, _ := os.ReadFile("../website/commands/resume.md"); !strings.Contains(string(b), "$ mariposa resume\nNothing is paused.\n") {
		t.Error("resume.md does not show the nothing-paused answer")
	}
	if p, _, _ := c.KV().Get(cluster.StormKey, nil); p != nil {
		t.Fatal("control/storm still there")
	}
	// The lifted record, as the nodes read it: every node forgets the
	// vanishings it saw, and counts the ones it names down as gone.
	ctl, _, err := c.KV().List(cluster.ControlPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	lifted := cluster.ParseControl(ctl, nil)
	if lifted.LiftedIndex == 0 || lifted.Lifted == nil || lifted.Lifted.Storm == nil || lifted.Lifted.Storm.Node != "node-4" ||
		strings.Join(lifted.Lifted.Down, ",") != "node-1,node-2,node-3" || lifted.Lifted.By == "" {
		t.Fatalf("lifted record %+v at %d", lifted.Lifted, lifted.LiftedIndex)
	}
	pairs, _, err := c.KV().List(cluster.AuditPrefix, nil)
	if err != nil || len(pairs) != 1 {
		t.Fatalf("audit: %d records, %v", len(pairs), err)
	}
	var ev cluster.AuditEvent
	if err := json.Unmarshal(pairs[0].Value, &ev); err != nil || ev.Action != "resume" || ev.Actor == "" ||
		!strings.Contains(ev.Reason, "engaged by node-4") {
		t.Fatalf("audit %+v %v", ev, err)
	}

	// A corrupt record is reported by the nodes and skipped; resume deletes it.
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.StormKey, Value: []byte("{oops")}, nil); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(); code != 0 || !strings.Contains(out, "removed a corrupt storm record") {
		t.Fatalf("corrupt: exit %d, %q", code, out)
	}
	if p, _, _ := c.KV().Get(cluster.StormKey, nil); p != nil {
		t.Fatal("corrupt control/storm still there")
	}
	// Lifted again: its index moves, so every node forgets again.
	ctl, _, _ = c.KV().List(cluster.ControlPrefix, nil)
	if again := cluster.ParseControl(ctl, nil); again.LiftedIndex <= lifted.LiftedIndex || again.Lifted == nil || again.Lifted.Storm != nil {
		t.Fatalf("lifted record after the corrupt one %+v at %d", again.Lifted, again.LiftedIndex)
	}
}
