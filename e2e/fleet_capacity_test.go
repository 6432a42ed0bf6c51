package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// Placement by capacity on a real cluster (1 server, 3 clients), the
// clients' mariposas offering different memory ($MARIPOSA_CAPACITY, the
// -reserve flag, a node-local service with a resources block):
//   - c0: 1280 MiB less -reserve memory=256: 1024 MiB;
//   - c1: 896 MiB, of which its own service reserves 128: 768 MiB;
//   - c2: 512 MiB.
//
// Four units of one 256 MiB slot each, deployed one after the other,
// bin-pack: c2, c2 (full), then c1, c1. A unit of 2048 MiB is refused at
// deploy with each node's reason; a unit of 600 MiB × 2 deploys with the
// warning that there is room for 1, and `mariposa why` shows the capacity
// verdicts of its free slot; `status -json` shows each node's capacity,
// reserved and free. A reload of c1 with more for its own service publishes
// the new reservation, and its slots stay held by the same session.
func TestFleetCapacityBinpack(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewCluster(t, 1, 3)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	names := make([]string, 3)
	for i, a := range cl.Clients {
		names[i] = a.Name
	}
	local := writeHCL(t, `
service "agent" {
  command = ["sleep", "3600"]
  resources {
    memory = 128
  }
}
`)
	startMariposa(t, cl.Clients[0], []string{"MARIPOSA_CAPACITY=cpu=4000,memory=1280"}, "-cluster", "-reserve", "memory=256")
	m1 := startMariposa(t, cl.Clients[1], []string{"MARIPOSA_CAPACITY=cpu=4000,memory=896"}, "-cluster", local)
	startMariposa(t, cl.Clients[2], []string{"MARIPOSA_CAPACITY=cpu=4000,memory=512"}, "-cluster")
	waitFor(t, 60*time.Second, "every supervisor live, with its capacity", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		n := 0
		for _, e := range live {
			if placement.ParseCapacityMeta(e.Service.Meta) != nil {
				n++
			}
		}
		return n == 3, fmt.Sprint(len(live), " live, ", n, " with capacity")
	})

	unit := func(name string, count, memory int) string {
		return writeHCL(t, fmt.Sprintf(`
service %q {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/%s.$MARIPOSA_NODE.stamps"]
  count   = %d
  resources {
    memory = %d
  }
}
`, name, childBin, dir, name, count, memory))
	}
	want := []string{names[2], names[2], names[1], names[1]}
	for i, node := range want {
		name := fmt.Sprintf("u%d", i)
		deploy(t, cl.Servers[0], "-name", name, unit(name, 1, 256))
		waitFor(t, 60*time.Second, name+" placed", func() (bool, string) {
			h := slotHolders(t, c, name)[0]
			return h != "" && len(passingInstances(c, name)) == 1, h
		})
		if h := slotHolders(t, c, name)[0]; h != node {
			why, _ := exec.Command(mariposaBin, "why", "-consul-addr", cl.Servers[0].HTTPAddr(), name).CombinedOutput()
			t.Fatalf("%s went to %s, want %s (bin-packing c2, c2, c1, c1)\n%s", name, h, node, why)
		}
	}

	// Too big for any node: refused, each node's reason given.
	out, err := exec.Command(mariposaBin, "deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "huge", unit("huge", 1, 2048)).CombinedOutput()
	if err == nil {
		t.Fatalf("deploy of a unit no node fits succeeded:\n%s", out)
	}
	for i, free := range []int{1024, 768, 512} {
		if want := fmt.Sprintf("%s: needs 2048 MiB memory, %d MiB free", names[i], free); !strings.Contains(string(out), want) {
			t.Errorf("deploy huge: no %q in\n%s", want, out)
		}
	}
	if pairs, _, _ := c.KV().List(cluster.DeployPrefix+"huge/", nil); len(pairs) != 0 {
		t.Errorf("the refused deployment was written: %d keys", len(pairs))
	}

	// Room for one of two: a warning, one slot placed, the other free with
	// the capacity verdicts in why.
	out2 := deploy(t, cl.Servers[0], "-name", "wide", unit("wide", 2, 600))
	if !strings.Contains(out2, "room for 1") {
		t.Errorf("deploy wide: no warning of room for 1:\n%s", out2)
	}
	waitFor(t, 60*time.Second, "wide/0 or wide/1 on c0", func() (bool, string) {
		h := slotHolders(t, c, "wide")
		held := 0
		for _, n := range h {
			if n == names[0] {
				held++
			} else if n != "" {
				return false, fmt.Sprint(h)
			}
		}
		return held == 1 && len(passingInstances(c, "wide")) == 1, fmt.Sprint(h)
	})
	why, err := exec.Command(mariposaBin, "why", "-consul-addr", cl.Servers[0].HTTPAddr(), "wide").CombinedOutput()
	if err != nil {
		t.Fatalf("why wide: %v\n%s", err, why)
	}
	for _, want := range []string{"CAPACITY", "needs 600 MiB memory, 256 MiB free", "needs 600 MiB memory, 0 MiB free"} {
		if !strings.Contains(string(why), want) {
			t.Errorf("why wide: no %q in\n%s", want, why)
		}
	}

	// status -json: capacity, reserved and free per node.
	sj, err := exec.Command(mariposaBin, "status", "-json", "-consul-addr", cl.Servers[0].HTTPAddr()).Output()
	if err != nil {
		t.Fatalf("status -json: %v", err)
	}
	var st struct {
		Nodes []cluster.NodeCapacity `json:"nodes"`
	}
	if err := json.Unmarshal(sj, &st); err != nil {
		t.Fatal(err)
	}
	free := map[string]int{}
	for _, n := range st.Nodes {
		if n.Capacity == nil {
			t.Errorf("status: %s has no capacity", n.Node)
			continue
		}
		free[n.Node] = n.Free.Memory
	}
	if wantFree := map[string]int{names[0]: 1024 - 600, names[1]: 768 - 512, names[2]: 0}; fmt.Sprint(free) != fmt.Sprint(wantFree) {
		t.Errorf("status free memory %v, want %v\n%s", free, wantFree, sj)
	}
	text, err := exec.Command(mariposaBin, "status", "-consul-addr", cl.Servers[0].HTTPAddr()).Output()
	if err != nil || !strings.Contains(string(text), "MEM FREE") || !strings.Contains(string(text), "424 MiB") {
		t.Errorf("status: no capacity table with c0's 424 MiB free: %v\n%s", err, text)
	}

	// A reload that gives c1's own service more memory: c1 publishes it,
	// re-registering its mariposa service without ending its session.
	session := func() string {
		p, _, err := c.KV().Get(cluster.SlotKey("u2", 0), &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			return ""
		}
		return p.Session
	}
	before := session()
	if before == "" {
		t.Fatal("u2/0 not held")
	}
	if err := os.WriteFile(local, []byte(strings.Replace(`
service "agent" {
  command = ["sleep", "3600"]
  resources {
    memory = 128
  }
}
`, "128", "256", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = m1.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 60*time.Second, "c1 publishes local_memory 256", func() (bool, string) {
		for _, e := range passingInstances(c, "mariposa") {
			if e.Node.Node == names[1] {
				return e.Service.Meta[placement.MetaLocalMemory] == "256", fmt.Sprint(e.Service.Meta)
			}
		}
		return false, "c1 not live"
	})
	if after := session(); after != before {
		t.Errorf("u2/0's session changed with the re-registration: %q, was %q", after, before)
	}
}
