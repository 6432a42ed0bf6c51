package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// Under systemd (Type=notify) mariposa sends READY=1 once its services are
// registered with the agent, STOPPING=1 when it stops, and keeps the notify
// socket to itself: its children do not inherit NOTIFY_SOCKET.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir, err := os.MkdirTemp("", "mnotify") // a socket path has a 108-byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sockPath := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()

	envFile := filepath.Join(t.TempDir(), "env")
	hcl := writeHCL(t, fmt.Sprintf(`
service "api" {
  command = [%q, "-env-file", %q]
}

service "worker" {
  command = [%q]
}

service "scheduler" {
  command = [%q]

  leader {
    mode = "standby"
  }
}
`, childBin, envFile, childBin, childBin))
	// Another instance leads the scheduler: this one stays a standby,
	// unregistered, and mariposa is ready all the same.
	sess, _, err := c.Session().Create(&api.SessionEntry{Name: "the other leader", TTL: "60s", Checks: []string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: "mariposa/leader/scheduler", Session: sess}, nil); err != nil || !ok {
		t.Fatalf("taking the scheduler's lock: %v %v", ok, err)
	}
	m := startMariposa(t, agent, []string{"NOTIFY_SOCKET=" + sockPath}, hcl)

	var ready string
	select {
	case ready = <-msgs:
	case <-time.After(30 * time.Second):
		t.Fatal("no message on the notify socket within 30s")
	}
	if !strings.HasPrefix(ready, "READY=1\n") {
		t.Fatalf("first notification = %q, want READY=1 first", ready)
	}
	// READY means registered: the agent lists both services already.
	svcs, err := c.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api", "worker", "mariposa"} {
		found := false
		for _, s := range svcs {
			found = found || s.Service == name
		}
		if !found {
			t.Errorf("READY=1 sent before %s was registered (agent has %d services)", name, len(svcs))
		}
	}
	for _, s := range svcs {
		if s.Service == "scheduler" {
			t.Errorf("the standby scheduler is registered")
		}
	}
	if env := readEnv(t, envFile); env["NOTIFY_SOCKET"] != "" {
		t.Errorf("the child inherited NOTIFY_SOCKET=%s", env["NOTIFY_SOCKET"])
	}

	if code := m.stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	select {
	case s := <-msgs:
		if !strings.HasPrefix(s, "STOPPING=1") {
			t.Errorf("notification after SIGTERM = %q, want STOPPING=1", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("no STOPPING=1 after SIGTERM")
	}
}
