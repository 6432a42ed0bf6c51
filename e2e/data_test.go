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

// registerDB registers a "db" instance with a TTL check the test controls.
func registerDB(t *testing.T, c *api.Client, id string, port int) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: "db", Port: port, Address: "10.0.0." + id[len(id)-1:],
		Tags: []string{"primary"}, Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: "1h"}})
	if err != nil {
		t.Fatal(err)
	}
}

func setDB(t *testing.T, c *api.Client, id string, passing bool) {
	t.Helper()
	var err error
	if passing {
		err = c.Agent().PassTTL(id+":ttl", "ok")
	} else {
		err = c.Agent().FailTTL(id+":ttl", "down")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A dependent waits, saying for what, starts once its dependency has enough
// passing instances, gets their addresses, and stops when it loses them
// (on_lost = "stop"), to start again when they are back.
func TestDependencyGating(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	registerDB(t, c, "db1", 3306)
	registerDB(t, c, "db2", 3307)
	envFile := filepath.Join(t.TempDir(), "env")
	hcl := writeHCL(t, fmt.Sprintf(`
service "app" {
  command = [%q, "-env-file", %q]
  depends_on "db" {
    tag     = "primary"
    passing = 2
    on_lost = "stop"
  }
}
`, childBin, envFile))
	startMariposa(t, agent, nil, hcl)
	waitSupervisor(t, c, "app", agent.Name, api.HealthCritical, "waiting: db needs 2 passing db (tag primary), has 0")
	setDB(t, c, "db1", true)
	waitSupervisor(t, c, "app", agent.Name, api.HealthCritical, "waiting: db needs 2 passing db (tag primary), has 1")
	if _, err := os.Stat(envFile); err == nil {
		t.Fatal("app started before its dependency held")
	}
	setDB(t, c, "db2", true)
	pid := waitRunning(t, c, "app", agent.Name)
	env := readEnv(t, envFile)
	if env["DB_ADDR"] != "10.0.0.1:3306" || env["DB_ADDRS"] != "10.0.0.1:3306,10.0.0.2:3307" ||
		env["DB_HOST"] != "10.0.0.1" || env["DB_PORT"] != "3306" {
		t.Errorf("dependency env: ADDR %q ADDRS %q HOST %q PORT %q", env["DB_ADDR"], env["DB_ADDRS"], env["DB_HOST"], env["DB_PORT"])
	}

	// Lost: stopped, waiting again; back: started again.
	setDB(t, c, "db2", false)
	waitSupervisor(t, c, "app", agent.Name, api.HealthCritical, "waiting: db needs 2 passing db (tag primary), has 1")
	waitFor(t, 10*time.Second, "app stopped", func() (bool, string) { return !alive(pid), "alive" })
	setDB(t, c, "db2", true)
	waitRunning(t, c, "app", agent.Name, pid)
	if r := instanceReport(t, supervisorCheck(c, "app", agent.Name)); r.Restarts != 1 || r.LastExit != "dependency db lost" {
		t.Errorf("app: %+v, want started twice (1 restart, after the dependency was lost)", r)
	}
}

// on_lost = "restart" keeps the process through the loss and restarts it
// when the dependency is back; a timeout turns a wait into a failure.
func TestDependencyRestartAndTimeout(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	registerDB(t, c, "db1", 3306)
	setDB(t, c, "db1", true)
	hcl := writeHCL(t, fmt.Sprintf(`
service "app" {
  command = [%q]
  depends_on "db" {
    on_lost = "restart"
  }
}

service "impatient" {
  command = [%q]
  depends_on "cache" {
    service = "redis"
    timeout = "1s"
  }
}
`, childBin, childBin))
	startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "app", agent.Name)
	waitSupervisor(t, c, "impatient", agent.Name, api.HealthCritical, "failed: gave up after 1s waiting: cache needs 1 passing redis, has 0")

	setDB(t, c, "db1", false)
	consistently(t, 1500*time.Millisecond, "app keeps running while db is lost", func() (bool, string) {
		return alive(pid), "dead"
	})
	setDB(t, c, "db1", true)
	waitRunning(t, c, "app", agent.Name, pid)
	waitSupervisor(t, c, "app", agent.Name, api.HealthPassing, "last after dependency db came back")
}

// A template that misses data blocks the first start and says what it
// misses; a KV change rewrites the file and delivers the signal exactly once
// per change; rapid changes with `wait` produce one reload.
func TestTemplateSignalOnce(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q, "-grandchildren", "1", "-pids-file", "pids"]
  dir     = %q

  template {
    contents    = "greeting = {{ key \"app/greeting\" }}\n"
    destination = "web.conf"
    change_mode = "signal"
    signal      = "SIGHUP"
  }

  template {
    contents    = "cmd = {{ key \"app/greeting\" }}\n"
    destination = "cmd.conf"
    change_mode = "command"
    command     = ["/bin/sh", "-c", "cat cmd.conf >> cmd.log"]
  }

  template {
    contents    = "burst = {{ key \"app/burst\" }}\n"
    destination = "burst.conf"
    change_mode = "signal"
    signal      = "SIGUSR1"
    wait        = { min = "700ms", max = "5s" }
  }
}
`, childBin, dir))
	m := startMariposa(t, agent, nil, hcl)
	waitSupervisor(t, c, "web", agent.Name, api.HealthCritical, `app/greeting`)
	put := func(k, v string) {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("app/burst", "0")
	put("app/greeting", "hello")
	webPID := waitRunning(t, c, "web", agent.Name)
	waitFor(t, 10*time.Second, "the child ready for signals", func() (bool, string) {
		return strings.Contains(m.out.String(), fmt.Sprintf("testchild %d started", webPID)), "not yet"
	})
	conf := filepath.Join(dir, "web.conf")
	if b, _ := os.ReadFile(conf); string(b) != "greeting = hello\n" {
		t.Fatalf("web.conf = %q", b)
	}
	hups := func() int { return strings.Count(m.out.String(), "got hangup") }
	if hups() != 0 {
		t.Fatal("signalled on the first render")
	}
	for i, v := range []string{"bonjour", "hola", "ciao"} {
		put("app/greeting", v)
		waitFor(t, 10*time.Second, "the file and one signal", func() (bool, string) {
			b, _ := os.ReadFile(conf)
			return string(b) == "greeting = "+v+"\n" && hups() == i+1, fmt.Sprintf("%q, %d signals", b, hups())
		})
	}
	// The change command ran once per change, one at a time, in the
	// service's directory (each run reads the file as it is then).
	waitFor(t, 10*time.Second, "the change command", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(dir, "cmd.log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(lines) == 3 && lines[2] == "cmd = ciao", fmt.Sprintf("%q", b)
	})
	// The signal went to the service's process, not its group: the helper
	// it started lives on (a group signal kills a `sleep` with SIGHUP).
	if pids := readPIDs(t, filepath.Join(dir, "pids")); len(pids) != 2 || !alive(pids[1]) {
		t.Fatalf("the service's helper did not survive its reload signals: pids %v", pids)
	}
	// The same value again: nothing to write, nothing to signal.
	put("app/greeting", "ciao")
	consistently(t, time.Second, "no signal for unchanged content", func() (bool, string) {
		return hups() == 3, fmt.Sprint(hups())
	})

	// 50 rapid writes within the quiescence window: one reload.
	usr1 := func() int { return strings.Count(m.out.String(), "got user defined signal 1") }
	for i := 1; i <= 50; i++ {
		put("app/burst", fmt.Sprint(i))
	}
	waitFor(t, 15*time.Second, "burst.conf final", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(dir, "burst.conf"))
		return string(b) == "burst = 50\n", string(b)
	})
	waitFor(t, 10*time.Second, "the burst's reload", func() (bool, string) {
		return usr1() >= 1, fmt.Sprint(usr1())
	})
	consistently(t, 1500*time.Millisecond, "one reload for the burst", func() (bool, string) {
		return usr1() == 1, fmt.Sprint(usr1())
	})
}

// env = true templates feed the child's environment; a change restarts it.
func TestEnvTemplate(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	if _, err := c.KV().Put(&api.KVPair{Key: "app/mode", Value: []byte("blue")}, nil); err != nil {
		t.Fatal(err)
	}
	hcl := writeHCL(t, fmt.Sprintf(`
service "envy" {
  command = [%q, "-env-file", %q]
  dir     = %q
  template {
    contents    = "# from Consul\nMODE={{ key \"app/mode\" }}\n"
    destination = "app.env"
    env         = true
  }
}
`, childBin, envFile, dir))
	startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "envy", agent.Name)
	if env := readEnv(t, envFile); env["MODE"] != "blue" {
		t.Fatalf("MODE = %q", env["MODE"])
	}
	os.Remove(envFile)
	if _, err := c.KV().Put(&api.KVPair{Key: "app/mode", Value: []byte("green")}, nil); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, "envy", agent.Name, pid)
	if env := readEnv(t, envFile); env["MODE"] != "green" {
		t.Fatalf("MODE after the change = %q", env["MODE"])
	}
}
