//go:build linux

package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestStatefulWorkedExample runs the worked example of website/stateful.md
// ("## A worked example on one machine") as a user would, in namespaces of
// its own as TestClusterWorkedExample does: the sh block word for word
// (four Consul agents, three mariposas with their node APIs and volume
// directories), the hcl block as cache.hcl, and the text blocks' commands,
// which must print what the page shows: a Redis key written on n1 is read
// back from n2 after the drain.
func TestStatefulWorkedExample(t *testing.T) {
	consultest.SkipShort(t, "the worked example starts four Consul agents and three mariposas")
	requireExampleNamespaces(t)
	_, err := exec.LookPath("redis-server")
	consultest.Require(t, err == nil, "redis-server (Debian package redis-server) is not installed")
	_, err = exec.LookPath("redis-cli")
	consultest.Require(t, err == nil, "redis-cli (Debian package redis-tools) is not installed")
	consulBin := consultest.RequireBinary(t)
	ex := readExampleSection(t, "../website/stateful.md")
	var cmds []string
	for _, s := range ex.steps {
		cmds = append(cmds, s.cmd)
	}
	want := []string{"mariposa deploy cache.hcl", "redis-cli -h 127.0.0.2 set greeting hello", "mariposa drain -wait n1", "redis-cli -h 127.0.0.3 get greeting"}
	if !slices.Equal(cmds, want) {
		t.Fatalf("the worked example's text blocks run %q; this test knows %q (update it with the page)", cmds, want)
	}
	ns := startExampleAs(t, consulBin, ex.sh, "cache.hcl", ex.hcl)
	ns.waitNodes(t)
	deploy, set, drain, get := ex.steps[0], ex.steps[1], ex.steps[2], ex.steps[3]
	out, code := ns.run(t, deploy.cmd)
	if got, want := normalise(lines(out), nil), normalise(deploy.out, nil); code != 0 || !slices.Equal(got, want) {
		t.Fatalf("%s: exit %d:\n%s\nthe page shows:\n%s", deploy.cmd, code, out, strings.Join(deploy.out, "\n"))
	}
	// Redis answers on n1 once its slot is claimed and it has started.
	expectOutput(t, ns, set, 60*time.Second)
	out, code = ns.run(t, drain.cmd)
	if got, want := normalise(lines(out), nil), normalise(drain.out, nil); code != 0 || !slices.Equal(got, want) {
		t.Fatalf("%s: exit %d:\n%s\nthe page shows:\n%s", drain.cmd, code, out, strings.Join(drain.out, "\n"))
	}
	expectOutput(t, ns, get, 30*time.Second)
}
