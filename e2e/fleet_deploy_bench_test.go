package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// BenchmarkFleetDeploy: a rolling deploy on a real fleet (3 servers and 10
// clients, or MARIPOSA_BENCH_NODES, each with its own mariposa -cluster;
// Consul's gossip timing): the service "web", count 30, max_per_node
// ceil(30/nodes)+1, an args check every second, update { max_parallel = 5,
// min_healthy_time = "2s" }. Spec 1 is deployed with -wait first (not
// measured); then each round (MARIPOSA_BENCH_ROUNDS, default 2) deploys a
// new version with -wait.
//
// Printed, per round and over the rounds:
//
//   - time to successful: from just before `mariposa deploy -wait` is
//     started to the unit's record moved to "successful" (the time of
//     the deploy-successful audit record written with it by the judging
//     node; one host, one clock), beside its anchor from the
//     update block: ceil(30/5) batches x min_healthy_time = 12 s, the least
//     the policy itself allows, and the ratio; and beside what perfect
//     hand-offs would give with this run's instances (ceil(30/5) x the
//     median replacement -> healthy);
//   - Consul Raft log entries per instance updated: the leader's Raft
//     index from just before the deploy to the last rollout token given
//     back (no contender key left), divided by 30. Every write in the
//     fleet counts: the deploy and its state transitions, the slots, the
//     rollout semaphore, the audit records, the agents' catalog syncs,
//     coordinate batches; the idle fleet's rate is printed beside it.
//     Broken down by command type (the leader's FSM counters, through its
//     Prometheus metrics) and by the mariposas' own write requests: each
//     mariposa talks to its agent through a proxy of this test that
//     classifies them (KV and txn writes by key prefix, a failed CAS or
//     txn marked: each is a Raft entry; agent writes are local and reach
//     Raft through anti-entropy), beside the least a rollout writes by
//     design per instance: the holder's status saying the update and
//     then healthy (2 txns, each with its audit record), the token taken
//     and given back (2 txns: a token is a key of its own, locked by the
//     holder's session, CLUSTER.md section 12); and the failed CASes and
//     txns per instance (each a Raft entry that changed nothing), those
//     on the rollout tokens apart (an api.Semaphore's herd made ~3.7
//     per instance, BENCHMARKS.md: a release woke every waiter; the step
//     machine's holders take turns, fleet/agent/tokens.go);
//   - where the time goes, from the unit's audit records (each slot's
//     update and healthy; the mariposas' logs are kept per round in
//     MARIPOSA_BENCH_LOGS=DIR when set): the first replacement
//     after the deploy, replacement -> healthy per instance, the token
//     hand-offs (a healthy line to the next replacement), the last
//     healthy -> successful, and the token-seconds unused while instances
//     still waited, split by whether every node with one left was busy
//     with another of its slots (a node updates its slots one at a time)
//     or not (hand-off); slots claimed or lost during a round say it was
//     not a clean rollout;
//   - from a blocking query on the catalog: the most instances and the
//     fewest passing seen (the goal: never more than 30, never fewer than
//     25), and when all 30 were passing at the new version, from
//     successful (the deployment is judged from the slots, not the
//     catalog).
func BenchmarkFleetDeploy(b *testing.B) {
	const (
		count          = 30
		maxParallel    = 5
		minHealthyTime = 2 * time.Second
	)
	nodes := benchFleetNodes(b)
	rounds := benchRounds(2)
	rounds = max(rounds, b.N)
	bound := time.Duration((count+maxParallel-1)/maxParallel) * minHealthyTime
	perNode := (count+nodes-1)/nodes + 1

	// Consul's own gossip timing: the harness's faster one, on two busy
	// cores, can find a slow node failed, and its session and slots go
	// with it in the middle of a round (seen: 4 slots moved, 34 instances).
	cl := consultest.NewFleet(b, consultest.FleetOptions{Servers: 3, Clients: nodes, ConsulGossip: true, ExtraConfig: map[string]any{
		// The FSM's counters per command type, read from the leader.
		"telemetry": map[string]any{"prometheus_retention_time": "1h", "disable_hostname": true},
	}})
	srv := cl.Servers[0]
	c := srv.Client(b)
	proxies := map[string]*writeProxy{}
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		p := newWriteProxy(b, a.HTTPAddr())
		proxies[a.Name] = p
		ms[a.Name] = startMariposa(b, &consultest.Agent{Ports: consultest.Ports{HTTP: portOf(p.addr)}}, nil,
			"-cluster", "-log-level", "info", "-log-json")
	}
	waitFor(b, 90*time.Second, "every supervisor live", func() (bool, string) {
		n := len(passingInstances(c, "mariposa"))
		return n == nodes, fmt.Sprint(n)
	})
	spec := func(v int) string {
		return writeHCL(b, fmt.Sprintf(`
service "web" {
  command = [%q]
  env     = { STAMP_SLEEP_MS = "-1", V = "v%d" }
  version = "v%d"
  count   = %d
  max_per_node = %d
  check "ready" {
    args     = ["true"]
    interval = "1s"
  }
  update {
    max_parallel     = %d
    min_healthy_time = "%s"
    healthy_deadline = "1m"
  }
}
`, stampBin, v, v, count, perNode, maxParallel, minHealthyTime))
	}
	deployWait := func(file string) (int, string) {
		b.Helper()
		cmd := exec.Command(mariposaBin, "deploy", "-consul-addr", srv.HTTPAddr(), "-name", "web", "-wait", file)
		timer := time.AfterFunc(5*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		b.Fatalf("deploy -wait: %v\n%s", err, out)
		return 0, ""
	}
	passingAt := func(version string) int {
		es, _, err := c.Health().Service("web", "", true, nil)
		if err != nil {
			return -1
		}
		n := 0
		for _, e := range es {
			if e.Service.Meta["version"] == version {
				n++
			}
		}
		return n
	}
	// settled: every rollout token given back (units/web/tokens/).
	settled := func() (bool, string) {
		var left []string
		pairs, _, err := c.KV().List(cluster.UnitDeployPrefix("web")+"tokens/", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pairs {
			if p.Session != "" {
				left = append(left, p.Key)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	}

	if code, out := deployWait(spec(1)); code != 0 {
		b.Fatalf("deploy -wait v1: exit %d\n%s", code, out)
	}
	waitFor(b, 60*time.Second, "30 instances passing at v1, every token given back", func() (bool, string) {
		if n := passingAt("v1"); n != count {
			return false, fmt.Sprintf("%d passing", n)
		}
		return settled()
	})

	// The placement the rounds update: slots per node.
	perNodeHeld := map[string]int{}
	for _, n := range slotHoldersOf(c, "web") {
		perNodeHeld[n]++
	}
	var spread []int
	for _, n := range perNodeHeld {
		spread = append(spread, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(spread)))
	placement := fmt.Sprintf("slots per node %v (max_per_node %d)", spread, perNode)
	if len(spread) > 0 && spread[0] > perNode {
		placement += ": MORE THAN max_per_node ON ONE NODE"
	}

	// The fleet's idle Raft rate, for what the rollout's window holds
	// besides the rollout (coordinate batches, mostly).
	time.Sleep(5 * time.Second)
	idle0, idleT := raftIndex(b, cl), time.Now()
	time.Sleep(15 * time.Second)
	idleRate := float64(raftIndex(b, cl)-idle0) / time.Since(idleT).Seconds()

	type result struct {
		toSuccess, wall, stateOwn time.Duration
		entries, toSuccessEntries int
		metrics                   map[string]float64
		writes                    map[string]int
		reads                     int
		catalog                   catalogSample
		successAt                 time.Time
		tl                        deployTimeline
		window                    time.Duration
	}
	var res []result
	catalogAll := func(x result) string {
		if x.catalog.allAt.IsZero() {
			return fmt.Sprintf("NOT all %d passing at the new version within 15s of the last token back", count)
		}
		return fmt.Sprintf("all %d passing at the new version %+.2fs from successful", count, x.catalog.allAt.Sub(x.successAt).Seconds())
	}
	for r := 0; r < rounds; r++ {
		v := r + 2
		file := spec(v)
		stopSampling, allPassing := sampleCatalog(c, "web", fmt.Sprintf("v%d", v), count)
		met0 := leaderMetrics(b, cl)
		w0, r0 := proxyTotals(proxies)
		logs0 := map[string]int{}
		for n, m := range ms {
			logs0[n] = len(m.out.String())
		}
		idx0 := raftIndex(b, cl)
		t0 := time.Now()
		code, out := deployWait(file)
		wall := time.Since(t0)
		if code != 0 || !strings.Contains(out, "successful") {
			b.Fatalf("round %d: deploy -wait v%d: exit %d\n%s\nslots not healthy at the deployment's version:\n%s", r, v, code, out, unhealthySlots(c, "web"))
		}
		waitFor(b, 30*time.Second, "every rollout token given back", settled)
		window := time.Since(t0)
		idx1 := raftIndex(b, cl)
		met1 := leaderMetrics(b, cl)
		w1, r1 := proxyTotals(proxies)
		// The catalog agrees (not waited for by the deployment, which
		// is judged from the slots): every instance passing at v.
		consultest.WaitFor(15*time.Second, allPassing)
		catalog := stopSampling()

		d, err := cluster.ReadDeployment(c, "web")
		if err != nil {
			b.Fatal(err)
		}
		// The deployment as deploy -wait reads it: the unit's record,
		// moved by its judge (slot 0's holder) in one transaction with
		// its audit record, whose time says when.
		recKV, _, err := c.KV().Get(cluster.RecordKey("web"), &api.QueryOptions{RequireConsistent: true})
		if err != nil || recKV == nil {
			b.Fatalf("round %d: the unit's record: %v", r, err)
		}
		var rec cluster.UnitRecord
		if err := json.Unmarshal(recKV.Value, &rec); err != nil || rec.Status != cluster.DeploySuccessful || rec.Spec != cluster.SpecVersion("web", d.Spec.N) {
			b.Fatalf("round %d: the unit's record: %+v %v", r, rec, err)
		}
		audit := fleetAuditSince(b, c, "web", t0)
		var st cluster.DeployState
		st.Started = rec.Started
		for _, e := range audit {
			if e.Action == "deploy-successful" {
				st.At = e.At
			}
		}
		if st.At.IsZero() {
			b.Fatalf("round %d: no deploy-successful record in the audit log", r)
		}
		stKV := recKV
		hash := rec.Version
		logs := map[string]string{}
		for name, m := range ms {
			logs[name] = m.out.String()[logs0[name]:]
			// MARIPOSA_BENCH_LOGS=DIR keeps each node's log of each round.
			if dir := os.Getenv("MARIPOSA_BENCH_LOGS"); dir != "" {
				_ = os.MkdirAll(dir, 0o755)
				_ = os.WriteFile(fmt.Sprintf("%s/round%d-%s.log", dir, r+1, name), []byte(logs[name]), 0o644)
			}
		}
		if dir := os.Getenv("MARIPOSA_BENCH_LOGS"); dir != "" {
			_ = os.WriteFile(fmt.Sprintf("%s/round%d-times.txt", dir, r+1),
				[]byte(fmt.Sprintf("t0 %s\nstarted %s\nsuccessful %s\nhash %s\n", t0.Format(time.RFC3339Nano),
					st.Started.Format(time.RFC3339Nano), st.At.Format(time.RFC3339Nano), hash)), 0o644)
		}
		res = append(res, result{
			toSuccess: st.At.Sub(t0), wall: wall, stateOwn: st.At.Sub(st.Started),
			entries: int(idx1 - idx0), toSuccessEntries: int(stKV.ModifyIndex - idx0),
			metrics: diffMetrics(met1, met0), writes: diffCounts(w1, w0), reads: r1 - r0,
			catalog: catalog, successAt: st.At,
			tl:     rolloutTimeline(audit, hash, t0, st.At, maxParallel),
			window: window,
		})
		// Let the last syncs pass before the next round's window opens.
		time.Sleep(3 * time.Second)
	}

	// Per round, then the medians.
	for i, x := range res {
		fmt.Printf("round %d: successful %.2fs after the deploy started (state: %.2fs from its start; deploy -wait exited after %.2fs); %.1f Raft entries per instance to settled in %.1fs (%.1f to successful); Consul's leader: KV apply %.0f ms, txn apply %.0f ms, Raft commit %.0f ms (means); catalog: max instances %d, min passing %d, %s; %s\n",
			i+1, x.toSuccess.Seconds(), x.stateOwn.Seconds(), x.wall.Seconds(), float64(x.entries)/count, x.window.Seconds(),
			float64(x.toSuccessEntries)/count, timerMeanMS(x.metrics, "kvs_apply"), timerMeanMS(x.metrics, "txn_apply"), timerMeanMS(x.metrics, "raft_commitTime"),
			x.catalog.maxTotal, x.catalog.minPassing, catalogAll(x), x.tl)
		if x.tl.claimed+x.tl.lost > 0 {
			fmt.Printf("round %d: NOT A CLEAN ROLLOUT: %d slots claimed and %d lost during it (a node's session ended?)\n", i+1, x.tl.claimed, x.tl.lost)
		}
	}
	med := func(f func(result) float64) float64 {
		v := make([]float64, len(res))
		for i, x := range res {
			v[i] = f(x)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	toSucc := med(func(x result) float64 { return x.toSuccess.Seconds() })
	// What the policy allows with this fleet's instances and perfect
	// hand-offs: the batches, each as long as a replacement to healthy.
	floor := float64((count+maxParallel-1)/maxParallel) * med(func(x result) float64 { return x.tl.replaceToHealthy50.Seconds() })
	perInst := med(func(x result) float64 { return float64(x.entries) / count })
	idlePerInst := med(func(x result) float64 { return idleRate * x.window.Seconds() / count })
	worstTotal, worstPassing := 0, count
	for _, x := range res {
		worstTotal, worstPassing = max(worstTotal, x.catalog.maxTotal), min(worstPassing, x.catalog.minPassing)
	}
	// The breakdowns, summed over the rounds, per instance.
	fsm, writes := map[string]float64{}, map[string]int{}
	reads, updated := 0, 0
	for _, x := range res {
		for k, v := range fsmCounts(x.metrics) {
			fsm[k] += v
		}
		for k, v := range x.writes {
			writes[k] += v
		}
		reads += x.reads
		updated += count
	}
	fmt.Printf("fleet of %d real nodes, rolling deploy of %d instances (max_parallel %d, min_healthy_time %s, args check every 1s), %d rounds: time to successful p50 %.2fs beside the update policy's bound of %s (ceil(%d/%d) x %s): ratio %.2f (with perfect hand-offs, ceil(%d/%d) x replacement -> healthy p50 = %.1fs: ratio %.2f); %.1f Raft entries per instance updated (deploy to last token back; the idle fleet writes %.2f/s, %.1f per instance over the window); max instances %d (count %d), min passing %d (goal >= %d); %s\n",
		nodes, count, maxParallel, minHealthyTime, len(res), toSucc, bound, count, maxParallel, minHealthyTime, toSucc/bound.Seconds(),
		count, maxParallel, floor, toSucc/floor, perInst, idleRate, idlePerInst, worstTotal, count, worstPassing, count-maxParallel, placement)
	fmt.Printf("  Raft entries by command (leader's FSM), per instance: %s\n", perInstance(fsm, updated))
	kvw := 0
	for k, v := range writes {
		if strings.HasPrefix(k, "kv ") || strings.HasPrefix(k, "txn ") {
			kvw += v
		}
	}
	fmt.Printf("  the mariposas' writes, per instance: %.2f KV/txn (design minimum 4: the update and healthy status txns, the token taken and given back): %s; reads %.1f\n",
		float64(kvw)/float64(updated), perInstance(floatCounts(writes), updated), float64(reads)/float64(updated))
	failedAll, failedTokens := failedWrites(writes)
	fmt.Printf("  failed CASes and txns per instance: %.2f, of which on the rollout tokens %.2f (api.Semaphore's herd: ~3.7; goal: a release wakes one waiter)\n",
		float64(failedAll)/float64(updated), float64(failedTokens)/float64(updated))
	b.ReportMetric(toSucc, "s-to-successful")
	b.ReportMetric(toSucc/bound.Seconds(), "ratio-to-bound")
	b.ReportMetric(toSucc/floor, "ratio-to-handoff-floor")
	b.ReportMetric(perInst, "raft-entries/instance")
	b.ReportMetric(float64(kvw)/float64(updated), "kv-writes/instance")
	b.ReportMetric(float64(failedAll)/float64(updated), "failed-cas/instance")
	b.ReportMetric(float64(worstPassing), "min-passing")
	b.ReportMetric(float64(worstTotal), "max-instances")
	b.ReportMetric(0, "ns/op")
}

// unhealthySlots lists the slots of unit not held and healthy at the
// desired spec's version: holder, session, version, state.
func unhealthySlots(c *api.Client, unit string) string {
	d, err := cluster.ReadDeployment(c, unit)
	if err != nil {
		return err.Error()
	}
	want := cluster.VersionOf(d.Spec, unit)
	pairs, _, err := c.KV().List(cluster.SlotsPrefix+unit+"/", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err.Error()
	}
	status := map[string]cluster.HoldStatus{}
	for _, p := range pairs {
		var st cluster.HoldStatus
		if lock, ok := strings.CutSuffix(p.Key, "/status"); ok && json.Unmarshal(p.Value, &st) == nil {
			status[lock] = st
		}
	}
	var b strings.Builder
	for _, p := range pairs {
		if _, _, ok := cluster.ParseSlotKey(p.Key); !ok {
			continue
		}
		v, err := cluster.DecodeSlotValue(p.Value)
		st := status[p.Key]
		if st.Index != p.ModifyIndex {
			st = cluster.HoldStatus{Version: v.Version} // nothing said in this hold: the claim's version
		}
		if err == nil && p.Session != "" && st.Version == want && st.HealthyAt != nil {
			continue
		}
		fmt.Fprintf(&b, "  %s: node %s, session %q, state %s, version %s (want %s), healthy at %v, since %s, error %v\n",
			p.Key, v.Node, p.Session, v.State, st.Version, want, st.HealthyAt, v.Since.Format(time.RFC3339Nano), err)
	}
	return b.String()
}

// catalogSample is what a blocking query on a unit's instances saw.
type catalogSample struct {
	maxTotal, minPassing int
	// allAt: when every instance was first seen passing at the version
	// followed (zero: never).
	allAt time.Time
}

// sampleCatalog follows unit's instances with blocking queries until
// stop: the most instances and the fewest passing ever seen, and when
// want of them were first passing at version.
func sampleCatalog(c *api.Client, unit, version string, want int) (stop func() catalogSample, all func() bool) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	s := catalogSample{minPassing: 1 << 30}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var idx uint64
		for {
			select {
			case <-done:
				return
			default:
			}
			es, meta, err := c.Health().Service(unit, "", false, &api.QueryOptions{WaitIndex: idx, WaitTime: time.Second, AllowStale: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			now := time.Now()
			idx = meta.LastIndex
			passing, atVersion := 0, 0
			for _, e := range es {
				if e.Checks.AggregatedStatus() == api.HealthPassing {
					passing++
					if e.Service.Meta["version"] == version {
						atVersion++
					}
				}
			}
			mu.Lock()
			s.maxTotal, s.minPassing = max(s.maxTotal, len(es)), min(s.minPassing, passing)
			if atVersion == want && s.allAt.IsZero() {
				s.allAt = now
			}
			mu.Unlock()
		}
	}()
	return func() catalogSample { close(done); wg.Wait(); return s },
		func() bool { mu.Lock(); defer mu.Unlock(); return !s.allAt.IsZero() }
}

// leaderMetrics reads the Raft leader's Prometheus metrics: of the
// FSM's timers (one sample per Raft entry applied, by command and op) and
// of the leader's KV and txn apply and Raft commit times, the counts and
// sums ("fsm_kvs set|count", "kvs_apply|sum", ...).
func leaderMetrics(b testing.TB, cl *consultest.Cluster) map[string]float64 {
	for _, s := range cl.Servers {
		self, err := s.Client(b).Agent().Self()
		if err != nil {
			continue
		}
		stats, _ := self["Stats"]["raft"].(map[string]any)
		if fmt.Sprint(stats["state"]) != "Leader" {
			continue
		}
		resp, err := http.Get("http://" + s.HTTPAddr() + "/v1/agent/metrics?format=prometheus")
		if err != nil {
			b.Fatalf("leader's metrics: %v", err)
		}
		defer resp.Body.Close()
		out := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "consul_fsm_") && !strings.HasPrefix(line, "consul_kvs_apply") &&
				!strings.HasPrefix(line, "consul_txn_apply") && !strings.HasPrefix(line, "consul_raft_commitTime") {
				continue
			}
			name, rest, _ := strings.Cut(line, " ")
			labels := ""
			if i := strings.IndexByte(name, '{'); i >= 0 {
				name, labels = name[:i], name[i:]
			}
			var suffix string
			switch {
			case strings.HasSuffix(name, "_count"):
				suffix = "count"
			case strings.HasSuffix(name, "_sum"):
				suffix = "sum"
			default:
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				continue
			}
			key := strings.TrimSuffix(strings.TrimPrefix(name, "consul_"), "_"+suffix)
			if i := strings.Index(labels, `op="`); i >= 0 {
				op := labels[i+4:]
				key += " " + op[:strings.IndexByte(op, '"')]
			}
			out[key+"|"+suffix] += v
		}
		return out
	}
	b.Fatal("no Raft leader among the servers")
	return nil
}

// fsmCounts is the FSM's entries by command from leaderMetrics' figures.
func fsmCounts(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if name, ok := strings.CutSuffix(k, "|count"); ok && strings.HasPrefix(name, "fsm_") {
			out[strings.TrimPrefix(name, "fsm_")] += v
		}
	}
	return out
}

// timerMeanMS is the mean of timer name (in ms) in m.
func timerMeanMS(m map[string]float64, name string) float64 {
	if m[name+"|count"] == 0 {
		return 0
	}
	return m[name+"|sum"] / m[name+"|count"]
}

// writeProxy forwards a mariposa's requests to its agent and counts its
// writes by kind: KV writes by key prefix and verb (a failed CAS or
// acquire, a rolled-back txn marked so), session and agent writes.
type writeProxy struct {
	addr   string
	mu     sync.Mutex
	writes map[string]int
	reads  int
}

func newWriteProxy(b testing.TB, target string) *writeProxy {
	p := &writeProxy{writes: map[string]int{}}
	p.addr = consultest.AgentProxy(b, target, func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			p.mu.Lock()
			p.reads++
			p.mu.Unlock()
			rp.ServeHTTP(w, r)
			return
		}
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rec := &recordingWriter{ResponseWriter: w, code: http.StatusOK}
		rp.ServeHTTP(rec, r)
		kind := classifyWrite(r, body)
		if kind == "" {
			return
		}
		if rec.code == http.StatusConflict || (rec.code == http.StatusOK && strings.HasPrefix(kind, "kv ") &&
			strings.TrimSpace(rec.body.String()) == "false") {
			kind += " (failed)"
		}
		p.mu.Lock()
		p.writes[kind]++
		p.mu.Unlock()
	}, func(rp *httputil.ReverseProxy) {
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
		// A mariposa stopped at the end cancels its blocking queries: not news.
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	})
	return p
}

// recordingWriter keeps a response's status and the start of its body.
type recordingWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (r *recordingWriter) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

func (r *recordingWriter) Write(p []byte) (int, error) {
	if r.body.Len() < 64 {
		r.body.Write(p[:min(len(p), 64)])
	}
	return r.ResponseWriter.Write(p)
}

func (r *recordingWriter) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// keyClass names a key by what it is for: slots, audit, deploy, the
// rollout semaphore's .lock or a contender key, ...
func keyClass(key string) string {
	rest, ok := strings.CutPrefix(key, cluster.Prefix)
	if !ok {
		return "other"
	}
	top, _, _ := strings.Cut(rest, "/")
	if top == "units" {
		// The step machine's: units/<unit>/{record,status/<k>,tokens/<t>}.
		parts := strings.Split(rest, "/")
		if len(parts) >= 3 {
			switch parts[2] {
			case "tokens":
				return "unit token"
			case "status":
				return "unit status"
			case "record":
				return "unit record"
			}
		}
		return "units"
	}
	if top == "rollout" {
		switch {
		case strings.HasSuffix(key, "/.lock"):
			return "rollout .lock"
		case strings.HasSuffix(key, "/failed"):
			return "rollout failed"
		default:
			return "rollout contender"
		}
	}
	return top
}

// classifyWrite names a write request: "kv <verb> <key class>", "txn
// <key classes written>", a session or agent call, or method and path.
func classifyWrite(r *http.Request, body []byte) string {
	path := r.URL.Path
	q := r.URL.Query()
	switch {
	case strings.HasPrefix(path, "/v1/kv/"):
		class := keyClass(strings.TrimPrefix(path, "/v1/kv/"))
		verb := "set"
		switch {
		case r.Method == http.MethodDelete:
			verb = "delete"
		case q.Has("acquire"):
			verb = "acquire"
		case q.Has("release"):
			verb = "release"
		case q.Has("cas"):
			verb = "cas"
		}
		return "kv " + verb + " " + class
	case path == "/v1/txn":
		var ops []struct {
			KV *struct{ Verb, Key string }
		}
		_ = json.Unmarshal(body, &ops)
		seen := map[string]bool{}
		for _, op := range ops {
			if op.KV == nil || strings.HasPrefix(op.KV.Verb, "check") || op.KV.Verb == "get" {
				continue
			}
			seen[keyClass(op.KV.Key)] = true
		}
		var classes []string
		for k := range seen {
			classes = append(classes, k)
		}
		sort.Strings(classes)
		return "txn " + strings.Join(classes, "+")
	case strings.HasPrefix(path, "/v1/session/renew/"):
		return "session renew (not Raft)"
	case strings.HasPrefix(path, "/v1/session/"):
		return "session " + strings.SplitN(strings.TrimPrefix(path, "/v1/session/"), "/", 2)[0]
	case strings.HasPrefix(path, "/v1/agent/check/update/"), strings.HasPrefix(path, "/v1/agent/check/pass/"),
		strings.HasPrefix(path, "/v1/agent/check/warn/"), strings.HasPrefix(path, "/v1/agent/check/fail/"):
		return "agent TTL update (local)"
	case path == "/v1/catalog/register":
		return "catalog register (supervisor check output)"
	case strings.HasPrefix(path, "/v1/agent/"):
		parts := strings.Split(strings.TrimPrefix(path, "/v1/agent/"), "/")
		return "agent " + strings.Join(parts[:min(2, len(parts))], " ") + " (local)"
	}
	return r.Method + " " + path
}

// failedWrites counts the failed writes (a CAS or acquire answered
// false, a txn rolled back), and those of them on the rollout tokens.
func failedWrites(writes map[string]int) (all, tokens int) {
	for k, v := range writes {
		if !strings.HasSuffix(k, " (failed)") {
			continue
		}
		all += v
		if strings.Contains(k, "rollout .lock") || strings.Contains(k, "rollout contender") || strings.Contains(k, "unit token") {
			tokens += v
		}
	}
	return all, tokens
}

// proxyTotals sums the proxies' writes by kind, and their reads.
func proxyTotals(ps map[string]*writeProxy) (map[string]int, int) {
	out, reads := map[string]int{}, 0
	for _, p := range ps {
		p.mu.Lock()
		for k, v := range p.writes {
			out[k] += v
		}
		reads += p.reads
		p.mu.Unlock()
	}
	return out, reads
}

// diffMetrics and diffCounts are a - b, by key, without the zeros.
func diffMetrics(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func diffCounts(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// floatCounts is m as floats.
func floatCounts(m map[string]int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

// perInstance lists m's counts divided by n, largest first.
func perInstance(m map[string]float64, n int) string {
	keys := make([]string, 0, len(m))
	total := 0.0
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := []string{fmt.Sprintf("total %.2f", total/float64(n))}
	for _, k := range keys {
		if v := m[k] / float64(n); v >= 0.005 { // the commands that ran
			parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

// deployTimeline is where a rollout's time went, from the mariposas' logs.
type deployTimeline struct {
	instances, tokens                int
	claimed, lost                    int           // slots that changed hands during the round
	handoffMin, handoff50, handoff90 time.Duration // a token's healthy line -> the next replacement
	first, tail                      time.Duration // deploy -> first replacement; last healthy -> successful
	replaceToHealthy50, rthMax       time.Duration
	idleBusyNodes, idleHandoff       float64 // token-seconds unused while instances waited
	span                             time.Duration
	maxInFlight, maxPerNode          int
	lastBatchNodes                   string
}

func (t deployTimeline) String() string {
	if t.instances == 0 {
		return "no rollout records in the audit log"
	}
	return fmt.Sprintf("audit: %d instances replaced, first %.2fs after the deploy, replacement -> healthy p50 %.2fs max %.2fs, token hand-off (healthy -> next replacement, in order) min %.2fs p50 %.2fs p90 %.2fs, last healthy -> successful %.2fs, at most %d in flight; unused token-seconds while instances waited: %.1f with every such node busy with another of its slots (up to %d slots a node), %.1f hand-off (of %.1f over %.1fs); last to go: %s",
		t.instances, t.first.Seconds(), t.replaceToHealthy50.Seconds(), t.rthMax.Seconds(), t.handoffMin.Seconds(), t.handoff50.Seconds(), t.handoff90.Seconds(), t.tail.Seconds(), t.maxInFlight,
		t.idleBusyNodes, t.maxPerNode, t.idleHandoff, float64(t.tokens)*t.span.Seconds(), t.span.Seconds(), t.lastBatchNodes)
}

// fleetAuditSince is unit's audit records from t0 on (the days from t0's
// to today's), in time order.
func fleetAuditSince(b testing.TB, c *api.Client, unit string, t0 time.Time) []cluster.AuditEvent {
	b.Helper()
	var out []cluster.AuditEvent
	for day := t0.UTC().Truncate(24 * time.Hour); !day.After(time.Now().UTC()); day = day.Add(24 * time.Hour) {
		pairs, _, err := c.KV().List(cluster.AuditPrefix+day.Format("2006-01-02")+"/", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pairs {
			var e cluster.AuditEvent
			if json.Unmarshal(p.Value, &e) != nil || e.Service != unit || e.At.Before(t0) {
				continue
			}
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// rolloutTimeline reads a rollout to version from the unit's audit
// records: each slot's "update" (its status says it moves to version; the
// instance is replaced once that is written) and its "healthy" (healthy
// at version for min_healthy_time), and the claims and releases (a slot
// that changed hands: not a clean rollout).
func rolloutTimeline(audit []cluster.AuditEvent, version string, t0, success time.Time, tokens int) deployTimeline {
	type inst struct {
		node            string
		replace, health time.Time
	}
	all := map[string]*inst{}
	claims, losses := 0, 0
	for _, e := range audit {
		switch e.Action {
		case "claim":
			claims++
		case "release", "reschedule", "fail":
			losses++
		}
		if e.To != version || (e.Action != "update" && e.Action != "healthy") {
			continue
		}
		if all[e.Slot] == nil {
			all[e.Slot] = &inst{node: e.Node}
		}
		if e.Action == "update" {
			all[e.Slot].replace = e.At
		} else {
			all[e.Slot].health = e.At
		}
	}
	var is []*inst
	for _, x := range all {
		if !x.replace.IsZero() && !x.health.IsZero() {
			is = append(is, x)
		}
	}
	t := deployTimeline{instances: len(is), tokens: tokens, claimed: claims, lost: losses}
	if len(is) == 0 {
		return t
	}
	sort.Slice(is, func(i, j int) bool { return is[i].replace.Before(is[j].replace) })
	var rth []time.Duration
	perNode := map[string]int{}
	lastHealthy := is[0].health
	for _, x := range is {
		rth = append(rth, x.health.Sub(x.replace))
		perNode[x.node]++
		if x.health.After(lastHealthy) {
			lastHealthy = x.health
		}
	}
	for _, n := range perNode {
		t.maxPerNode = max(t.maxPerNode, n)
	}
	// Hand-offs: the i-th replacement after the first max_parallel took
	// the token given back with the i-th healthy line (in order of time;
	// a token is given back right after its healthy line).
	var healthy []time.Time
	for _, x := range is {
		healthy = append(healthy, x.health)
	}
	sort.Slice(healthy, func(i, j int) bool { return healthy[i].Before(healthy[j]) })
	var gaps []time.Duration
	for i, x := range is[min(tokens, len(is)):] {
		gaps = append(gaps, x.replace.Sub(healthy[i]))
	}
	if len(gaps) > 0 {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		t.handoffMin, t.handoff50, t.handoff90 = gaps[0], gaps[len(gaps)/2], gaps[len(gaps)*9/10]
	}
	sort.Slice(rth, func(i, j int) bool { return rth[i] < rth[j] })
	t.first, t.tail = is[0].replace.Sub(t0), success.Sub(lastHealthy)
	t.replaceToHealthy50, t.rthMax = rth[len(rth)/2], rth[len(rth)-1]
	start, lastStart := is[0].replace, is[len(is)-1].replace
	t.span = lastHealthy.Sub(start)
	// Walk the time from the first replacement to the last one in 10 ms
	// steps: while instances still wait, every token not in flight is
	// unused, because every node with one left is busy, or not.
	const step = 10 * time.Millisecond
	for at := start; at.Before(lastStart); at = at.Add(step) {
		inFlight := 0
		busy, waiting := map[string]bool{}, map[string]bool{}
		for _, x := range is {
			switch {
			case !x.replace.After(at) && x.health.After(at):
				inFlight++
				busy[x.node] = true
			case x.replace.After(at):
				waiting[x.node] = true
			}
		}
		t.maxInFlight = max(t.maxInFlight, inFlight)
		if inFlight >= tokens || len(waiting) == 0 {
			continue
		}
		allBusy := true
		for n := range waiting {
			allBusy = allBusy && busy[n]
		}
		unused := float64(tokens-inFlight) * step.Seconds()
		if allBusy {
			t.idleBusyNodes += unused
		} else {
			t.idleHandoff += unused
		}
	}
	// The last batch: the nodes of the last max_parallel replacements.
	var last []string
	for _, x := range is[max(0, len(is)-tokens):] {
		last = append(last, x.node)
	}
	sort.Strings(last)
	t.lastBatchNodes = strings.Join(last, " ")
	return t
}
