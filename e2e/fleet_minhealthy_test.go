package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// min_healthy_time is a time healthy without a break (CLUSTER.md section
// 5): one node, a unit of count 1 with
// min_healthy_time = "5s". Deployed at v2, its new instance passes its
// check; its check then fails for 2 s and passes again. The slot's status
// says it healthy no earlier than 5 s after the catalog showed it passing
// again (less the lag between the catalog and the holder's looks), and
// the deployment is successful only then.
//
// Mutation-checked: with run -cluster's health
// loop no longer looking at a slot once it reported it healthy (as
// before), the status says it healthy 2.8 s after it passed again. (The
// step machine ignoring InstanceUnhealthy alone is not enough to fail
// here: mariposa runs this args check itself, so the later pass moves the
// streak's start too.)
func TestFleetMinHealthyIsContinuous(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	startMariposa(t, agent, nil, "-cluster")
	waitFor(t, 30*time.Second, "the supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == 1, ""
	})
	dir := t.TempDir()
	sick := filepath.Join(dir, "sick")
	spec := func(version string) string {
		return writeHCL(t, fmt.Sprintf(`
service "api" {
  command = ["sleep", "600"]
  version = %q
  count   = 1
  check "ok" {
    args     = ["sh", "-c", "test ! -f %s"]
    interval = "200ms"
  }
  update {
    min_healthy_time = "5s"
    healthy_deadline = "2m"
  }
}
`, version, sick))
	}
	deploy := func(file string, wait bool) {
		t.Helper()
		args := []string{"deploy", "-consul-addr", agent.HTTPAddr(), "-name", "api"}
		if wait {
			args = append(args, "-wait")
		}
		cmd := exec.Command(mariposaBin, append(args, file)...)
		timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy %v: %v\n%s", args, err, out)
		}
	}
	// v2's instance, as the catalog shows it: passing or not.
	v2 := func(passing bool) (bool, string) {
		es, _, err := c.Health().Service("api", "", false, nil)
		if err != nil {
			return false, err.Error()
		}
		seen := ""
		for _, e := range es {
			seen += fmt.Sprintf(" %s:%s", e.Service.Meta["version"], e.Checks.AggregatedStatus())
			if e.Service.Meta["version"] == "v2" && (e.Checks.AggregatedStatus() == api.HealthPassing) == passing {
				return true, seen
			}
		}
		return false, seen
	}
	deploy(spec("v1"), true)
	deploy(spec("v2"), false)
	waitFor(t, 60*time.Second, "v2's instance passing", func() (bool, string) { return v2(true) })
	if err := os.WriteFile(sick, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "v2's instance critical", func() (bool, string) { return v2(false) })
	broke := time.Now()
	waitFor(t, 30*time.Second, "two seconds of the break", func() (bool, string) {
		return time.Since(broke) >= 2*time.Second, ""
	})
	if err := os.Remove(sick); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "v2's instance passing again", func() (bool, string) { return v2(true) })
	again := time.Now()
	if st := effectiveState(t, c, "api", 2); st != nil && st.Status != cluster.DeployRunning {
		t.Fatalf("spec 2 %s before its instance had passed again for min_healthy_time", st.Status)
	}
	waitFor(t, 60*time.Second, "spec 2 successful", func() (bool, string) {
		st := effectiveState(t, c, "api", 2)
		if st == nil {
			return false, "no state"
		}
		return st.Status == cluster.DeploySuccessful, st.Status
	})
	// The slot's status, as its holder wrote it (units/api/status/0).
	var healthyAt *time.Time
	p, _, err := c.KV().Get(cluster.UnitStatusKey("api", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	var hs cluster.HoldStatus
	if p != nil && json.Unmarshal(p.Value, &hs) == nil && hs.HealthyAt != nil {
		healthyAt = hs.HealthyAt
	}
	// The holder looks at its instances every 200 ms at most and may count
	// from up to cluster.MaxCatalogLag before the catalog showed them
	// passing: 1 s of slack.
	if healthyAt == nil {
		t.Fatal("no status says the slot healthy")
	}
	if healthyAt.Before(again.Add(5*time.Second - time.Second)) {
		t.Fatalf("healthy at %v, %v after the instance passed again (min_healthy_time 5s)", healthyAt, healthyAt.Sub(again))
	}
}
