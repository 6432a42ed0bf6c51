package consultest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Network faults. Cut isolates one fleet agent: its Serf and server RPC
// traffic goes nowhere, in both directions, TCP and UDP, while its HTTP API
// and DNS on 127.0.0.1 still answer the mariposa of its node. It is an
// nftables table of its own, named for the test process and the agent's
// address (mariposa_test_<pid>_127_77_x_y), with two chains:
//
//   - input drops every packet from or to the agent's address: gossip
//     (UDP and TCP) and RPC it sends from its address, and all that the
//     others send to it;
//   - output marks the packets of the agent's own sockets (its group, see
//     NewFleet) to any address but 127.0.0.1, and input drops them: the
//     TCP connections memberlist opens (push/pull, the TCP fallback of a
//     probe) are not bound to the agent's address and leave from 127.0.0.1.
//
// Drops happen on input, so a sender sees no error, only silence, as on a
// cut network. Heal deletes the table; so does the test's cleanup, and
// NewFleet deletes the tables a crashed test process left behind (a table
// is stale once no live process holds its address's lock file).

const tablePrefix = "mariposa_test_"

var (
	fwOnce sync.Once
	fwErr  error
	// fwMu serialises this process's nft changes, and activeCuts are the
	// tables it has in place.
	fwMu       sync.Mutex
	activeCuts = map[string]bool{}
)

// FirewallAvailable returns nil when Cut can work here: Linux, root, and
// nft (Debian package nftables) able to change the ruleset.
func FirewallAvailable() error {
	fwOnce.Do(func() { fwErr = checkFirewall() })
	return fwErr
}

func checkFirewall() error {
	if runtime.GOOS != "linux" {
		return errors.New("network faults need Linux (nftables)")
	}
	if os.Geteuid() != 0 {
		return errors.New("network faults need root (nftables rules on lo)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("network faults need nft (apt-get install nftables)")
	}
	probe := fmt.Sprintf("%sprobe_%d", tablePrefix, os.Getpid())
	if err := nft(fmt.Sprintf("add table ip %s\ndelete table ip %s\n", probe, probe)); err != nil {
		return fmt.Errorf("network faults: nft cannot change the ruleset: %v", err)
	}
	return nil
}

// RequireFirewall skips the test when Cut cannot work here, and fails it in
// CI (CI=true). Call it before building a fleet, so a skip costs nothing.
func RequireFirewall(t testing.TB) {
	t.Helper()
	err := FirewallAvailable()
	why := ""
	if err != nil {
		why = err.Error()
	}
	Require(t, err == nil, why)
}

// nft runs an nft script.
func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func tableName(addr string) string {
	return fmt.Sprintf("%s%d_%s", tablePrefix, os.Getpid(), strings.ReplaceAll(addr, ".", "_"))
}

// tableAddr is the agent address a table of ours cuts, "" if none.
func tableAddr(table string) string {
	rest, ok := strings.CutPrefix(table, tablePrefix)
	if !ok {
		return ""
	}
	_, addr, ok := strings.Cut(rest, "_")
	if !ok || !strings.HasPrefix(addr, "127_") {
		return ""
	}
	return strings.ReplaceAll(addr, "_", ".")
}

// Cut isolates the agent (a NewFleet one) from every other agent until
// Heal or the end of the test; its HTTP API and DNS still answer. The
// servers then mark it failed (1.2 to 2.2 seconds with FastGossip) and its
// RPC-backed calls (a consistent read through it) fail; the agent itself
// sees every other agent failed some 10 to 16 seconds after the cut (see
// Cluster.WaitIsolated, and wait for that before a Heal that should not
// disturb the other nodes). It skips or fails the test as RequireFirewall
// does.
func (a *Agent) Cut(t testing.TB) {
	t.Helper()
	RequireFirewall(t)
	if a.gid == 0 || a.Addr == "127.0.0.1" {
		t.Fatalf("consultest: Cut needs an agent of NewFleet (%s binds %s)", a.Name, a.Addr)
	}
	fwMu.Lock()
	defer fwMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut != "" {
		return
	}
	name := tableName(a.Addr)
	// Adding and deleting first replaces a table of the same name that an
	// earlier process with this pid left.
	script := fmt.Sprintf(`add table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain out {
		type filter hook output priority filter; policy accept;
		meta skgid %[3]d ip daddr != 127.0.0.1 meta mark set %[3]d
	}
	chain in {
		type filter hook input priority filter; policy accept;
		ip saddr %[2]s drop
		ip daddr %[2]s drop
		meta mark %[3]d drop
	}
}
`, name, a.Addr, a.gid)
	if err := nft(script); err != nil {
		t.Fatalf("cut %s: %v", a.Name, err)
	}
	a.cut = name
	activeCuts[name] = true
	t.Cleanup(func() { _ = a.heal() })
}

// Heal undoes Cut. Consul notices by itself: the servers see the agent
// alive again at its next push/pull or their next reconnect attempt, up to
// 30 seconds later (18 to 29 seconds measured); Cluster.Rejoin after Heal
// makes it a fraction of a second. RPC through the agent comes back once
// its connections to the servers do: one the cut stalled resumes at its
// next TCP retransmission, which backs off while the cut lasts.
func (a *Agent) Heal(t testing.TB) {
	t.Helper()
	if err := a.heal(); err != nil {
		t.Errorf("heal %s: %v", a.Name, err)
	}
}

// IsCut reports whether the agent is cut off.
func (a *Agent) IsCut() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cut != ""
}

func (a *Agent) heal() error {
	fwMu.Lock()
	defer fwMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut == "" {
		return nil
	}
	err := nft("delete table ip " + a.cut + "\n")
	delete(activeCuts, a.cut)
	a.cut = ""
	return err
}

// sweepStaleTables deletes the cut tables no live test cuts with: this
// process's that are not in place (a process of the same pid left them),
// and other processes' whose address lock is free (the process is gone).
// An address is locked before its agent starts, so an agent is never cut
// by a table its address's last owner left.
func sweepStaleTables(t testing.TB) {
	t.Helper()
	fwMu.Lock()
	defer fwMu.Unlock()
	out, err := exec.Command("nft", "list", "tables", "ip").CombinedOutput()
	if err != nil {
		t.Logf("consultest: nft list tables: %v: %s", err, bytes.TrimSpace(out))
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "table" {
			continue
		}
		name := f[2]
		addr := tableAddr(name)
		if addr == "" || activeCuts[name] {
			continue
		}
		if !ownAddr(addr) {
			lock, ok := tryLockAddr(addr)
			if !ok || lock == nil {
				continue // its process is alive (or there are no locks)
			}
			defer lock.Close()
		}
		if err := nft("delete table ip " + name + "\n"); err != nil {
			t.Logf("consultest: delete stale table: %v", err)
		}
	}
}
