package supervisor

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

func cfgOf(svcs ...*schema.Service) *schema.Config { return &schema.Config{Services: svcs} }

func svcDeps(name string, deps ...string) *schema.Service {
	s := testService(func(s *schema.Service) { s.Name = name; s.Command = []string{"sleep", "30"} })
	for _, d := range deps {
		s.Depends = append(s.Depends, &schema.Dependency{Name: d, Service: d})
	}
	return s
}

func TestStartOrderAndStopLevels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    *schema.Config
		start  []string
		levels [][]string
	}{
		{"independent keep file order", cfgOf(svcDeps("b"), svcDeps("a")), []string{"b", "a"}, [][]string{{"a", "b"}}},
		{"dependency first", cfgOf(svcDeps("web", "db"), svcDeps("db")), []string{"db", "web"}, [][]string{{"web"}, {"db"}}},
		{"chain", cfgOf(svcDeps("a", "b"), svcDeps("b", "c"), svcDeps("c")), []string{"c", "b", "a"}, [][]string{{"a"}, {"b"}, {"c"}}},
		{"diamond", cfgOf(svcDeps("top", "l", "r"), svcDeps("l", "base"), svcDeps("r", "base"), svcDeps("base")),
			[]string{"base", "l", "r", "top"}, [][]string{{"top"}, {"l", "r"}, {"base"}}},
		{"dependency not loaded", cfgOf(svcDeps("web", "mysql")), []string{"web"}, [][]string{{"web"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order := startOrder(tc.cfg)
			if !slices.Equal(order, tc.start) {
				t.Errorf("start order %v, want %v", order, tc.start)
			}
			if got := stopLevels(tc.cfg, order); !reflect.DeepEqual(got, tc.levels) {
				t.Errorf("stop levels %v, want %v", got, tc.levels)
			}
		})
	}
}

// localRunner is a Runner set up as Run sets it up, with a registry and
// data manager that never reach Consul (nothing calls their Run).
func localRunner(t *testing.T, cfg *schema.Config) *Runner {
	t.Helper()
	client, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg, Options{Client: client, Events: func(Event) {}})
	r.node, r.addr, r.baseEnv = "n1", "127.0.0.1", childBaseEnv(os.Environ())
	r.reg = checks.NewRegistry(client, "n1", "127.0.0.1", hclog.NewNullLogger(), time.Minute)
	r.data = render.NewManager(&api.Config{Address: "127.0.0.1:1"}, hclog.NewNullLogger())
	for _, sp := range instanceSpecs(cfg, nil) {
		go r.addInstance(sp).run()
	}
	close(r.ready)
	t.Cleanup(func() { r.stopAll(r.Services()) })
	return r
}

func (r *Runner) pid(t *testing.T, name string) int {
	t.Helper()
	var pid int
	waitFor(t, name+" running", 5*time.Second, func() bool {
		s := r.Instance(name).Snapshot()
		pid = s.PID
		return s.State == StateRunning
	})
	return pid
}

func TestRunnerApply(t *testing.T) {
	keep, change, remove := svcDeps("keep"), svcDeps("change"), svcDeps("remove")
	r := localRunner(t, cfgOf(keep, change, remove))
	keepPID, changePID, removePID := r.pid(t, "keep"), r.pid(t, "change"), r.pid(t, "remove")

	changed := svcDeps("change")
	changed.Env = map[string]string{"NEW": "1"}
	res := r.apply(cfgOf(svcDeps("keep"), changed, svcDeps("add")), nil)
	want := ApplyResult{Started: []string{"add"}, Restarted: []string{"change"}, Stopped: []string{"remove"}, Unchanged: []string{"keep"}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("apply: %+v, want %+v", res, want)
	}
	if got := r.pid(t, "keep"); got != keepPID {
		t.Errorf("unchanged service restarted: %d -> %d", keepPID, got)
	}
	if got := r.pid(t, "change"); got == changePID {
		t.Error("changed service kept its process")
	}
	r.pid(t, "add")
	if r.Instance("remove") != nil || processAlive(removePID) || processAlive(changePID) {
		t.Error("removed or replaced processes left behind")
	}
	if got := r.Services(); !slices.Equal(got, []string{"keep", "change", "add"}) {
		t.Errorf("services after apply: %v", got)
	}

	// Operators reach instances by name; an unknown one is named with the
	// known ones.
	if err := r.Restart(context.Background(), "nope", ""); err == nil || err.Error() != `no service "nope" on this node (services: keep, change, add)` {
		t.Errorf("restart of an unknown service: %v", err)
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}

// TestRunnerSlots: the fleet layer's slots run as instances "<service>/<k>"
// with their own service IDs and MARIPOSA_INSTANCE; a cluster unit of the
// node's files runs only in slots; a withdrawn slot stops, a new term of
// the same slot restarts, and a lost exclusive slot stops its process and
// keeps it stopped.
func TestRunnerSlots(t *testing.T) {
	local := svcDeps("local")
	unit := svcDeps("api")
	unit.Placement = &schema.Placement{Count: 3, MaxPerNode: 2}
	unit.Command = []string{"sh", "-c", `echo "$MARIPOSA_INSTANCE $MARIPOSA_SLOT_KEY $MARIPOSA_SLOT_INDEX" > "$OUT.$MARIPOSA_INSTANCE"; exec sleep 30`}
	dir := t.TempDir()
	unit.Env = map[string]string{"OUT": dir + "/slot"}
	r := localRunner(t, cfgOf(local, unit))
	r.pid(t, "local")
	if r.Instance("api") != nil {
		t.Fatal("a cluster unit ran outside a slot")
	}
	slot := func(k int, term uint64, lost, expired chan struct{}) SlotInstance {
		sl := Slot{SlotInfo: SlotInfo{Unit: "api", Index: k, Key: fmt.Sprintf("mariposa/slots/api/%d", k), Session: "s1", Term: term}}
		if lost != nil {
			sl.Lost, sl.Expired = lost, expired
		}
		return SlotInstance{Service: unit, Slot: sl}
	}
	lost0, expired0 := make(chan struct{}), make(chan struct{})
	res := r.apply(cfgOf(local, unit), []SlotInstance{slot(0, 10, lost0, expired0), slot(2, 12, nil, nil)})
	if !slices.Equal(res.Started, []string{"api/0", "api/2"}) || !slices.Equal(res.Unchanged, []string{"local"}) {
		t.Fatalf("apply: %+v", res)
	}
	pid0, pid2 := r.pid(t, "api/0"), r.pid(t, "api/2")
	if id := r.Instance("api/2").id; id != "api-2" {
		t.Errorf("service ID %q, want api-2", id)
	}
	waitFor(t, "the children wrote their slot", 5*time.Second, func() bool {
		b, err := os.ReadFile(dir + "/slot.2")
		return err == nil && string(b) == "2 mariposa/slots/api/2 12\n"
	})
	if sn := r.Instance("api/0").Snapshot(); sn.Slot != "api/0" || sn.Report.Term != 10 {
		t.Errorf("snapshot: %+v", sn)
	}

	// Withdraw slot 2; slot 0 is the same hold: untouched.
	res = r.apply(cfgOf(local, unit), []SlotInstance{slot(0, 10, lost0, expired0)})
	if !slices.Equal(res.Stopped, []string{"api/2"}) || !slices.Contains(res.Unchanged, "api/0") {
		t.Fatalf("withdraw: %+v", res)
	}
	if processAlive(pid2) {
		t.Error("a withdrawn slot's process still runs")
	}
	if r.pid(t, "api/0") != pid0 {
		t.Error("an unchanged slot restarted")
	}

	// The hold ends: the process stops and stays stopped.
	close(lost0)
	waitFor(t, "slot 0 stopped", 10*time.Second, func() bool {
		sn := r.Instance("api/0").Snapshot()
		return sn.State == StateStopped && sn.PID == 0 && !processAlive(pid0)
	})
	if sn := r.Instance("api/0").Snapshot(); !strings.Contains(sn.Output, "slot api/0 lost") {
		t.Errorf("reason %q", sn.Output)
	}

	// The same slot under a new term: a new instance.
	res = r.apply(cfgOf(local, unit), []SlotInstance{slot(0, 20, nil, nil)})
	if !slices.Equal(res.Restarted, []string{"api/0"}) {
		t.Fatalf("new term: %+v", res)
	}
	r.pid(t, "api/0")
}
