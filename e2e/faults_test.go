package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// frozenWindow is when a node's mariposa was stopped (SIGSTOP) until it
// had acted again after SIGCONT: the one window where SPEC section 5 allows
// two leader children, with fencing as the guarantee.
type frozenWindow struct {
	node       string
	from, till time.Duration // CLOCK_MONOTONIC
}

// Two leader-only children never run at the same time across repeated
// faults on a real cluster: kill -9 of the leader's mariposa, kill -9 of its
// agent, and SIGSTOP/SIGCONT of its mariposa (the documented exception,
// where the stale leader's fenced write must fail).
func TestLeaderFaultsNeverOverlap(t *testing.T) {
	consultest.SkipShort(t, "fault injection in -short mode")
	cl := consultest.NewCluster(t, 3, 3)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	key := "mariposa/leader/faults-" + strconv.Itoa(os.Getpid())
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/$MARIPOSA_NODE.stamps -env-file %s/$MARIPOSA_NODE.env"]
  leader {
    key        = %q
    lock_delay = "1s"
  }
  stop {
    timeout = "2s"
  }
}
`, childBin, dir, dir, key))
	watches := map[string]*childWatch{}
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		watches[a.Name] = watchChildren(t, filepath.Join(dir, a.Name+".stamps"))
		ms[a.Name] = startMariposa(t, a, nil, hcl)
	}
	leaderNow := func(not string) string {
		var l string
		waitFor(t, 60*time.Second, "a leader other than "+not, func() (bool, string) {
			inst := passingInstances(c, "web")
			if len(inst) != 1 {
				return false, fmt.Sprintf("%d passing", len(inst))
			}
			for n := range inst {
				l = n
			}
			return l != not && len(watches[l].running()) == 1, l
		})
		return l
	}
	fenced := func(node string) bool {
		env := readEnv(t, filepath.Join(dir, node+".env"))
		idx, _ := strconv.ParseUint(env["MARIPOSA_LEADER_INDEX"], 10, 64)
		ok, _, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key + "-data", Value: []byte(node)}},
		}, nil)
		return err == nil && ok
	}

	var frozen []frozenWindow
	faults := []string{"kill-mariposa", "stop-mariposa", "kill-agent", "kill-mariposa", "stop-mariposa", "kill-agent"}
	prev := ""
	for i, fault := range faults {
		l := leaderNow(prev)
		if !fenced(l) {
			t.Fatalf("fault %d: the leader %s cannot write with its own fencing token", i, l)
		}
		t.Logf("fault %d: %s on the leader %s", i, fault, l)
		switch fault {
		case "kill-mariposa":
			_ = ms[l].cmd.Process.Signal(syscall.SIGKILL)
			<-ms[l].done
			next := leaderNow(l)
			_ = next
			ms[l] = startMariposa(t, clientNamed(cl, l), nil, hcl)
		case "stop-mariposa":
			from := leadertest.Mono()
			_ = ms[l].cmd.Process.Signal(syscall.SIGSTOP)
			next := leaderNow(l)
			// The frozen leader's child may still run: its guarded writes
			// must fail now that another leads.
			if fenced(l) {
				t.Errorf("fault %d: the frozen leader %s could still write after %s took over", i, l, next)
			}
			_ = ms[l].cmd.Process.Signal(syscall.SIGCONT)
			waitFor(t, 10*time.Second, "the resumed leader's child gone", func() (bool, string) {
				return len(watches[l].running()) == 0, fmt.Sprint(watches[l].running())
			})
			frozen = append(frozen, frozenWindow{node: l, from: from, till: leadertest.Mono()})
		case "kill-agent":
			a := clientNamed(cl, l)
			a.Kill()
			leaderNow(l)
			waitFor(t, 10*time.Second, "the cut-off leader's child gone", func() (bool, string) {
				return len(watches[l].running()) == 0, fmt.Sprint(watches[l].running())
			})
			a.Start(t)
		}
		prev = l
	}
	leaderNow("")

	// Every child's run, labelled by node.
	var all []leadertest.Interval
	node := map[int]string{}
	for n, w := range watches {
		for _, iv := range w.intervals(t) {
			iv.Who = n + " " + iv.Who
			node[len(all)] = n
			all = append(all, iv)
		}
	}
	if len(all) < len(faults)+1 {
		t.Fatalf("only %d leader runs for %d faults", len(all), len(faults))
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i], all[j]
			if !overlaps(a, b) {
				continue
			}
			start := max(a.Start, b.Start)
			excused := false
			for _, f := range frozen {
				if (node[i] == f.node || node[j] == f.node) && start >= f.from && start <= f.till {
					excused = true
				}
			}
			if !excused {
				t.Errorf("two leaders at once: %s and %s", a, b)
			}
		}
	}
	if t.Failed() {
		for _, iv := range all {
			t.Log(iv)
		}
	}
}

func overlaps(a, b leadertest.Interval) bool {
	end := func(iv leadertest.Interval) time.Duration {
		if iv.Stop == 0 {
			return 1<<63 - 1
		}
		return iv.Stop
	}
	return a.Start < end(b) && b.Start < end(a)
}
