package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/sys/unix"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// childWatch follows every child that stamps into a file, and records when
// each one ends, exactly (through a pidfd), also when it was SIGKILLed and
// wrote no stop stamp.
type childWatch struct {
	path string
	mu   sync.Mutex
	seen map[int]bool
	ends map[int]time.Duration
	stop chan struct{}
	wg   sync.WaitGroup
}

func watchChildren(t *testing.T, path string) *childWatch {
	w := &childWatch{path: path, seen: map[int]bool{}, ends: map[int]time.Duration{}, stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for _, s := range readStamps(path) {
				if s.what != "start" {
					continue
				}
				w.mu.Lock()
				known := w.seen[s.pid]
				w.seen[s.pid] = true
				w.mu.Unlock()
				if !known {
					w.follow(s.pid)
				}
			}
		}
	}()
	t.Cleanup(func() { close(w.stop); w.wg.Wait() })
	return w
}

func (w *childWatch) follow(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		// Already gone: its end is no later than now.
		w.mu.Lock()
		w.ends[pid] = leadertest.Mono()
		w.mu.Unlock()
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer unix.Close(fd)
		for {
			n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 50)
			if n > 0 {
				w.mu.Lock()
				w.ends[pid] = leadertest.Mono()
				w.mu.Unlock()
				return
			}
			select {
			case <-w.stop:
				return
			default:
			}
		}
	}()
}

// intervals are the children's runs: start stamp to stop stamp, or to the
// exit seen through the pidfd when the child wrote none.
func (w *childWatch) intervals(t *testing.T) []leadertest.Interval {
	t.Helper()
	b, _ := os.ReadFile(w.path)
	ivs, err := leadertest.ParseStamps(bytes.NewReader(b), "child")
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range ivs {
		var pid int
		fmt.Sscanf(ivs[i].Who, "child pid %d", &pid)
		if end, ok := w.ends[pid]; ok && (ivs[i].Stop == 0 || end < ivs[i].Stop) {
			ivs[i].Stop = end
		}
	}
	return ivs
}

// running counts children started and not (yet) ended.
func (w *childWatch) running() []int {
	var pids []int
	ended := map[int]bool{}
	for _, s := range readStamps(w.path) {
		if s.what == "stop" {
			ended[s.pid] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for pid := range w.seen {
		if _, gone := w.ends[pid]; !gone && !ended[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// leaderHCL is a standby-mode service whose child stamps its runs and writes
// its environment to <dir>/<node>.env.
func leaderHCL(t *testing.T, key, mode, stamps, dir string) string {
	return writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s -env-file %s/$MARIPOSA_NODE.env"]
  port    = 8080
  leader {
    mode       = %q
    key        = %q
    lock_delay = "1s"
  }
  stop {
    timeout = "2s"
  }
}
`, childBin, stamps, dir, mode, key))
}

// instancesOf lists the instances of a service registered (any health), by
// node.
func instancesOf(c *api.Client, name string) map[string]*api.ServiceEntry {
	return instancesByNode(c, name, false)
}

// passingInstances lists the passing instances of a service, by node.
func passingInstances(c *api.Client, name string) map[string]*api.ServiceEntry {
	return instancesByNode(c, name, true)
}

func instancesByNode(c *api.Client, name string, passingOnly bool) map[string]*api.ServiceEntry {
	out := map[string]*api.ServiceEntry{}
	es, _, _ := c.Health().Service(name, "", passingOnly, nil)
	for _, e := range es {
		out[e.Node.Node] = e
	}
	return out
}

// Standby mode across a real cluster: one leader runs and is registered;
// graceful stop and SIGKILL of the leader's mariposa hand over to the
// standby; children never overlap; the fencing token stops the old leader's
// guarded writes.
func TestLeaderStandbyFailover(t *testing.T) {
	t.Parallel()
	cl := consultest.NewCluster(t, 1, 2)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	stamps := filepath.Join(dir, "stamps")
	key := "mariposa/leader/web-" + strconv.Itoa(os.Getpid())
	hcl := leaderHCL(t, key, "standby", stamps, dir)
	w := watchChildren(t, stamps)

	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(t, a, nil, hcl)
	}
	var leaderNode string
	waitFor(t, 20*time.Second, "one leader registered and running", func() (bool, string) {
		inst := instancesOf(c, "web")
		if len(inst) != 1 {
			return false, fmt.Sprintf("%d instances", len(inst))
		}
		for n, e := range inst {
			leaderNode = n
			sc := checkByID(e, e.Service.ID+":mariposa")
			return sc != nil && sc.Status == api.HealthPassing && strings.Contains(sc.Output, "as leader") &&
				e.Service.Meta["leader"] == "leader" && len(w.running()) == 1, fmt.Sprint(sc)
		}
		return false, ""
	})
	// DNS: the leader tag answers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if addrs, err := cl.Clients[0].Resolver().LookupHost(ctx, "leader.web.service.consul"); err != nil || len(addrs) != 1 {
		t.Fatalf("leader.web.service.consul = %v, %v", addrs, err)
	}

	// The leader's fencing token guards writes while it leads.
	env := readEnv(t, filepath.Join(dir, leaderNode+".env"))
	if env["MARIPOSA_LEADER"] != "1" || env["MARIPOSA_LEADER_KEY"] != key || env["MARIPOSA_LEADER_SESSION"] == "" {
		t.Fatalf("leader env: %v", env)
	}
	fenced := func(env map[string]string) bool {
		idx, _ := strconv.ParseUint(env["MARIPOSA_LEADER_INDEX"], 10, 64)
		ok, _, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: env["MARIPOSA_LEADER_KEY"], Session: env["MARIPOSA_LEADER_SESSION"]}},
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: env["MARIPOSA_LEADER_KEY"], Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "app/owner", Value: []byte(env["MARIPOSA_NODE"])}},
		}, nil)
		return err == nil && ok
	}
	if !fenced(env) {
		t.Fatal("the leader's guarded write failed")
	}

	other := func(n string) string {
		for name := range ms {
			if name != n {
				return name
			}
		}
		return ""
	}
	takeOver := func(from string, how string) string {
		to := other(from)
		waitFor(t, 30*time.Second, how+": "+to+" takes over", func() (bool, string) {
			// Only the leader is passing: a SIGKILLed supervisor's
			// registration may linger, critical through its alias check.
			inst := passingInstances(c, "web")
			e, ok := inst[to]
			if !ok || len(inst) != 1 {
				return false, fmt.Sprintf("%d passing instances", len(inst))
			}
			sc := checkByID(e, e.Service.ID+":mariposa")
			return sc != nil && sc.Status == api.HealthPassing && len(w.running()) == 1, fmt.Sprint(sc)
		})
		return to
	}

	// Graceful: SIGTERM to the leader's mariposa.
	t0 := time.Now()
	if code := ms[leaderNode].stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	oldEnv := env
	newLeader := takeOver(leaderNode, "graceful stop")
	t.Logf("graceful failover visible in the catalog %s after SIGTERM", time.Since(t0).Round(time.Millisecond))
	if fenced(oldEnv) {
		t.Error("the old leader's guarded write succeeded after the handover")
	}
	if !fenced(readEnv(t, filepath.Join(dir, newLeader+".env"))) {
		t.Error("the new leader's guarded write failed")
	}

	// The stopped node comes back as a standby; then SIGKILL the leader's
	// mariposa: its child dies with it, the standby takes over once Consul
	// invalidates the session (liveness TTL) and lock_delay has passed.
	ms[leaderNode] = startMariposa(t, clientNamed(cl, leaderNode), nil, hcl)
	waitFor(t, 10*time.Second, "the new standby contending", func() (bool, string) {
		// Contending means holding a session on its node.
		ss, _, err := clientNamed(cl, leaderNode).Client(t).Session().Node(leaderNode, nil)
		return err == nil && len(ss) > 0, fmt.Sprint(len(ss), err)
	})
	t0 = time.Now()
	_ = ms[newLeader].cmd.Process.Signal(syscall.SIGKILL)
	takeOver(newLeader, "SIGKILL")
	t.Logf("crash failover visible in the catalog %s after SIGKILL", time.Since(t0).Round(time.Millisecond))

	if err := leadertest.CheckNoOverlap(w.intervals(t)); err != nil {
		t.Fatal(err)
	}
}

func clientNamed(cl *consultest.Cluster, name string) *consultest.Agent {
	for _, a := range cl.Clients {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Tag mode: every instance runs; the leader carries the leader tag and
// MARIPOSA_LEADER=1; when it goes, the follower becomes leader and (with
// change_mode = "restart") restarts as one.
func TestLeaderTagMode(t *testing.T) {
	t.Parallel()
	cl := consultest.NewCluster(t, 1, 2)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	stamps := filepath.Join(dir, "stamps")
	key := "mariposa/leader/tagged-" + strconv.Itoa(os.Getpid())
	hcl := leaderHCL(t, key, "tag", stamps, dir)
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(t, a, nil, hcl)
	}
	var leaderNode, followerNode string
	waitFor(t, 20*time.Second, "a leader and a follower", func() (bool, string) {
		inst := instancesOf(c, "web")
		leaderNode, followerNode = "", ""
		for n, e := range inst {
			switch {
			case strings.Contains(strings.Join(e.Service.Tags, ","), "leader") && e.Service.Meta["leader"] == "leader":
				leaderNode = n
			case strings.Contains(strings.Join(e.Service.Tags, ","), "follower") && e.Service.Meta["leader"] == "follower":
				followerNode = n
			}
		}
		return len(inst) == 2 && leaderNode != "" && followerNode != "", fmt.Sprint(len(inst))
	})
	waitFor(t, 10*time.Second, "envs", func() (bool, string) {
		l := readEnv(t, filepath.Join(dir, leaderNode+".env"))
		f := readEnv(t, filepath.Join(dir, followerNode+".env"))
		return l["MARIPOSA_LEADER"] == "1" && f["MARIPOSA_LEADER"] == "0", l["MARIPOSA_LEADER"] + f["MARIPOSA_LEADER"]
	})
	// DNS answers with passing instances only: the tag is in the catalog
	// before the follower's checks pass (CI: a one-shot lookup found none).
	waitFor(t, 10*time.Second, "follower.web.service.consul answers one address", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := cl.Clients[0].Resolver().LookupHost(ctx, "follower.web.service.consul")
		return err == nil && len(addrs) == 1, fmt.Sprint(addrs, err)
	})

	os.Remove(filepath.Join(dir, followerNode+".env"))
	ms[leaderNode].stop(t, syscall.SIGTERM, 20*time.Second)
	waitFor(t, 20*time.Second, "the follower leads", func() (bool, string) {
		inst := instancesOf(c, "web")
		e, ok := inst[followerNode]
		return ok && len(inst) == 1 && e.Service.Meta["leader"] == "leader" &&
			strings.Contains(strings.Join(e.Service.Tags, ","), "leader"), fmt.Sprint(len(inst))
	})
	if env := readEnv(t, filepath.Join(dir, followerNode+".env")); env["MARIPOSA_LEADER"] != "1" {
		t.Errorf("the new leader's child was not restarted as leader: %v", env["MARIPOSA_LEADER"])
	}
}
