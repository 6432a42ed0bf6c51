package command

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

func TestReset(t *testing.T) {
	target := &fakeTarget{}
	path, _ := controlServer(t, target)
	ui := cli.NewMockUi()
	// Flags may follow the service.
	if code := (&ResetCommand{UI: ui}).Run([]string{"worker", "-control-socket", path}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := target.Calls(); !slices.Equal(got, []string{"reset worker"}) {
		t.Fatalf("calls %q", got)
	}
	if got := ui.OutputWriter.String(); got != "worker: restart history cleared; starting\n" {
		t.Fatalf("output %q", got)
	}
}

func TestResetErrors(t *testing.T) {
	target := &fakeTarget{err: errors.New("worker is not failed")}
	path, _ := controlServer(t, target)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-control-socket", path, "worker"}, "mariposa reset: worker is not failed\n"},
		{[]string{"-control-socket", path, "db"}, "mariposa reset: no service \"db\" on this node (services: web, worker)\n"},
		{[]string{"-control-socket", filepath.Join(filepath.Dir(path), "x.sock"), "db"}, "no mariposa is running here"},
		{[]string{"-control-socket", path}, "needs exactly one SERVICE"},
	}
	for _, tc := range cases {
		ui := cli.NewMockUi()
		if code := (&ResetCommand{UI: ui}).Run(tc.args); code != 1 {
			t.Fatalf("%q: exit %d, want 1", tc.args, code)
		}
		if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
			t.Fatalf("%q: stderr %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := target.Calls(); !slices.Equal(got, []string{"reset worker"}) {
		t.Fatalf("calls %q", got)
	}
}

// mariposa reset UNIT/K of a slot the fleet's step machine failed deletes
// its failed mark with its audit record; a slot that never failed is
// refused as before, and nothing is written.
func TestResetFailedSlotOfTheStepMachine(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	rec := cluster.FailedRecord{Node: "n1", Reason: "restarts exhausted", At: time.Now()}
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.FailedKey("web", 2), Value: rec.Encode()}, nil); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	if code := (&ResetCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "web/2"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if p, _, err := c.KV().Get(cluster.FailedKey("web", 2), nil); err != nil || p != nil {
		t.Fatalf("the failed mark is still there: %+v %v", p, err)
	}
	pairs, _, err := c.KV().List(cluster.AuditPrefix, nil)
	if err != nil || len(pairs) != 1 || !strings.Contains(string(pairs[0].Value), `"action":"reset"`) {
		t.Fatalf("audit records %v %v", pairs, err)
	}
	ui = cli.NewMockUi()
	if code := (&ResetCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "web/2"}); code != 1 ||
		!strings.Contains(ui.ErrorWriter.String(), "never been held") {
		t.Fatalf("second reset: exit %d %q", code, ui.ErrorWriter.String())
	}
}

// mariposa reset UNIT/K of a slot that has not failed (a released slot key,
// no failed mark) is refused and writes nothing: no "reset" record of a
// reset that did nothing, the slot key untouched. Mutation check: without
// cluster.ResetSlot's state check, the reset rewrites the released slot's
// key and writes its record.
func TestResetRefusesSlotNotFailed(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	v := cluster.SlotValue{Node: "n1", State: cluster.SlotReleased, Since: time.Now(), Reason: "scaled down"}
	b, _ := json.Marshal(v)
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.SlotKey("web", 1), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	before, _, _ := c.KV().Get(cluster.SlotKey("web", 1), nil)
	ui := cli.NewMockUi()
	if code := (&ResetCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "web/1"}); code != 1 ||
		!strings.Contains(ui.ErrorWriter.String(), "has not failed") {
		t.Fatalf("exit %d: %q", code, ui.ErrorWriter.String())
	}
	after, _, _ := c.KV().Get(cluster.SlotKey("web", 1), nil)
	if after == nil || after.ModifyIndex != before.ModifyIndex {
		t.Fatalf("the slot key was written: %+v", after)
	}
	if pairs, _, err := c.KV().List(cluster.AuditPrefix, nil); err != nil || len(pairs) != 0 {
		t.Fatalf("audit records %v %v", pairs, err)
	}
}
