package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// upgradeVersion is the version string of the rebuilt binary.
const upgradeVersion = "9.9.9"

var (
	upgradeBinOnce sync.Once
	upgradeBin     string
	upgradeBinErr  error
)

// rebuiltMariposa is mariposa built again with another version string (as
// a release stamps its own: -ldflags -X).
func rebuiltMariposa(t testing.TB) string {
	t.Helper()
	upgradeBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mariposa-upgrade-")
		if err != nil {
			upgradeBinErr = err
			return
		}
		upgradeBin = filepath.Join(dir, "mariposa")
		args := []string{"build", "-ldflags", "-X github.com/mariposa-sh/mariposa/version.Version=" + upgradeVersion, "-o", upgradeBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "..")...)
		if !raceEnabled {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			upgradeBinErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if upgradeBinErr != nil {
		t.Fatal(upgradeBinErr)
	}
	return upgradeBin
}

// install puts src at dst the way a package manager does: a new file
// renamed over the old one (the running binary keeps its inode).
func install(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	installBytes(t, b, dst)
}

func installBytes(t testing.TB, b []byte, dst string) {
	t.Helper()
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// versionAnswer is the node API's GET /v1/version.
type versionAnswer struct {
	Version  string `json:"version"`
	PID      int    `json:"pid"`
	Upgraded *struct {
		From         string  `json:"from"`
		CheckGapSecs float64 `json:"check_gap_seconds"`
	} `json:"upgraded"`
}

func nodeVersionAnswer(addr string) (versionAnswer, error) {
	var v versionAnswer
	resp, err := http.Get("http://" + addr + "/v1/version")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return v, nil
}

// nodeVersion is the version and PID the node API's GET /v1/version names.
func nodeVersion(addr string) (string, int, error) {
	v, err := nodeVersionAnswer(addr)
	return v.Version, v.PID, err
}

// upgradeNode is a node with a node-local service (with an agent-run HTTP
// check), a chatty one (its output numbered) and a leader (standby mode),
// and one in tag mode (which restarts on a change of role), run by a copy
// of mariposa at a path of its own.
type upgradeNode struct {
	agent    *consultest.Agent
	c        *api.Client
	m        *mariposa
	bin      string // the path mariposa runs from
	apiAddr  string
	services []string
	keys     []string // the leader keys
	// fenced: the fleet's slot key (with fleet): its ModifyIndex is the
	// instance's fencing token, which an upgrade must not move.
	fenced string
}

func startUpgradeNode(t testing.TB) *upgradeNode { return startUpgradeNodeOpt(t, false) }

// startUpgradeNodeOpt: with fleet, the node runs with -cluster and one more
// service, an exclusive count slot (a fleet of one).
func startUpgradeNodeOpt(t testing.TB, fleet bool) *upgradeNode {
	agent := consultest.NewDev(t)
	n := &upgradeNode{agent: agent, c: agent.Client(t), keys: []string{"upgrade/sched", "upgrade/primary"},
		services: []string{"web", "ticker", "sched", "primary"}}
	extra, flags := "", []string{"-http-addr"}
	if fleet {
		extra = fmt.Sprintf(`
service "slot" {
  command   = [%q]
  count     = 1
  exclusive = true
}
`, childBin)
		n.services = append(n.services, "slot")
		n.keys = append(n.keys, cluster.SlotKey("slot", 0))
		n.fenced = cluster.SlotKey("slot", 0)
		flags = append([]string{"-cluster"}, flags...)
	}
	n.bin = filepath.Join(t.TempDir(), "mariposa")
	install(t, mariposaBin, n.bin)
	webPort := freePort(t)
	n.apiAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q, "-http", "127.0.0.1:%d"]
  port    = %d
  check "http" {
    http     = "http://127.0.0.1:%d/"
    interval = "200ms"
    timeout  = "1s"
  }
}

service "ticker" {
  command = ["/bin/sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.02; done"]
}

service "sched" {
  command = [%q]
  leader {
    mode       = "standby"
    key        = %q
    lock_delay = "5s"
  }
}

service "primary" {
  command = [%q]
  leader {
    mode       = "tag"
    key        = %q
    lock_delay = "5s"
  }
}
`, childBin, webPort, webPort, webPort, childBin, n.keys[0], childBin, n.keys[1])+extra)
	n.m = startMariposaBin(t, n.bin, agent, nil, append(flags, n.apiAddr, hcl)...)
	return n
}

// pids waits until every service runs with its checks passing and returns
// each one's PID.
func (n *upgradeNode) pids(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	waitFor(t, 30*time.Second, "every service running and passing", func() (bool, string) {
		for _, s := range n.services {
			es := serviceEntries(n.c, s)
			if len(es) != 1 {
				return false, fmt.Sprintf("%s: %d entries", s, len(es))
			}
			for _, hc := range es[0].Checks {
				if hc.Status != api.HealthPassing {
					return false, fmt.Sprintf("%s: check %s %s", s, hc.CheckID, hc.Status)
				}
				if strings.HasSuffix(hc.CheckID, ":mariposa") {
					out[s] = supervisorPID(hc.Output)
				}
			}
			if out[s] == 0 {
				return false, s + ": no pid yet"
			}
		}
		return true, ""
	})
	return out
}

// upSample watches what an upgrade must not change, every 20 ms: every
// service listed once with every check passing (mariposa's own liveness
// too), every child alive, the leader key held by the same session at the
// same lock index (for every leader key).
type upSample struct {
	mu         sync.Mutex
	violations []string
	rounds     int
	stop, done chan struct{}
}

func (n *upgradeNode) sample(t *testing.T, pids map[string]int) *upSample {
	locks := map[string]*api.KVPair{}
	for _, k := range n.keys {
		lock, _, err := n.c.KV().Get(k, nil)
		if err != nil || lock == nil || lock.Session == "" {
			t.Fatalf("leader key %s: %+v %v", k, lock, err)
		}
		locks[k] = lock
	}
	s := &upSample{stop: make(chan struct{}), done: make(chan struct{})}
	bad := func(f string, a ...any) {
		s.mu.Lock()
		if len(s.violations) < 20 {
			s.violations = append(s.violations, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(f, a...))
		}
		s.mu.Unlock()
	}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, name := range append([]string{"mariposa"}, n.services...) {
				es, _, err := n.c.Health().Service(name, "", false, nil)
				if err != nil {
					bad("%s: %v", name, err)
					continue
				}
				if len(es) != 1 {
					bad("%s: %d instances listed", name, len(es))
				}
				for _, e := range es {
					for _, hc := range e.Checks {
						if hc.Status != api.HealthPassing {
							bad("%s: check %s %s (%s)", name, hc.CheckID, hc.Status, hc.Output)
						}
					}
				}
			}
			for name, pid := range pids {
				if !alive(pid) {
					bad("%s: pid %d gone", name, pid)
				}
			}
			for k, lock := range locks {
				kv, _, err := n.c.KV().Get(k, nil)
				switch {
				case err != nil:
					bad("leader key %s: %v", k, err)
				case kv == nil || kv.Session != lock.Session || kv.LockIndex != lock.LockIndex:
					bad("leader key %s changed hands: %+v, was session %s lock index %d", k, kv, lock.Session, lock.LockIndex)
				case k == n.fenced && kv.ModifyIndex != lock.ModifyIndex:
					bad("slot key %s written: modify index %d, was %d (the instance's fencing token)", k, kv.ModifyIndex, lock.ModifyIndex)
				}
			}
			s.mu.Lock()
			s.rounds++
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.end() })
	return s
}

func (s *upSample) end() []string {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.violations
}

func (s *upSample) count() int { s.mu.Lock(); defer s.mu.Unlock(); return s.rounds }

var tickLine = regexp.MustCompile(`tick (\d+)`)

// ticks are the numbers of the ticker's lines in mariposa's log.
func ticks(out string) []int {
	var ns []int
	for _, m := range tickLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}

// TestUpgradeInPlace: mariposa upgraded in place to a rebuilt binary (another
// version) while a sampler watches: every child keeps its PID, the catalog
// never lists fewer instances nor any check that is not passing, the
// leader key never changes hands, the children's output goes on being
// logged without a line lost, and the node API answers from the new build,
// same PID.
func TestUpgradeInPlace(t *testing.T) { testUpgradeInPlace(t, false) }

// TestUpgradeInPlaceFleetNode: the same on a fleet node (run -cluster)
// that also holds an exclusive count slot: the slot's key keeps its
// session, lock index and modify index (the fleet takes it again without
// a write: the instance's fencing token stays valid), its instance its
// PID, watched past the session's TTL (two TTLs and the lock delay): a
// new image that did not adopt the session would lose the slot in that
// window. Mutation-checked on the step machine: with the
// executor's adopted session left unrenewed (startAdopted without
// startSession), the slot key is deleted with the session and this fails;
// it passed with the sampling window of about 2 s.
func TestUpgradeInPlaceFleetNode(t *testing.T) { testUpgradeInPlace(t, true) }

func testUpgradeInPlace(t *testing.T, fleet bool) {
	n := startUpgradeNodeOpt(t, fleet)
	before := n.pids(t)
	oldVersion, mpid, err := nodeVersion(n.apiAddr)
	if err != nil || strings.Contains(oldVersion, upgradeVersion) {
		t.Fatalf("node API before: %q %v", oldVersion, err)
	}
	s := n.sample(t, before)
	waitFor(t, 10*time.Second, "a few samples", func() (bool, string) { return s.count() >= 5, "" })
	ticksBefore := len(ticks(n.m.out.String()))

	install(t, rebuiltMariposa(t), n.bin)
	began := time.Now()
	out, code := n.m.cli(t, "upgrade")
	if code != 0 {
		t.Fatalf("mariposa upgrade: exit %d\n%s", code, out)
	}
	t.Logf("%s (command: %s)", strings.TrimSpace(out), time.Since(began).Round(time.Millisecond))
	v, pid, err := nodeVersion(n.apiAddr)
	if err != nil || !strings.Contains(v, upgradeVersion) || pid != mpid {
		t.Fatalf("node API after: %q pid %d (was %d): %v", v, pid, mpid, err)
	}
	// Watch a while after the handover: adoption, re-registration and
	// the elector's first round are done by then.
	from := s.count()
	waitFor(t, 20*time.Second, "samples after the upgrade", func() (bool, string) { return s.count() >= from+100, "" })
	if fleet {
		// On, past the session's TTL: Consul invalidates a session not
		// renewed between one and two TTLs after its last renewal, and
		// the slot key goes with it. Only a new image that took the
		// previous one's session and holds over (adoption) keeps the
		// slot's key, session and fencing token unchanged so long; one
		// that did not (a session of its own, or the handed-over session
		// left unrenewed) is seen here.
		past := began.Add(2*lease.DefaultTTL + lease.DefaultLockDelay + 2*time.Second)
		waitFor(t, time.Until(past)+30*time.Second, "samples past the session's TTL", func() (bool, string) {
			return time.Now().After(past) && s.count() >= from+200, fmt.Sprint(s.count()-from, " samples")
		})
	}
	if vs := s.end(); len(vs) > 0 {
		t.Fatalf("the upgrade was seen:\n%s", strings.Join(vs, "\n"))
	}
	after := n.pids(t)
	for name, p := range before {
		if after[name] != p {
			t.Errorf("%s: pid %d before, %d after", name, p, after[name])
		}
	}
	// The ticker's lines: more after the upgrade, and none missing.
	waitFor(t, 10*time.Second, "ticks after the upgrade", func() (bool, string) {
		return len(ticks(n.m.out.String())) > ticksBefore+20, ""
	})
	ns := ticks(n.m.out.String())
	for i := 1; i < len(ns); i++ {
		if ns[i] != ns[i-1]+1 {
			t.Fatalf("the ticker's lines jump from %d to %d", ns[i-1], ns[i])
		}
	}
	if n.m.exited() {
		t.Fatal("mariposa exited")
	}
	// The node's audit file: since the upgrade, one "adopted" record per
	// service and nothing else (no start, exit, stop, leader change).
	adopted := map[string]bool{}
	for _, e := range auditSince(t, filepath.Join(filepath.Dir(n.m.sock), "audit.jsonl"), began) {
		if e.Kind != "adopted" || adopted[e.Service] {
			t.Errorf("audit record after the upgrade: %+v", e)
		}
		adopted[e.Service] = true
	}
	if len(adopted) != len(n.services) {
		t.Errorf("adopted records for %v, want %v", adopted, n.services)
	}
}

type auditRecord struct {
	Time    time.Time `json:"time"`
	Service string    `json:"service"`
	Kind    string    `json:"kind"`
	PID     int       `json:"pid"`
	Reason  string    `json:"reason"`
}

// auditSince reads the records of the node's audit file from since on.
func auditSince(t *testing.T, path string, since time.Time) []auditRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil // nothing recorded yet
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []auditRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e auditRecord
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// TestUpgradeBrokenBinary: a binary that cannot run here (garbage) or
// refuses (exits 1) is refused before the exec, and one whose exec fails
// after the handover is given up: the command fails saying why, the node
// goes on supervised by the old build (same version, its loops answer an
// operator's restart), and nothing was restarted.
func TestUpgradeBrokenBinary(t *testing.T) {
	n := startUpgradeNode(t)
	before := n.pids(t)
	oldVersion, mpid, err := nodeVersion(n.apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	s := n.sample(t, before)
	for _, bc := range []struct {
		name, want string
		body       []byte
	}{
		{"garbage", "cannot run here", []byte("\x7fELF\x02\x01\x01 this is not a program")},
		{"exits 1", "refused", []byte("#!/bin/sh\necho 'no thanks' >&2\nexit 1\n")},
		{"not mariposa", "not a mariposa", []byte("#!/bin/sh\necho hello\n")},
		// Passes the preflight, then cannot be executed: the exec itself
		// fails after the node was frozen and handed over, and the old
		// build thaws and goes on.
		{"exec fails", "failed, mariposa", []byte("#!/bin/sh\necho '{\"version\":\"mariposa v9.9.9-fake\",\"state_versions\":[1]}'\nchmod -x \"$0\"\n")},
	} {
		installBytes(t, bc.body, n.bin)
		out, code := n.m.cli(t, "upgrade")
		if code != 1 || !strings.Contains(out, bc.want) {
			t.Errorf("%s: exit %d, want 1 with %q:\n%s", bc.name, code, bc.want, out)
		}
		t.Logf("%s: %s", bc.name, strings.TrimSpace(out))
		v, pid, err := nodeVersion(n.apiAddr)
		if err != nil || v != oldVersion || pid != mpid {
			t.Fatalf("%s: node API answers %q pid %d (%v), want %q pid %d", bc.name, v, pid, err, oldVersion, mpid)
		}
	}
	if vs := s.end(); len(vs) > 0 {
		t.Fatalf("the failed upgrades were seen:\n%s", strings.Join(vs, "\n"))
	}
	after := n.pids(t)
	for name, p := range before {
		if after[name] != p {
			t.Errorf("%s: pid %d before, %d after", name, p, after[name])
		}
	}
	// Still supervised: the loops were thawed and act.
	if out, code := n.m.cli(t, "restart", "web"); code != 0 {
		t.Fatalf("restart after the failed upgrades: exit %d\n%s", code, out)
	}
	waitRunning(t, n.c, "web", n.agent.Name, before["web"])
	// And a good binary still upgrades it.
	install(t, rebuiltMariposa(t), n.bin)
	if out, code := n.m.cli(t, "upgrade"); code != 0 {
		t.Fatalf("upgrade after the failures: exit %d\n%s", code, out)
	}
}

// TestUpgradeInPlaceAsPID1: as a container's init (PID 1, reaping every
// orphan), mariposa upgrades in place the same way: its child keeps its
// PID and is still reaped as its own (a kill afterwards is restarted and
// named), and orphans left after the upgrade are reaped too.
func TestUpgradeInPlaceAsPID1(t *testing.T) {
	_, err := exec.LookPath("unshare")
	consultest.Require(t, err == nil, "unshare not installed (util-linux)")
	consultest.Require(t, os.Geteuid() == 0, "PID namespaces need root here")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	bin := filepath.Join(t.TempDir(), "mariposa")
	install(t, mariposaBin, bin)
	hcl := writeHCL(t, `
service "init" {
  command = ["/bin/sh", "-c", "trap 'for i in 1 2 3; do (sleep 0.$i &); done' USR1; while :; do sleep 0.05; done"]
  restart {
    delay = "0s"
  }
}
`)
	sock := controlSocket(t)
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", bin, "run",
		"-consul-addr", agent.HTTPAddr(), "-log-level", "debug", "-control-socket", sock, hcl)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var mpid int
	t.Cleanup(func() {
		if mpid > 0 {
			syscall.Kill(mpid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("mariposa output:\n%s", out.String())
		}
	})
	waitFor(t, 10*time.Second, "mariposa in its namespace", func() (bool, string) {
		if kids := children(cmd.Process.Pid); len(kids) == 1 {
			mpid = kids[0]
		}
		return mpid > 0, ""
	})
	waitRunning(t, c, "init", agent.Name)
	var child int
	waitFor(t, 10*time.Second, "one child", func() (bool, string) {
		k := children(mpid)
		if len(k) == 1 {
			child = k[0]
		}
		return len(k) == 1, fmt.Sprint(k)
	})

	install(t, rebuiltMariposa(t), bin)
	up := exec.Command(mariposaBin, "upgrade", "-control-socket", sock)
	if b, err := up.CombinedOutput(); err != nil {
		t.Fatalf("mariposa upgrade: %v\n%s", err, b)
	}
	if k := children(mpid); len(k) != 1 || k[0] != child {
		t.Fatalf("children after the upgrade: %v, want [%d]", k, child)
	}
	// Orphans left now are reaped by the new build.
	_ = syscall.Kill(child, syscall.SIGUSR1)
	waitFor(t, 10*time.Second, "orphans reaped after the upgrade", func() (bool, string) {
		z := zombieChildren(mpid)
		return len(z) == 0 && len(children(mpid)) == 1, fmt.Sprintf("zombies %v, children %v", z, children(mpid))
	})
	// The adopted child's exit status is still mariposa's to read.
	_ = syscall.Kill(child, syscall.SIGKILL)
	waitSupervisor(t, c, "init", agent.Name, "passing", "restarted 1 time, last after killed by SIGKILL")
}
