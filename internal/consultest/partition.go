package consultest

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

var partitions atomic.Int64

// Partition splits a NewFleet cluster in two: the agents given (the
// minority, say a client and one server) keep talking to each other, and
// neither side hears the other, gossip and RPC, TCP and UDP, in both
// directions; every agent's HTTP API and DNS on 127.0.0.1 still answer its
// node. It is one nftables table, built as Cut's: input drops packets
// between the two sides' addresses, and output marks (and input drops) the
// packets an agent's own sockets send from 127.0.0.1 to the other side.
// The returned function heals it; so does the test's cleanup.
func (c *Cluster) Partition(t testing.TB, side ...*Agent) (heal func()) {
	t.Helper()
	RequireFirewall(t)
	in := map[*Agent]bool{}
	for _, a := range side {
		in[a] = true
	}
	var addrA, addrB, gidA, gidB []string
	for _, a := range c.Agents() {
		if a.gid == 0 || a.Addr == "127.0.0.1" {
			t.Fatalf("consultest: Partition needs agents of NewFleet (%s binds %s)", a.Name, a.Addr)
		}
		if in[a] {
			addrA, gidA = append(addrA, a.Addr), append(gidA, fmt.Sprint(a.gid))
		} else {
			addrB, gidB = append(addrB, a.Addr), append(gidB, fmt.Sprint(a.gid))
		}
	}
	if len(addrA) == 0 || len(addrB) == 0 {
		t.Fatal("consultest: a partition needs agents on both sides")
	}
	set := func(s []string) string { return "{ " + strings.Join(s, ", ") + " }" }
	name := fmt.Sprintf("%s%d_part_%d", tablePrefix, os.Getpid(), partitions.Add(1))
	const mark = 0x4d50
	script := fmt.Sprintf(`add table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain out {
		type filter hook output priority filter; policy accept;
		meta skgid %[4]s ip daddr %[3]s meta mark set %[6]d
		meta skgid %[5]s ip daddr %[2]s meta mark set %[6]d
	}
	chain in {
		type filter hook input priority filter; policy accept;
		ip saddr %[2]s ip daddr %[3]s drop
		ip saddr %[3]s ip daddr %[2]s drop
		meta mark %[6]d drop
	}
}
`, name, set(addrA), set(addrB), set(gidA), set(gidB), mark)
	fwMu.Lock()
	err := nft(script)
	fwMu.Unlock()
	if err != nil {
		t.Fatalf("partition: %v", err)
	}
	healed := false
	heal = func() {
		fwMu.Lock()
		defer fwMu.Unlock()
		if healed {
			return
		}
		healed = true
		if err := nft("delete table ip " + name + "\n"); err != nil {
			t.Errorf("heal partition: %v", err)
		}
	}
	t.Cleanup(heal)
	return heal
}
