package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A command that cannot start says exactly what is wrong, and is not
// retried at full speed (issue: a missing dir failed as "fork/exec
// /usr/bin/sleep: no such file or directory" and burned the restart budget).
func TestStartErrorsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	missing := filepath.Join(t.TempDir(), "nope")
	hcl := writeHCL(t, fmt.Sprintf(`
service "nodir" {
  command = ["sleep", "30"]
  dir     = %q
  restart {
    delay    = "0s"
    attempts = 0
  }
}

service "noprog" {
  command = ["/opt/no/such/program"]
}
`, missing))
	startMariposa(t, agent, nil, hcl)
	sc := waitSupervisor(t, c, "nodir", agent.Name, api.HealthCritical, "working directory "+missing+" does not exist")
	if strings.Contains(sc.Output, "fork/exec") {
		t.Errorf("the reason blames the program: %q", sc.Output)
	}
	waitSupervisor(t, c, "noprog", agent.Name, api.HealthCritical, "cannot start: command /opt/no/such/program does not exist")
	// delay = "0s" with no attempt limit: still at most about one try a
	// second, not thousands.
	first := instanceReport(t, supervisorCheck(c, "nodir", agent.Name)).Restarts
	deadline := time.Now().Add(3 * time.Second)
	var last int
	waitFor(t, 10*time.Second, "3 seconds of retries", func() (bool, string) {
		last = instanceReport(t, supervisorCheck(c, "nodir", agent.Name)).Restarts
		return time.Now().After(deadline), fmt.Sprint(last)
	})
	if n := last - first; n > 5 {
		t.Errorf("%d start attempts in 3s with delay 0s: the restart budget burns at full speed", n)
	}
}

// Why a service failed is in its supervisor check, not only in mariposa's
// log: the child's last stderr line joins the reason.
func TestFailureReasonCarriesLastStderrLine(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, `
service "queue-worker" {
  command = ["sh", "-c", "echo starting; echo 'cannot connect to queue at 127.0.0.1:5672' >&2; exit 3"]
  restart {
    attempts = 1
    delay    = "0s"
  }
}
`)
	startMariposa(t, agent, nil, hcl)
	sc := waitSupervisor(t, c, "queue-worker", agent.Name, api.HealthCritical, "failed: 1 restarts")
	if !strings.Contains(sc.Output, `last stderr: "cannot connect to queue at 127.0.0.1:5672"`) {
		t.Errorf("supervisor check output %q lacks the last stderr line", sc.Output)
	}
	r := instanceReport(t, sc)
	if r.Stderr != "cannot connect to queue at 127.0.0.1:5672" || r.LastExit != "exit 3" || r.Since.IsZero() {
		t.Errorf("state: %+v", r)
	}
}

// A template that cannot parse is refused at start with its position, not
// waited on forever.
func TestRunRefusesTemplateThatCannotParse(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	hcl := writeHCL(t, `
service "web" {
  command = ["sleep", "30"]
  template {
    source      = "web.conf.tpl"
    destination = "web.conf"
  }
}
`)
	tpl := filepath.Join(filepath.Dir(hcl), "web.conf.tpl")
	if err := os.WriteFile(tpl, []byte("listen = 8080\nname = {{ kye \"app/name\" }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMariposa(t, agent, nil, hcl)
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatal("mariposa run waits on a template that cannot parse")
	}
	if code := m.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out := m.out.String(); !strings.Contains(out, "web.conf.tpl:2:") || !strings.Contains(out, `"kye"`) {
		t.Errorf("the error does not point into the template:\n%s", out)
	}
	if n := len(serviceEntries(agent.Client(t), "web")); n != 0 {
		t.Errorf("%d instances registered", n)
	}
}
