package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A deployment's healthy count says what is true now (issue 25 item 3), on
// a real fleet (1 server, 2 clients, count 2, one instance per node): after
// a successful deploy -wait, `status -json` counts 2 of 2 healthy; after a
// node's mariposa is restarted (its slot released and claimed again), 2 of
// 2 once the new instance runs and passes, as the instances say; with one
// instance's check failing, 1 of 2; passing again, 2 of 2. At each step the
// count is checked against the instances' own states in the same output.
//
// Mutation checks: with the holders publishing their health only while a
// deployment runs (as before the fix), the count stays at 1 of 2 after
// the re-claim; with status counting what the holders said without the
// catalog's states (Recount left out), it stays 2 of 2 with an instance
// critical.
func TestFleetHealthCountAfterReclaim(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 2})
	ms := fleetOf(t, cl)
	dir := t.TempDir()
	file := writeHCL(t, fmt.Sprintf(`
service "api" {
  command = ["sleep", "600"]
  version = "v1"
  count   = 2
  check "ok" {
    args     = ["sh", "-c", "test ! -f %s/sick.$MARIPOSA_NODE"]
    interval = "250ms"
  }
  update {
    min_healthy_time = "1s"
  }
  stop {
    timeout = "2s"
  }
}
`, dir))
	cmd := exec.Command(mariposaBin, "deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "api", "-wait", file)
	timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy -wait: %v\n%s", err, out)
	}
	timer.Stop()

	// counts reads status -json: the deployment's healthy count, and how
	// many of the unit's slots are held with every instance running and
	// passing on the holder.
	counts := func() (healthy, live int, seen string) {
		out, err := exec.Command(mariposaBin, "status", "-json", "-consul-addr", cl.Servers[0].HTTPAddr()).Output()
		if err != nil {
			return -1, -1, err.Error()
		}
		var st command.StatusOutput
		if err := json.Unmarshal(out, &st); err != nil {
			return -1, -1, err.Error()
		}
		healthy = -1
		for _, d := range st.Deployments {
			if d.Name == "api" && len(d.Progress) == 1 {
				healthy = d.Progress[0].Healthy
			}
		}
		for _, u := range st.Units {
			for _, s := range u.Slots {
				ok := s.State == "held" && len(s.Instances) > 0
				for _, in := range s.Instances {
					ok = ok && in.Node == s.Node && in.State == "running" && in.Health == "passing"
				}
				if ok {
					live++
				}
				seen += fmt.Sprintf(" %s:%s@%s%v", s.Slot, s.State, s.Node, s.Instances)
			}
		}
		return healthy, live, fmt.Sprintf("healthy %d, live %d:%s", healthy, live, seen)
	}
	// settled waits until the count is want and agrees with the instances.
	settled := func(what string, want int) {
		t.Helper()
		waitFor(t, 90*time.Second, what, func() (bool, string) {
			h, l, seen := counts()
			return h == want && l == want, seen
		})
		consistently(t, 2*time.Second, what+" (stays)", func() (bool, string) {
			h, l, seen := counts()
			return h == want && l == want, seen
		})
	}
	settled("2 of 2 healthy after deploy -wait", 2)

	// A node's mariposa restarts: its slot is released (SIGINT) and
	// claimed again by the same node (the other one holds the other slot,
	// and one instance per node is the limit).
	victim := cl.Clients[0].Name
	ms[victim].stop(t, syscall.SIGINT, 30*time.Second)
	waitFor(t, 30*time.Second, "the restarted node's slot released", func() (bool, string) {
		h := slotHolders(t, cl.Servers[0].Client(t), "api")
		n := 0
		for _, node := range h {
			if node != "" {
				n++
			}
		}
		return n == 1, fmt.Sprint(h)
	})
	ms[victim] = startMariposa(t, clientNamed(cl, victim), nil, "-cluster")
	settled("2 of 2 healthy after the re-claim", 2)
	// Its state as deploy -wait reads it (cluster.Effective).
	if d, err := cluster.ReadDeployment(cl.Servers[0].Client(t), "api"); err != nil || d.State == nil {
		t.Fatalf("the deployment after the re-claim: %+v, %v", d, err)
	} else if st := effectiveState(t, cl.Servers[0].Client(t), "api", d.Spec.N); st == nil || st.Status != cluster.DeploySuccessful {
		t.Fatalf("the deployment after the re-claim: %+v", st)
	}

	// One instance's check fails: 1 of 2, then 2 of 2 again.
	sick := filepath.Join(dir, "sick."+cl.Clients[1].Name)
	if err := os.WriteFile(sick, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	settled("1 of 2 healthy with one instance critical", 1)
	if err := os.Remove(sick); err != nil {
		t.Fatal(err)
	}
	settled("2 of 2 healthy once it passes again", 2)
}
