package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// handoff = "sticky" prefers the node that held the slot last (stateful.md),
// on a real fleet (1 server, 2 clients, both equally good for the slot). The
// slot first goes where the rendezvous hash puts it (A); a drain moves it
// to B, and the drain is undone (the slot stays on B: running instances
// never move for a better score). Scaled to 0, B releases the slot; scaled
// to 1 again, both nodes are live and equal but for stickiness, and the
// slot goes back to B, its last holder, not to A, the hash's choice.
//
// Mutation check: with View.Previous left empty (lastHolder returning ""),
// the slot goes to A.
func TestFleetStickySlotReturns(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 2})
	c := cl.Servers[0].Client(t)
	root := t.TempDir()
	args := func(node string) []string {
		return []string{"-cluster", "-http-addr", "127.0.0.1:0", "-volume-dir", filepath.Join(root, node)}
	}
	for _, a := range cl.Clients {
		startMariposa(t, a, nil, args(a.Name)...)
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	run := func(args ...string) {
		t.Helper()
		full := append([]string{args[0], "-consul-addr", cl.Servers[0].HTTPAddr()}, args[1:]...)
		if out, err := exec.Command(mariposaBin, full...).CombinedOutput(); err != nil {
			t.Fatalf("mariposa %v: %v\n%s", args, err, out)
		}
	}
	spec := func(count int) string {
		return writeHCL(t, fmt.Sprintf(`
service "db" {
  command = ["sleep", "600"]
  count   = %d
  volume "data" {
    handoff = "sticky"
  }
  stop {
    timeout = "2s"
  }
}
`, count))
	}
	run("deploy", "-name", "db", spec(1))
	// holder waits until the slot is held by a node other than not, with
	// its instance passing there.
	holder := func(what, not string) string {
		t.Helper()
		var h string
		waitFor(t, 90*time.Second, what, func() (bool, string) {
			h = slotHolders(t, c, "db")[0]
			es, _, _ := c.Health().Service("db", "", true, nil)
			return h != "" && h != not && len(es) == 1 && es[0].Node.Node == h, fmt.Sprintf("holder %q, %d passing", h, len(es))
		})
		return h
	}
	a := holder("db placed", "")
	run("drain", "-wait", "-deadline", "2m", a)
	b := holder("db moved off the drained node", a)
	run("drain", "-undo", a)
	waitFor(t, 30*time.Second, "the undrained node eligible", func() (bool, string) {
		e := passingInstances(c, "mariposa")[a]
		return e != nil && e.Service.Meta["draining"] != "true" && e.Service.Meta["eligible"] != "false", fmt.Sprint(e != nil)
	})

	// Scaled to 0, b releases the slot (its value names b); scaled to 1
	// again, both nodes are live and equal but for stickiness.
	run("deploy", "-name", "db", "-force", spec(0))
	waitFor(t, 30*time.Second, "the slot released by "+b, func() (bool, string) {
		h := slotHolders(t, c, "db")
		return h[0] == "", fmt.Sprint(h)
	})
	run("deploy", "-name", "db", "-force", spec(1))
	if got := holder("db placed again", ""); got != b {
		t.Fatalf("the slot went to %s after the scale-up; its last holder %s is live and as good (and %s is the hash's choice)", got, b, a)
	}
}
