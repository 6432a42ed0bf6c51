package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// One service end to end: registered with its checks, found by DNS,
// restarted when killed, and gone without a trace after SIGTERM.
func TestRunOneServiceEndToEnd(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	port := freePort(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q, "-http", "127.0.0.1:%d", "-env-file", %q]
  port    = %d
  tags    = ["v1"]
  meta    = { team = "storefront" }
  version = "1.4.2"
  env     = { GREETING = "hello" }

  check "http" {
    http     = "http://127.0.0.1:%d/"
    interval = "500ms"
    timeout  = "1s"
  }

  check "tcp" {
    tcp      = "127.0.0.1:%d"
    interval = "500ms"
    timeout  = "1s"
  }

  restart {
    policy = "always"
    delay  = "0s"
  }
}
`, childBin, port, envFile, port, port, port))
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("sentinel-token-from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A service mariposa does not own, on the same agent: left alone.
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "foreign-1", Name: "foreign"}); err != nil {
		t.Fatal(err)
	}
	m := startMariposa(t, agent, []string{"CONSUL_HTTP_TOKEN=sentinel-token-do-not-pass", "CONSUL_HTTP_TOKEN_FILE=" + tokenFile}, hcl)

	id := "web-" + agent.Name
	var firstPID int
	waitFor(t, 20*time.Second, "web passing with its checks", func() (bool, string) {
		es := serviceEntries(c, "web")
		if len(es) != 1 {
			return false, fmt.Sprintf("%d entries", len(es))
		}
		e := es[0]
		sup, http, tcp := checkByID(e, id+":mariposa"), checkByID(e, id+":http"), checkByID(e, id+":tcp")
		if e.Service.ID != id || sup == nil || http == nil || tcp == nil {
			return false, fmt.Sprintf("service %+v", e.Service)
		}
		firstPID = supervisorPID(sup.Output)
		return sup.Status == api.HealthPassing && http.Status == api.HealthPassing && tcp.Status == api.HealthPassing && firstPID > 0,
			fmt.Sprintf("supervisor %s %q, http %s, tcp %s", sup.Status, sup.Output, http.Status, tcp.Status)
	})

	e := serviceEntries(c, "web")[0]
	if e.Service.Meta["managed-by"] != "mariposa" || e.Service.Meta["version"] != "1.4.2" || e.Service.Meta["team"] != "storefront" {
		t.Errorf("meta = %v", e.Service.Meta)
	}
	if len(e.Service.Tags) != 1 || e.Service.Tags[0] != "v1" || e.Service.Port != port {
		t.Errorf("tags %v port %d", e.Service.Tags, e.Service.Port)
	}
	if sup := checkByID(e, id+":mariposa"); sup.Name != "mariposa supervisor" {
		t.Errorf("supervisor check name %q", sup.Name)
	}
	// mariposa registers itself too, with its liveness check.
	if es := serviceEntries(c, "mariposa"); len(es) != 1 || es[0].Service.ID != "mariposa-"+agent.Name {
		t.Errorf("mariposa self-registration: %d entries", len(es))
	}

	// DNS answers the service from the agent's DNS port.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, srvs, err := agent.Resolver().LookupSRV(ctx, "", "", "web.service.consul")
	if err != nil || len(srvs) != 1 || int(srvs[0].Port) != port {
		t.Fatalf("SRV web.service.consul = %v, %v", srvs, err)
	}
	addrs, err := agent.Resolver().LookupHost(ctx, "web.service.consul")
	if err != nil || len(addrs) != 1 || addrs[0] != "127.0.0.1" {
		t.Fatalf("A web.service.consul = %v, %v", addrs, err)
	}
	if addrs, err := agent.Resolver().LookupHost(ctx, "v1.web.service.consul"); err != nil || len(addrs) != 1 {
		t.Fatalf("A v1.web.service.consul = %v, %v", addrs, err)
	}

	// The child's environment.
	env := readEnv(t, envFile)
	for k, want := range map[string]string{
		"MARIPOSA_SERVICE": "web", "MARIPOSA_SERVICE_ID": id, "MARIPOSA_NODE": agent.Name,
		"MARIPOSA_PORT": fmt.Sprint(port), "MARIPOSA_ADDRESS": "127.0.0.1", "GREETING": "hello",
	} {
		if env[k] != want {
			t.Errorf("child env %s = %q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE"} {
		if _, ok := env[k]; ok {
			t.Errorf("child env has %s", k)
		}
	}
	// The child leads its own process group.
	if pgid, err := syscall.Getpgid(firstPID); err != nil || pgid != firstPID {
		t.Errorf("child pgid %d (%v), want its pid %d", pgid, err, firstPID)
	}

	// Kill the child: a new PID appears and the supervisor check says why.
	if err := syscall.Kill(firstPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var secondPID int
	waitFor(t, 10*time.Second, "a restarted child", func() (bool, string) {
		es := serviceEntries(c, "web")
		if len(es) != 1 {
			return false, "no entry"
		}
		sup := checkByID(es[0], id+":mariposa")
		secondPID = supervisorPID(sup.Output)
		return sup.Status == api.HealthPassing && secondPID > 0 && secondPID != firstPID &&
			strings.Contains(sup.Output, "restarted 1 time, last after killed by SIGKILL"), sup.Status + " " + sup.Output
	})
	if !consultest.ProcessAlive(secondPID) {
		t.Fatalf("new child %d not alive", secondPID)
	}
	waitFor(t, 5*time.Second, "the new child's output in mariposa's log", func() (bool, string) {
		return strings.Contains(m.out.String(), fmt.Sprintf("mariposa.web: testchild %d started", secondPID)), "not yet"
	})

	// SIGTERM: exit 0, nothing left in the catalog, no child alive.
	if code := m.stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if es := serviceEntries(c, "web"); len(es) != 0 {
		t.Errorf("web still in the catalog after stop: %d", len(es))
	}
	if es := serviceEntries(c, "mariposa"); len(es) != 0 {
		t.Errorf("mariposa still in the catalog after stop")
	}
	svcs, _ := c.Agent().Services()
	if len(svcs) != 1 || svcs["foreign-1"] == nil {
		t.Errorf("agent services after stop: %v; want only the foreign one", svcs)
	}
	if consultest.ProcessAlive(secondPID) {
		t.Errorf("child %d alive after mariposa stopped", secondPID)
	}
	if strings.Contains(m.out.String(), "sentinel-token") {
		t.Errorf("the token appears in the log")
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	var b []byte
	waitFor(t, 10*time.Second, "the child's env file", func() (bool, string) {
		var err error
		b, err = os.ReadFile(path)
		return err == nil, fmt.Sprint(err)
	})
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Bad files exit 1 with file:line:col diagnostics and touch nothing.
func TestRunBadFileExits1(t *testing.T) {
	agent := consultest.NewDev(t)
	hcl := writeHCL(t, `
service "web" {
  command = []
  port    = 70000
}
`)
	m := startMariposa(t, agent, nil, hcl)
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatal("mariposa did not exit on a bad file")
	}
	if code := m.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	out := m.out.String()
	for _, want := range []string{hcl + ":3:13: Empty command", hcl + ":4:13: Port out of range"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if svcs, _ := agent.Client(t).Agent().Services(); len(svcs) != 0 {
		t.Errorf("a bad file registered services: %v", svcs)
	}
}
