package e2e

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A check that leaves out its host probes the instance where it listens:
// http = "/health" and tcp = "" on the service's registered address and
// port (its address attribute, else the node's), the address the child
// gets as MARIPOSA_ADDRESS; an args check runs with the child's
// environment. Against a real agent, with servers that listen only there
// (127.0.0.2 for the service with an address: a check sent to the node's
// 127.0.0.1 would fail).
func TestCheckOnServiceAddress(t *testing.T) {
	t.Parallel()
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		consultest.Require(t, false, "this machine cannot listen on 127.0.0.2: "+err.Error())
	} else {
		l.Close()
	}
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	p1, p2 := freePort(t), freePort(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "addressed" {
  command = ["/bin/sh", "-c", "exec %[1]s -http \"$MARIPOSA_ADDRESS:$MARIPOSA_PORT\""]
  address = "127.0.0.2"
  port    = %[2]d
  check "http" {
    http     = "/health"
    interval = "200ms"
    timeout  = "1s"
  }
  check "tcp" {
    tcp      = ""
    interval = "200ms"
    timeout  = "1s"
  }
  check "env" {
    args     = ["/bin/sh", "-c", "test \"$MARIPOSA_ADDRESS:$MARIPOSA_PORT\" = 127.0.0.2:%[2]d"]
    interval = "200ms"
    timeout  = "2s"
  }
}

service "bare" {
  command = ["/bin/sh", "-c", "exec %[1]s -http \"$MARIPOSA_ADDRESS:$MARIPOSA_PORT\""]
  port    = %[3]d
  check "http" {
    http     = "/health"
    interval = "200ms"
    timeout  = "1s"
  }
  check "tcp" {
    tcp      = ":%[3]d"
    interval = "200ms"
    timeout  = "1s"
  }
}
`, childBin, p1, p2))
	startMariposa(t, agent, nil, hcl)
	node := agent.Name
	// Each child listens only on its MARIPOSA_ADDRESS and port: a check
	// passes only if the agent probed there.
	want := []string{"addressed-" + node + ":http", "addressed-" + node + ":tcp", "addressed-" + node + ":env",
		"bare-" + node + ":http", "bare-" + node + ":tcp"}
	waitFor(t, 30*time.Second, "every check passing", func() (bool, string) {
		checks, err := c.Agent().Checks()
		if err != nil {
			return false, err.Error()
		}
		for _, id := range want {
			ch := checks[id]
			if ch == nil || ch.Status != api.HealthPassing {
				return false, fmt.Sprintf("%s: %+v", id, ch)
			}
		}
		return true, ""
	})
}
