package executor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The tests run several executors in one process against one real dev
// agent: each is its own node, registered in the catalog with the
// service "mariposa" and a liveness check its session is bound to (the
// test sets it critical as Consul would when that node's mariposa stops
// heartbeating). Each executor talks to the agent through a proxy the test
// can cut. The instances are a recorder: every start and stop, in one
// order, which the checker reads.

// event is an instance started or stopped, in the order the recorder saw
// them (one mutex).
type event struct {
	at    time.Time
	node  string
	slot  agent.SlotID
	start bool
	index uint64
	kill  bool
	// update: an update in place (start false: the old version stopped;
	// start true: the new one started); healthy: the instance passes its
	// checks; version: the instance's.
	update, healthy bool
	version         string
}

type recorder struct {
	mu       sync.Mutex
	events   []event
	running  map[agent.SlotID]map[string]uint64 // slot -> node -> fencing token
	versions map[agent.SlotID]map[string]string // slot -> node -> version
	gen      map[agent.SlotID]map[string]int    // slot -> node -> instance number
}

func newRecorder() *recorder {
	return &recorder{running: map[agent.SlotID]map[string]uint64{}, versions: map[agent.SlotID]map[string]string{},
		gen: map[agent.SlotID]map[string]int{}}
}

// run notes node's new instance of slot (under r.mu): its number.
func (r *recorder) run(node string, slot agent.SlotID, index uint64, version string) int {
	if r.running[slot] == nil {
		r.running[slot], r.versions[slot], r.gen[slot] = map[string]uint64{}, map[string]string{}, map[string]int{}
	}
	r.running[slot][node], r.versions[slot][node] = index, version
	r.gen[slot][node]++
	return r.gen[slot][node]
}

func (r *recorder) start(node string, s agent.Start) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{at: time.Now(), node: node, slot: s.Slot, start: true, index: s.Index, version: s.Version})
	return r.run(node, s.Slot, s.Index, s.Version)
}

// update replaces node's instance of u.Slot by one at u.To, same token.
func (r *recorder) update(node string, u agent.Update) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.events = append(r.events, event{at: now, node: node, slot: u.Slot, update: true, index: u.Index, version: u.From},
		event{at: now, node: node, slot: u.Slot, start: true, update: true, index: u.Index, version: u.To})
	return r.run(node, u.Slot, u.Index, u.To)
}

// healthy notes that instance gen of slot on node passes its checks,
// unless it is gone: false then.
func (r *recorder) healthy(node string, slot agent.SlotID, gen int) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[slot][node]; !ok || r.gen[slot][node] != gen {
		return "", false
	}
	v := r.versions[slot][node]
	r.events = append(r.events, event{at: time.Now(), node: node, slot: slot, healthy: true, version: v})
	return v, true
}

func (r *recorder) versionsOf(unit string) map[agent.SlotID]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[agent.SlotID]map[string]string{}
	for id, ns := range r.versions {
		if id.Unit != unit {
			continue
		}
		for n, v := range ns {
			if _, ok := r.running[id][n]; !ok {
				continue
			}
			if out[id] == nil {
				out[id] = map[string]string{}
			}
			out[id][n] = v
		}
	}
	return out
}

func (r *recorder) stop(node string, slot agent.SlotID, kill bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[slot][node]; !ok {
		return
	}
	delete(r.running[slot], node)
	r.gen[slot][node]++
	r.events = append(r.events, event{at: time.Now(), node: node, slot: slot, kill: kill})
}

// killNode stops every instance of node at once (a crashed mariposa's
// children die by the parent-death signal).
func (r *recorder) killNode(node string) {
	r.mu.Lock()
	var slots []agent.SlotID
	for id, ns := range r.running {
		if _, ok := ns[node]; ok {
			slots = append(slots, id)
		}
	}
	r.mu.Unlock()
	for _, id := range slots {
		r.stop(node, id, true)
	}
}

func (r *recorder) runningOf(slot agent.SlotID) map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]uint64{}
	for n, i := range r.running[slot] {
		out[n] = i
	}
	return out
}

func (r *recorder) log() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// overlaps is the checker: every moment at which an exclusive slot's
// instance started while another node's instance of it still ran.
func overlaps(events []event, exclusive func(unit string) bool) []string {
	running := map[agent.SlotID]map[string]time.Time{}
	var out []string
	for _, e := range events {
		if !exclusive(e.slot.Unit) || e.healthy {
			continue
		}
		if running[e.slot] == nil {
			running[e.slot] = map[string]time.Time{}
		}
		if !e.start {
			delete(running[e.slot], e.node)
			continue
		}
		for n, since := range running[e.slot] {
			if n != e.node {
				out = append(out, fmt.Sprintf("%s: %s starts at %s while %s runs it (since %s)",
					e.slot, e.node, e.at.Format("15:04:05.000"), n, since.Format("15:04:05.000")))
			}
		}
		running[e.slot][e.node] = e.at
	}
	return out
}

func TestOverlapsChecker(t *testing.T) {
	s := agent.SlotID{Unit: "web", K: 0}
	t0 := time.Now()
	excl := func(string) bool { return true }
	for _, tc := range []struct {
		name   string
		events []event
		want   int
	}{
		{"handover", []event{{at: t0, node: "a", slot: s, start: true}, {at: t0, node: "a", slot: s}, {at: t0, node: "b", slot: s, start: true}}, 0},
		{"two at once", []event{{at: t0, node: "a", slot: s, start: true}, {at: t0, node: "b", slot: s, start: true}}, 1},
		{"restart on the same node", []event{{at: t0, node: "a", slot: s, start: true}, {at: t0, node: "a", slot: s, start: true}}, 0},
		{"other slots", []event{{at: t0, node: "a", slot: s, start: true}, {at: t0, node: "b", slot: agent.SlotID{Unit: "web", K: 1}, start: true}}, 0},
	} {
		if got := overlaps(tc.events, excl); len(got) != tc.want {
			t.Errorf("%s: %d overlaps (%v), want %d", tc.name, len(got), got, tc.want)
		}
	}
	if got := overlaps([]event{{at: t0, node: "a", slot: s, start: true}, {at: t0, node: "b", slot: s, start: true}}, func(string) bool { return false }); len(got) != 0 {
		t.Errorf("a non-exclusive unit: %v", got)
	}
}

// runner is one node's instances: the recorder's, started and stopped at
// once; each passes its checks healthyAfter after it starts (a version
// ending in "-bad" never does).
type runner struct {
	rec          *recorder
	node         string
	ex           *executor.Executor
	healthyAfter time.Duration
}

func (r *runner) Start(s agent.Start) {
	gen := r.rec.start(r.node, s)
	r.ex.InstanceStarted(s.Slot)
	r.checks(s.Slot, s.Version, gen)
}

func (r *runner) Update(u agent.Update) {
	gen := r.rec.update(r.node, u)
	r.ex.InstanceStarted(u.Slot)
	r.checks(u.Slot, u.To, gen)
}

func (r *runner) checks(slot agent.SlotID, version string, gen int) {
	if strings.HasSuffix(version, "-bad") {
		return
	}
	time.AfterFunc(r.healthyAfter, func() {
		if v, ok := r.rec.healthy(r.node, slot, gen); ok {
			r.ex.InstanceHealthy(slot, v, time.Time{})
		}
	})
}

func (r *runner) Stop(slot agent.SlotID, kill bool) {
	r.rec.stop(r.node, slot, kill)
	r.ex.InstanceExited(slot)
}

// cutProxy is a node's way to its agent; Cut drops what is on its way
// (the client sees a 502) and holds every new request until Heal.
type cutProxy struct {
	addr     string
	mu       sync.Mutex
	cut      bool
	healed   chan struct{}
	inflight map[*int]context.CancelFunc
	requests map[string]int // by kind (requestKind)
}

// requestKind names what a request to the agent is for.
func requestKind(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/kv/mariposa/held/"):
		return "index"
	case strings.HasPrefix(p, "/v1/kv/"+agent.VacancyPrefix):
		return "vacancy"
	case strings.HasPrefix(p, "/v1/kv/"+cluster.ControlPrefix):
		return "control"
	case p == "/v1/txn" && r.URL.Query().Has("consistent"):
		return "confirm"
	case p == "/v1/txn":
		return "txn"
	case strings.HasPrefix(p, "/v1/session/"):
		return "session"
	case strings.HasPrefix(p, "/v1/health/"), strings.HasPrefix(p, "/v1/catalog/"):
		return "health"
	default:
		return "other"
	}
}

func (p *cutProxy) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.requests {
		out[k] = v
	}
	return out
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{inflight: map[*int]context.CancelFunc{}, requests: map[string]int{}}
	p.addr = consultest.AgentProxy(t, target, p.serve, func(rp *httputil.ReverseProxy) {
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	})
	return p
}

func (p *cutProxy) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.requests[requestKind(r)]++
	for p.cut {
		ch := p.healed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		p.mu.Lock()
	}
	ctx, cancel := context.WithCancel(r.Context())
	key := new(int)
	p.inflight[key] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.inflight, key)
		p.mu.Unlock()
		cancel()
	}()
	rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut, p.healed = true, make(chan struct{})
	for _, cancel := range p.inflight {
		cancel()
	}
}

func (p *cutProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
}

type node struct {
	name  string
	check string
	ex    *executor.Executor
	proxy *cutProxy
}

type fleet struct {
	t     *testing.T
	c     *api.Client
	rec   *recorder
	nodes []*node
	units []agent.Unit

	mu       sync.Mutex
	sessNode map[string]string
}

type fleetOptions struct {
	nodes     int
	lockDelay time.Duration
	faults    func(i int) executor.Faults
	// control: the operator's controls on (executor.Config.Control);
	// before: run on the agent before the executors start.
	control bool
	before  func(c *api.Client)
	// config: changes node i's executor's config (audit_test.go).
	config func(i int, c *executor.Config)
}

// newFleet starts a dev agent and n executors, each its own node.
func newFleet(t *testing.T, o fleetOptions, units ...agent.Unit) *fleet {
	t.Helper()
	if o.lockDelay == 0 {
		// Not Consul's 1 s: on a loaded 2-core machine a confirmation
		// can be later than lock_delay/2, and the watchdog rightly ends
		// the hold; the tests here are about the executor.
		o.lockDelay = 3 * time.Second
	}
	a := consultest.NewDev(t)
	f := &fleet{t: t, c: a.Client(t), rec: newRecorder(), units: units, sessNode: map[string]string{}}
	if o.before != nil {
		o.before(f.c)
	}
	for i := range o.nodes {
		name := fmt.Sprintf("node%d", i)
		n := &node{name: name, check: "mariposa-" + name + ":mariposa", proxy: newCutProxy(t, a.HTTPAddr())}
		f.setCheck(n, api.HealthPassing)
		cfg := api.DefaultNonPooledConfig()
		cfg.Address = n.proxy.addr
		c, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &runner{rec: f.rec, node: name, healthyAfter: 200 * time.Millisecond}
		var faults executor.Faults
		if o.faults != nil {
			faults = o.faults(i)
		}
		ec := executor.Config{Client: c, Node: name, Checks: []string{n.check}, LockDelay: o.lockDelay,
			Seed: uint64(i + 1), Instances: r, Faults: faults, Control: o.control, Log: consultest.Logger(t, name),
			SuccessorPasses: f.successorPasses}
		if o.config != nil {
			o.config(i, &ec)
		}
		n.ex = executor.New(ec)
		r.ex = n.ex
		f.nodes = append(f.nodes, n)
	}
	for _, n := range f.nodes {
		n.ex.Start()
		n.ex.SetUnits(units)
		t.Cleanup(func() {
			n.proxy.Heal()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n.ex.Stop(ctx)
		})
	}
	return f
}

// setCheck registers n (node, service, liveness check) with the check's
// status: critical invalidates the sessions bound to it, as Consul does
// when a node's mariposa stops heartbeating.
func (f *fleet) setCheck(n *node, status string) {
	f.t.Helper()
	_, err := f.c.Catalog().Register(&api.CatalogRegistration{Node: n.name, Address: "127.0.0.1",
		Service: &api.AgentService{ID: "mariposa-" + n.name, Service: "mariposa"},
		Check:   &api.AgentCheck{Node: n.name, CheckID: n.check, Name: "mariposa supervisor", ServiceID: "mariposa-" + n.name, Status: status}}, nil)
	if err != nil {
		f.t.Fatalf("register %s: %v", n.name, err)
	}
}

func (f *fleet) setUnits(units ...agent.Unit) {
	f.units = units
	for _, n := range f.nodes {
		n.ex.SetUnits(units)
	}
}

func (f *fleet) exclusive(unit string) bool {
	for _, u := range f.units {
		if u.Name == unit {
			return u.Exclusive
		}
	}
	return true
}

// node of a session, from Consul (kept: a session's node never changes).
func (f *fleet) nodeOf(session string) (string, error) {
	f.mu.Lock()
	n, ok := f.sessNode[session]
	f.mu.Unlock()
	if ok {
		return n, nil
	}
	es, _, err := f.c.Session().Info(session, nil)
	if err != nil {
		return "", err
	}
	if es == nil {
		return "", fmt.Errorf("session %s gone", session)
	}
	f.mu.Lock()
	f.sessNode[session] = es.Node
	f.mu.Unlock()
	return es.Node, nil
}

// holders reads the unit's slot keys: slot -> its key (held or not).
func (f *fleet) slotKeys(unit string) (map[int]*api.KVPair, error) {
	pairs, _, err := f.c.KV().List("mariposa/slots/"+unit+"/", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return nil, err
	}
	out := map[int]*api.KVPair{}
	for _, p := range pairs {
		k, err := strconv.Atoi(strings.TrimPrefix(p.Key, "mariposa/slots/"+unit+"/"))
		if err == nil {
			out[k] = p
		}
	}
	return out, nil
}

// settled says why the unit is not as it must be at rest: slots 0..count-1
// each held by one node's session, that node (and only it) running the
// slot's instance with the key's ModifyIndex as its token; no slot above
// the count held or running; no node holding more than max_per_node.
func (f *fleet) settled(u agent.Unit) error {
	keys, err := f.slotKeys(u.Name)
	if err != nil {
		return err
	}
	per := map[string]int{}
	for k := range max(u.Count, len(keys)) + 4 {
		id := agent.SlotID{Unit: u.Name, K: k}
		p := keys[k]
		run := f.rec.runningOf(id)
		if k >= u.Count {
			if p != nil && p.Session != "" {
				return fmt.Errorf("%s above the count still held", id)
			}
			if len(run) > 0 {
				return fmt.Errorf("%s above the count still runs: %v", id, run)
			}
			continue
		}
		if p == nil || p.Session == "" {
			return fmt.Errorf("%s not held", id)
		}
		holder, err := f.nodeOf(p.Session)
		if err != nil {
			return err
		}
		per[holder]++
		if len(run) != 1 {
			return fmt.Errorf("%s held by %s, instances running: %v", id, holder, run)
		}
		if idx, ok := run[holder]; !ok || idx != p.ModifyIndex {
			return fmt.Errorf("%s held by %s at index %d, instances running: %v", id, holder, p.ModifyIndex, run)
		}
	}
	for n, c := range per {
		if c > max(1, u.MaxPerNode) {
			return fmt.Errorf("%s holds %d slots of %s", n, c, u.Name)
		}
	}
	return nil
}

// waitSettled waits until every unit is settled.
func (f *fleet) waitSettled(timeout time.Duration) {
	f.t.Helper()
	var last error
	if !consultest.WaitFor(timeout, func() bool {
		for _, u := range f.units {
			if last = f.settled(u); last != nil {
				return false
			}
		}
		return true
	}) {
		// What each node makes of it, as data (a failure seen once in CI
		// is then readable).
		var views []string
		for _, n := range f.nodes {
			views = append(views, fmt.Sprintf("%s: %+v; waiting: %s", n.name, n.ex.Stats().Units, n.ex.Waiting()))
		}
		f.t.Fatalf("not settled after %v: %v\n%s", timeout, last, strings.Join(views, "\n"))
	}
}

func (f *fleet) checkNoOverlap() {
	f.t.Helper()
	for _, v := range overlaps(f.rec.log(), f.exclusive) {
		f.t.Error("two instances of an exclusive slot: " + v)
	}
}

// holderOf is the node holding slot, by its key.
func (f *fleet) holderOf(id agent.SlotID) *node {
	f.t.Helper()
	keys, err := f.slotKeys(id.Unit)
	if err != nil || keys[id.K] == nil || keys[id.K].Session == "" {
		f.t.Fatalf("%s not held (%v)", id, err)
	}
	name, err := f.nodeOf(keys[id.K].Session)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	f.t.Fatalf("%s held by unknown node %s", id, name)
	return nil
}

// startOf is the first start of slot on a node other than not, after from.
func startAfter(events []event, slot agent.SlotID, from time.Time) (event, bool) {
	for _, e := range events {
		if e.start && e.slot == slot && !e.at.Before(from) {
			return e, true
		}
	}
	return event{}, false
}

func stopOf(events []event, slot agent.SlotID, node string) (event, bool) {
	for _, e := range events {
		if !e.start && !e.healthy && e.slot == slot && e.node == node {
			return e, true
		}
	}
	return event{}, false
}

var (
	web  = agent.Unit{Name: "web", Count: 2, Exclusive: true, MaxPerNode: 1}
	api3 = agent.Unit{Name: "api", Count: 3, MaxPerNode: 1}
)

// (a) Four executors, an exclusive unit of count 2 (and a non-exclusive
// one of count 3): exactly count slots held, each holder runs its
// instance with the slot key's ModifyIndex, and the key is not written
// while held (the token stays valid: a fenced write with it succeeds).
// At rest the watches are quiet: no unit's index or vacancy key is asked
// again, only the confirmations and the renewals go on.
func TestExecutorsHoldExactlyCount(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 4}, web, api3)
	f.waitSettled(30 * time.Second)
	keys, err := f.slotKeys("web")
	if err != nil {
		t.Fatal(err)
	}
	// The watches catch up with the claims (an idle node hears a unit's
	// fills a second later): wait until no request but the
	// confirmations and renewals has been sent for 1.5 s.
	counts := func() map[*node]map[string]int {
		out := map[*node]map[string]int{}
		for _, n := range f.nodes {
			c := n.proxy.counts()
			delete(c, "confirm")
			delete(c, "session")
			out[n] = c
		}
		return out
	}
	last, since := counts(), time.Now()
	if !consultest.WaitFor(15*time.Second, func() bool {
		if c := counts(); fmt.Sprint(c) != fmt.Sprint(last) {
			last, since = c, time.Now()
		}
		return time.Since(since) > 1500*time.Millisecond
	}) {
		t.Fatalf("the watches never went quiet: %v", last)
	}
	before := map[*node]map[string]int{}
	for _, n := range f.nodes {
		before[n] = n.proxy.counts()
	}
	// Over a few confirmation rounds and a renewal's worth of time, the
	// keys do not move and the instances stay.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		now, err := f.slotKeys("web")
		if err != nil {
			t.Fatal(err)
		}
		for k := range web.Count {
			if now[k].ModifyIndex != keys[k].ModifyIndex || now[k].Session != keys[k].Session {
				t.Fatalf("web/%d moved while held: index %d -> %d, session %s -> %s", k, keys[k].ModifyIndex, now[k].ModifyIndex, keys[k].Session, now[k].Session)
			}
		}
		for _, u := range f.units {
			if err := f.settled(u); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range f.nodes {
		after := n.proxy.counts()
		for _, kind := range []string{"index", "vacancy", "txn", "health", "control", "other"} {
			if d := after[kind] - before[n][kind]; d > 0 {
				t.Errorf("%s at rest: %d more %s requests in 3 s", n.name, d, kind)
			}
		}
		if d := after["confirm"] - before[n]["confirm"]; d > 10 {
			t.Errorf("%s at rest: %d confirmations in 3 s (one per lock_delay/5, 600 ms, expected)", n.name, d)
		}
	}
	// The child's fenced write with its token.
	for k := range web.Count {
		id := agent.SlotID{Unit: "web", K: k}
		var idx uint64
		for _, i := range f.rec.runningOf(id) {
			idx = i
		}
		ok, r, _, err := f.c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: id.Key(), Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "app/" + id.String(), Value: []byte("x")}},
		}, nil)
		if err != nil || !ok {
			t.Fatalf("fenced write of %s with index %d refused: %v %+v", id, idx, err, r)
		}
	}
	f.checkNoOverlap()
}

// (b) A holder's session destroyed while it runs: it kills its instance
// (it learns the loss from Consul), another session takes the slot only
// after the lock delay, and never are two instances of the slot running.
func TestSessionDestroyedSlotTakenOverAfterLockDelay(t *testing.T) {
	const lockDelay = 2 * time.Second
	f := newFleet(t, fleetOptions{nodes: 4, lockDelay: lockDelay}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	keys, _ := f.slotKeys("web")
	at := time.Now()
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	if !consultest.WaitFor(30*time.Second, func() bool {
		_, ok := stopOf(f.rec.log(), id, a.name)
		return ok
	}) {
		t.Fatalf("%s's instance of %s not stopped after its session was destroyed", a.name, id)
	}
	f.waitSettled(30 * time.Second)
	ev := f.rec.log()
	stop, _ := stopOf(ev, id, a.name)
	if !stop.kill {
		t.Errorf("the lost hold's instance was stopped, not killed")
	}
	start, ok := startAfter(ev, id, at)
	if !ok {
		t.Fatalf("%s not started again", id)
	}
	if d := start.at.Sub(at); d < lockDelay {
		t.Errorf("%s started again on %s %v after the session was destroyed, within the lock delay %v", id, start.node, d, lockDelay)
	}
	t.Logf("%s: %s killed its instance %v after the destroy; %s started it %v after", id, a.name, stop.at.Sub(at), start.node, start.at.Sub(at))
	f.checkNoOverlap()
}

// (b) A holder's mariposa crashes (Kill: nothing released, its children
// gone with it) and Consul invalidates its session (its liveness check
// critical): the slot is taken over, only after the lock delay.
func TestKilledExecutorSlotTakenOverAfterLockDelay(t *testing.T) {
	const lockDelay = 2 * time.Second
	f := newFleet(t, fleetOptions{nodes: 4, lockDelay: lockDelay}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	a.ex.Kill()
	f.rec.killNode(a.name)
	keys, _ := f.slotKeys("web")
	if keys[0].Session == "" {
		t.Fatal("the killed executor released its slot")
	}
	at := time.Now()
	f.setCheck(a, api.HealthCritical)
	f.waitSettled(30 * time.Second)
	start, ok := startAfter(f.rec.log(), id, at)
	if !ok || start.node == a.name {
		t.Fatalf("%s not taken over (%+v)", id, start)
	}
	if d := start.at.Sub(at); d < lockDelay {
		t.Errorf("%s started on %s %v after the invalidation, within the lock delay %v", id, start.node, d, lockDelay)
	}
	t.Logf("%s: started on %s %v after %s's session was invalidated", id, start.node, start.at.Sub(at), a.name)
	f.checkNoOverlap()
}

// cutHolder cuts the holder of web/0 off from Consul, then has Consul
// invalidate its session (its liveness check critical, as when its
// heartbeats stop): the holder learns nothing, so only its watchdog can
// stop its instance before another node's starts. It returns the
// overlaps the checker found once the slot runs elsewhere.
func cutHolder(t *testing.T, faults agent.Faults) []string {
	const lockDelay = 2 * time.Second
	f := newFleet(t, fleetOptions{nodes: 4, lockDelay: lockDelay, faults: func(int) executor.Faults { return executor.Faults{Agent: faults} }}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	cut := time.Now()
	a.proxy.Cut()
	at := time.Now()
	f.setCheck(a, api.HealthCritical)
	var start event
	if !consultest.WaitFor(30*time.Second, func() bool {
		for n, idx := range f.rec.runningOf(id) {
			if n != a.name {
				keys, err := f.slotKeys("web")
				if err == nil && keys[0] != nil && keys[0].ModifyIndex == idx {
					var ok bool
					start, ok = startAfter(f.rec.log(), id, at)
					return ok
				}
			}
		}
		return false
	}) {
		t.Fatalf("%s not taken over after %s was cut off", id, a.name)
	}
	if d := start.at.Sub(at); d < lockDelay {
		t.Errorf("%s started on %s %v after the invalidation, within the lock delay %v", id, start.node, d, lockDelay)
	}
	if stop, ok := stopOf(f.rec.log(), id, a.name); ok {
		if !stop.kill {
			t.Errorf("the cut holder stopped its instance without killing it")
		}
		// The watchdog's bound: lock_delay/2 after the last confirmation,
		// which was sent before the cut (slack for a loaded machine).
		if d := stop.at.Sub(cut); d > lockDelay/2+lockDelay/4 {
			t.Errorf("the cut holder killed its instance %v after the cut, beyond lock_delay/2", d)
		}
		t.Logf("%s: %s (cut) killed its instance %v after the cut; %s started it %v after the invalidation", id, a.name, stop.at.Sub(cut), start.node, start.at.Sub(at))
	}
	return overlaps(f.rec.log(), f.exclusive)
}

// (b) The holder cut off from Consul: its watchdog kills its instance
// before the slot can be taken over.
func TestCutHolderKilledByWatchdog(t *testing.T) {
	if v := cutHolder(t, agent.Faults{}); len(v) > 0 {
		t.Errorf("two instances of an exclusive slot: %v", v)
	}
}

// The mutation check of the checker above: with the watchdog off the cut
// holder's instance outlives its hold, and the checker must say so.
func TestCheckerCatchesWatchdogOff(t *testing.T) {
	if v := cutHolder(t, agent.Faults{NoWatchdog: true}); len(v) == 0 {
		t.Error("the watchdog was off, yet the checker found no two instances of a slot at once")
	} else {
		t.Logf("caught: %v", v)
	}
}

// (c) A graceful stop releases its slots (no lock delay) and destroys its
// session: another node runs the slot well within the lock delay.
func TestGracefulStopReleasesAtOnce(t *testing.T) {
	const lockDelay = 5 * time.Second
	f := newFleet(t, fleetOptions{nodes: 4, lockDelay: lockDelay}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	keys, _ := f.slotKeys("web")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := time.Now()
	if err := a.ex.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if es, _, err := f.c.Session().Info(keys[0].Session, nil); err != nil || es != nil {
		t.Errorf("the stopped node's session is still there (%v)", err)
	}
	stop, ok := stopOf(f.rec.log(), id, a.name)
	if !ok || stop.kill {
		t.Fatalf("the stopped node's instance: stopped %v, killed %v", ok, stop.kill)
	}
	f.waitSettled(30 * time.Second)
	start, ok := startAfter(f.rec.log(), id, at)
	if !ok || start.node == a.name {
		t.Fatalf("%s not taken over (%+v)", id, start)
	}
	if d := start.at.Sub(stop.at); d >= lockDelay {
		t.Errorf("%s taken over %v after the release: the lock delay (%v) applied", id, d, lockDelay)
	}
	t.Logf("%s: released by %s, running on %s %v later", id, a.name, start.node, start.at.Sub(stop.at))
	f.checkNoOverlap()
}

// (d) The count lowered and raised: the slot above the count is stopped,
// then released; raised, the new slots are claimed, one a node.
func TestScaleDownAndUp(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 4}, web, api3)
	f.waitSettled(30 * time.Second)
	down, apiDown := web, api3
	down.Count, apiDown.Count = 1, 1
	f.setUnits(down, apiDown)
	f.waitSettled(30 * time.Second)
	keys, _ := f.slotKeys("web")
	if p := keys[1]; p == nil || p.Session != "" || !strings.Contains(string(p.Value), `"released"`) {
		t.Errorf("web/1 after scaling down: %+v", p)
	}
	up, apiUp := web, api3
	up.Count, apiUp.Count = 4, 4
	f.setUnits(up, apiUp)
	f.waitSettled(30 * time.Second)
	f.checkNoOverlap()
}

// A claim Consul applied whose answer was lost (late: after the index
// showed it, as a timeout would be): the executor reports it lost, the
// agent forgets it, finds the stray in the index and releases it, and the
// slot ends up held and run. The slot key's LockIndex proves the release:
// locked, unlocked, locked again.
func TestLostClaimAnswerReleasesStray(t *testing.T) {
	var (
		mu   sync.Mutex
		lost []agent.SlotID
	)
	f := newFleet(t, fleetOptions{nodes: 3, faults: func(int) executor.Faults {
		var once atomic.Bool
		return executor.Faults{LoseClaimAnswer: func(id agent.SlotID) bool {
			if !once.CompareAndSwap(false, true) {
				return false
			}
			mu.Lock()
			lost = append(lost, id)
			mu.Unlock()
			// The answer is lost late: the index (asked at least once
			// per agent.IdlePace) shows the hold before the loss is
			// reported.
			time.Sleep(agent.IdlePace + 500*time.Millisecond)
			return true
		}}
	}}, web)
	f.waitSettled(30 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(lost) == 0 {
		t.Fatal("no claim answer was lost: the test proves nothing")
	}
	keys, err := f.slotKeys("web")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range lost {
		if p := keys[id.K]; p == nil || p.LockIndex < 2 {
			t.Errorf("%s, whose claim answer was lost, was not released and claimed again: %+v", id, p)
		}
	}
	// Every index entry names the slot's holder.
	names, _, err := f.c.KV().Keys(agent.IndexPrefix("web"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range agent.IndexView("web", 1, names).Holders {
		if h := f.holderOf(agent.SlotID{Unit: "web", K: k}); h.name != n {
			t.Errorf("index says web/%d is %s's, the key says %s's", k, n, h.name)
		}
	}
	t.Logf("claim answers lost: %v", lost)
	f.checkNoOverlap()
}

// successorPasses stands for a drain's wait on Consul's health (the fake
// instances register nothing): the slot's new instance passes once it
// runs on another node than the one giving it up (healthyAfter later).
func (f *fleet) successorPasses(ctx context.Context, slot agent.SlotID, _ []string) {
	for ctx.Err() == nil {
		keys, err := f.slotKeys(slot.Unit)
		if err == nil {
			if p := keys[slot.K]; p != nil && p.Session != "" {
				if n, err := f.nodeOf(p.Session); err == nil {
					if _, ok := f.rec.runningOf(slot)[n]; ok {
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
