package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestFleetSlotLogs (issue 25 item 2): a slot's instance has its lines in
// mariposa logs, through the node's control socket and through its HTTP API
// (logs -node, logs -f, GET /v1/logs/api%2F0), by its instance name
// (api/0) and by its unit's name when the node holds one slot of it (api);
// restart -node takes the unit's name too and says which instance it
// restarted; an unknown name lists what the node has.
//
// Mutation check: with the lines filed under the service's name ("api")
// instead of the instance's (Instance.tap not renaming them), every read
// of api/0 is empty and the test fails at its first wait.
func TestFleetSlotLogs(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	t.Parallel()
	cl := consultest.NewCluster(t, 1, 1)
	server, node := cl.Servers[0], cl.Clients[0]
	c := server.Client(t)
	m := startMariposa(t, node, nil, "-cluster", "-http-addr", "127.0.0.1:0")
	base := apiURL(t, c, node.Name)
	deploy(t, server, "-name", "api", writeHCL(t, `
service "api" {
  command = ["/bin/sh", "-c", "i=0; while :; do echo api line $i; i=$((i+1)); sleep 0.2; done"]
  count   = 1
}
`))
	waitFor(t, 60*time.Second, "api/0 held by "+node.Name, func() (bool, string) {
		h := slotHolders(t, c, "api")
		return h[0] == node.Name, fmt.Sprint(h)
	})
	remote := []string{"-consul-addr", server.HTTPAddr(), "-node", node.Name}
	hasLines := func(out string, code int) (bool, string) {
		return code == 0 && strings.HasPrefix(out, "api line "), fmt.Sprintf("exit %d %q", code, out)
	}
	for _, name := range []string{"api/0", "api"} {
		waitFor(t, 30*time.Second, "logs "+name+" through the socket", func() (bool, string) {
			return hasLines(m.cli(t, "logs", "-n", "2", name))
		})
		waitFor(t, 30*time.Second, "logs -node "+name, func() (bool, string) {
			return hasLines(operatorCLI(t, append(append([]string{"logs"}, remote...), "-n", "2", name)...))
		})
	}
	code, body := get(t, "GET", base+"/v1/logs/api%2F0?format=text", "")
	if code != 200 || !strings.Contains(string(body), "stdout api line ") {
		t.Errorf("GET /v1/logs/api%%2F0: %d %q", code, body)
	}

	// -f through the node's API: new lines as they come.
	cmd := exec.Command(mariposaBin, append(append([]string{"logs"}, remote...), "-f", "-n", "0", "api")...)
	cmd.Env = withoutConsulEnv(os.Environ())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			got <- sc.Text()
		}
		close(got)
	}()
	select {
	case l := <-got:
		if !strings.HasPrefix(l, "api line ") {
			t.Errorf("logs -f api printed %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Error("logs -f api printed nothing in 30s")
	}

	// restart by the unit's name: the one instance, named.
	out, code := operatorCLI(t, append(append([]string{"restart"}, remote...), "api")...)
	if code != 0 || out != fmt.Sprintf("api/0 on node %s: restarting\n", node.Name) {
		t.Errorf("restart -node %s api: exit %d %q", node.Name, code, out)
	}
	// An unknown name: what the node has.
	for _, args := range [][]string{{"logs", "apx"}, append(append([]string{"logs"}, remote...), "apx")} {
		var out string
		var code int
		if args[1] == "apx" {
			out, code = m.cli(t, args...)
		} else {
			out, code = operatorCLI(t, args...)
		}
		if code != 1 || !strings.Contains(out, `no service "apx" on `) || !strings.Contains(out, "(services: api/0)") {
			t.Errorf("%v: exit %d %q; want the node's instances listed", args, code, out)
		}
	}
}
