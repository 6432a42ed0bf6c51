package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// operatorCLI runs a mariposa command as an operator on another machine
// would: no control socket of its own, no Consul token but what args
// give. It returns the output and the exit code.
func operatorCLI(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(mariposaBin, args...)
	cmd.Env = append(withoutConsulEnv(os.Environ()), "MARIPOSA_CONTROL_SOCKET="+filepath.Join(t.TempDir(), "none.sock"))
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func withoutConsulEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "CONSUL_HTTP_") {
			out = append(out, e)
		}
	}
	return out
}

// auditEvents reads m's audit file (beside its control socket).
func auditEvents(t testing.TB, m *mariposa) []supervisor.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(filepath.Dir(m.sock), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []supervisor.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e supervisor.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// waitAudit waits for an event of m's audit file that want matches.
func waitAudit(t testing.TB, m *mariposa, what string, want func(supervisor.Event) bool) supervisor.Event {
	t.Helper()
	var got supervisor.Event
	waitFor(t, 10*time.Second, what+" in the audit file", func() (bool, string) {
		evs := auditEvents(t, m)
		for _, e := range evs {
			if want(e) {
				got = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs))
	})
	return got
}

// TestRemoteLogsAndRestart: from a machine of the cluster that is not the
// node, logs -node reads a service's lines through the node's HTTP API
// (bounded by the ring; -f streams), and restart -node restarts it (a new
// PID), recorded in the node's audit file and events with who asked.
func TestRemoteLogsAndRestart(t *testing.T) {
	t.Parallel()
	cl := consultest.NewCluster(t, 1, 1)
	server, node := cl.Servers[0], cl.Clients[0]
	c := server.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}

service "chatty" {
  command = ["/bin/sh", "-c", "i=0; while [ $i -lt 1500 ]; do echo line $i; i=$((i+1)); done; exec sleep 3600"]
}

service "ticker" {
  command = ["/bin/sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done"]
}
`, childBin))
	m := startMariposa(t, node, nil, "-http-addr", "127.0.0.1:0", hcl)
	base := apiURL(t, c, node.Name)
	pid := waitRunning(t, c, "web", node.Name)
	// The operator's commands go through the server's agent, not the node's.
	consul := []string{"-consul-addr", server.HTTPAddr(), "-node", node.Name}
	cli := func(cmd string, args ...string) (string, int) {
		return operatorCLI(t, append(append([]string{cmd}, consul...), args...)...)
	}

	waitFor(t, 20*time.Second, "chatty's last lines through logs -node", func() (bool, string) {
		out, code := cli("logs", "-n", "3", "chatty")
		return code == 0 && out == "line 1497\nline 1498\nline 1499\n", fmt.Sprintf("exit %d %q", code, out)
	})
	out, code := cli("logs", "-n", "100000", "chatty")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) >= 1500 || len(lines) < 100 || lines[len(lines)-1] != "line 1499" ||
		lines[0] != fmt.Sprintf("line %d", 1500-len(lines)) {
		t.Errorf("logs -n 100000: exit %d, %d lines from %q to %q; want the ring's newest lines, fewer than 1500", code, len(lines), lines[0], lines[len(lines)-1])
	}

	// -f streams new lines as they come, until interrupted.
	cmd := exec.Command(mariposaBin, append(append([]string{"logs"}, consul...), "-f", "-n", "0", "ticker")...)
	cmd.Env = withoutConsulEnv(os.Environ())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	got := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			got <- sc.Text()
		}
		close(got)
	}()
	var ticks []string
	deadline := time.After(20 * time.Second)
	for len(ticks) < 3 {
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatalf("logs -f ended after %q: %s", ticks, stderr.String())
			}
			if !strings.HasPrefix(l, "tick ") {
				t.Fatalf("logs -f printed %q", l)
			}
			ticks = append(ticks, l)
		case <-deadline:
			t.Fatalf("logs -f printed %q in 20s: %s", ticks, stderr.String())
		}
	}
	var a, b int
	fmt.Sscanf(ticks[0], "tick %d", &a)
	fmt.Sscanf(ticks[2], "tick %d", &b)
	if b != a+2 {
		t.Errorf("logs -f: %q are not consecutive lines", ticks)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("logs -f after SIGINT: %v: %s", err, stderr.String())
	}

	// restart: a new process, recorded with who asked.
	events := followEvents(t, base, "")
	out, code = cli("restart", "web")
	if code != 0 || out != fmt.Sprintf("web on node %s: restarting\n", node.Name) {
		t.Fatalf("restart -node: exit %d %q", code, out)
	}
	newPID := waitRunning(t, c, "web", node.Name, pid)
	if newPID == pid {
		t.Fatalf("web still pid %d", pid)
	}
	e := awaitEvent(t, events, "web's restart in /v1/events", func(e supervisor.Event) bool {
		return e.Service == "web" && e.Kind == supervisor.EventRestarting
	})
	if !strings.HasPrefix(e.Actor, "http remote=127.0.0.1:") || e.Reason != "restarted by an operator" {
		t.Errorf("restart event: %+v; want the HTTP caller as its actor", e)
	}
	waitAudit(t, m, "web's restart with its actor", func(e supervisor.Event) bool {
		return e.Service == "web" && e.Kind == supervisor.EventRestarting && strings.HasPrefix(e.Actor, "http remote=127.0.0.1:")
	})
	for _, e := range auditEvents(t, m) {
		if e.Actor != "" && (e.Service != "web" || e.Kind != supervisor.EventRestarting) {
			t.Errorf("an event that no operator asked for has an actor: %+v", e)
		}
	}

	// Through the node's own control socket, the actor is the local user.
	if out, code := m.cli(t, "restart", "web"); code != 0 {
		t.Fatalf("local restart: exit %d %s", code, out)
	}
	waitAudit(t, m, "web's local restart with its actor", func(e supervisor.Event) bool {
		return e.Service == "web" && strings.HasPrefix(e.Actor, fmt.Sprintf("socket uid=%d pid=", os.Geteuid()))
	})

	// A node without mariposa, and an unknown one.
	if out, code := operatorCLI(t, "restart", "-consul-addr", server.HTTPAddr(), "-node", server.Name, "web"); code != 1 ||
		!strings.Contains(out, fmt.Sprintf("node %s runs no mariposa", server.Name)) {
		t.Errorf("restart on a node without mariposa: exit %d %q", code, out)
	}
	if out, code := operatorCLI(t, "logs", "-consul-addr", server.HTTPAddr(), "-node", "nope", "web"); code != 1 ||
		!strings.Contains(out, fmt.Sprintf(`no node "nope" in Consul's catalog (mariposa runs on %s)`, node.Name)) {
		t.Errorf("logs on an unknown node: exit %d %q", code, out)
	}
}

// The operator's token of TestRemoteRestartACL: finding a node's
// mariposa, reading web and restarting it.
const remoteOperatorPolicy = `
node_prefix "" {
  policy = "read"
}
service "mariposa" {
  policy = "read"
}
service "web" {
  policy = "write"
}
`

// TestRemoteRestartACL: with Consul's ACLs on, restart -node needs a token
// with service:write on the service, and says so; with one, it restarts
// the service, and the node's audit file names the token's AccessorID,
// never the token.
func TestRemoteRestartACL(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t, consultest.Options{ACL: true})
	root := agent.Client(t)
	token := func(name, rules string) *api.ACLToken {
		pol, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := root.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	reader := token("cli-reader", strings.Replace(remoteOperatorPolicy, `service "web" {
  policy = "write"`, `service "web" {
  policy = "read"`, 1))
	operator := token("cli-operator", remoteOperatorPolicy)
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}
service "db" {
  command = [%q]
}
`, childBin, childBin))
	m := startMariposa(t, agent, []string{"CONSUL_HTTP_TOKEN=" + consultest.ManagementToken}, "-http-addr", "127.0.0.1:0", hcl)
	apiURL(t, root, agent.Name)
	pid := waitRunning(t, root, "web", agent.Name)
	consul := []string{"-consul-addr", agent.HTTPAddr(), "-node", agent.Name}
	cli := func(cmd, tok string, args ...string) (string, int) {
		return operatorCLI(t, append(append([]string{cmd, "-token", tok}, consul...), args...)...)
	}

	if out, code := cli("restart", reader.SecretID, "web"); code != 1 || !strings.Contains(out,
		fmt.Sprintf(`node %s's mariposa refused: Permission denied: token with AccessorID %q lacks service:write on "web"`, agent.Name, reader.AccessorID)) {
		t.Errorf("restart with service:read: exit %d %q", code, out)
	}
	if out, code := cli("logs", reader.SecretID, "db"); code != 1 || !strings.Contains(out, `lacks service:read on "db"`) {
		t.Errorf("logs of db without service:read: exit %d %q", code, out)
	}
	if out, code := cli("restart", operator.SecretID, "web"); code != 0 {
		t.Fatalf("restart with service:write: exit %d %q", code, out)
	}
	waitRunning(t, root, "web", agent.Name, pid)
	e := waitAudit(t, m, "web's restart", func(e supervisor.Event) bool {
		return e.Service == "web" && e.Kind == supervisor.EventRestarting
	})
	if !strings.HasPrefix(e.Actor, "http accessor="+operator.AccessorID+" remote=127.0.0.1:") {
		t.Errorf("restart's actor %q, want the operator token's AccessorID %s", e.Actor, operator.AccessorID)
	}
	if m.stop(t, syscall.SIGTERM, 20*time.Second) != 0 {
		t.Fatal("mariposa did not stop cleanly")
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(m.sock), "audit.jsonl"))
	for _, secret := range []string{reader.SecretID, operator.SecretID} {
		if strings.Contains(m.out.String(), secret) || strings.Contains(string(b), secret) {
			t.Error("a token's secret is in mariposa's log or audit file")
		}
	}
}
