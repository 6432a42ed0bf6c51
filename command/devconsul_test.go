package command

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/proc"
)

// A port the dev agent needs is taken: the error carries the agent's own
// words (which port it could not bind) and every port mariposa asked for,
// not a guess that blames the HTTP port.
func TestDevConsulPortTaken(t *testing.T) {
	consultest.RequireBinary(t)
	t.Setenv(consultest.EnvBinary, consultest.RequireBinary(t))
	fp := consultest.FreePorts(t, 7)
	ports := devPorts{HTTP: fp[0], DNS: fp[1], Server: fp[2], SerfLAN: fp[3], SerfWAN: fp[4], GRPC: fp[5], GRPCTLS: fp[6]}
	taken, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports.Server))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	d, err := startDevConsulPorts("127.0.0.1", ports, hclog.NewNullLogger())
	if err == nil {
		d.stop()
		t.Fatal("the dev agent started on a taken port")
	}
	msg := err.Error()
	t.Logf("what the user sees:\n%s", msg)
	for _, want := range []string{
		"the Consul dev agent",
		fmt.Sprintf("127.0.0.1:%d: bind: address already in use", ports.Server), // the agent's own line
		fmt.Sprintf("mariposa asked it for the ports http %d, dns %d, server %d, serf-lan %d, serf-wan %d, grpc %d, grpc-tls %d on 127.0.0.1",
			ports.HTTP, ports.DNS, ports.Server, ports.SerfLAN, ports.SerfWAN, ports.GRPC, ports.GRPCTLS),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "is port") {
		t.Errorf("error guesses a port:\n%s", msg)
	}
}

func TestLineTailErrors(t *testing.T) {
	tl := &lineTail{max: 3}
	for _, l := range []string{"a", "b", "2026-11-23T09:38:19.949Z [ERROR] agent: Error starting agent: boom", "c"} {
		tl.add(lineOut(l))
	}
	if got := tl.errors(); len(got) != 1 || got[0] != "[ERROR] agent: Error starting agent: boom" {
		t.Errorf("errors = %q", got)
	}
	tl = &lineTail{max: 10}
	for _, l := range []string{"1", "2", "3", "4", "5", "6"} {
		tl.add(lineOut(l))
	}
	if got := strings.Join(tl.errors(), ","); got != "2,3,4,5,6" {
		t.Errorf("no error lines: the last ones, got %q", got)
	}
}

func lineOut(s string) proc.Line { return proc.Line{Name: "consul", Stream: "stdout", Text: s} }
