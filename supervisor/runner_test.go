package supervisor

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strconv"
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
	for _, name := range startOrder(cfg) {
		go r.addInstance(cfg.Service(name)).run()
	}
	close(r.ready)
	t.Cleanup(func() { r.stopAll(r.cfg, r.Services()) })
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
	res := r.apply(cfgOf(svcDeps("keep"), changed, svcDeps("add")))
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
	if err := r.Restart(context.Background(), "nope"); err == nil || err.Error() != `no service "nope" on this node (services: keep, change, add)` {
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
