// Package sim is the fleet's deterministic simulator (CLUSTER.md section
// 12; FoundationDB's simulation, TigerBeetle's VOPR, etcd's rafttest): many
// nodes, each running the real step machine (fleet/agent), over the model
// of Consul (fleet/consulmodel), on simulated time, with one seeded
// scheduler. Faults are injected from the seed; invariants are checked
// after every event; the same seed gives the same trace, byte for byte
// (Result.Trace is its hash).
//
// The scheduler is a queue of events ordered by (time, sequence). Every
// call a node makes to Consul travels for a latency drawn from the seed,
// is applied to the model when it arrives (if the node can reach the
// servers then), and its answer travels back the same way. Blocking
// queries are modelled by their effect: after a write, every node
// watching a prefix whose index moved gets one answer (coalesced while
// one is on its way, and no sooner than watchEvery after that watch's
// last answer), computed when it arrives; its size in Consul's JSON is
// counted as the bytes Consul serves. Nodes watch each unit's index
// (agent.IndexPrefix, key names only; at agent.IdlePace where the agent is
// idle in the unit), each unit's vacancy key (agent.VacancyKey, moved by
// releases: its answer brings the index at once) and the failing
// instances of the mariposa service; rankings are shared among the nodes
// that hold the same two views (each real node computes its own).
//
// Failure detection is not simulated packet by packet: a lost node's
// serfHealth turns critical after Consul's gossip detection time for N
// nodes (a probe, up to 1.5 s, then Lifeguard's suspicion timeout at its
// floor, 4 x log10(N) probe intervals of 1 s, plus up to 1 s for the
// confirmations), and mariposa's liveness TTL check 3 s after mariposa
// stops answering.
package sim

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/consulmodel"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/holdrule"
	"github.com/mariposa-sh/mariposa/schema"
)

// Config is one simulation.
type Config struct {
	Seed         uint64
	Nodes        int
	Units        int
	SlotsPerUnit int
	// ExclusiveEvery: every n-th unit is exclusive (0: none).
	ExclusiveEvery int
	LockDelay      time.Duration // 1 s
	// Detect is the agents' failure-detection floor D (internal/holdrule;
	// default its DefaultDetect, which the simulated detection never
	// undercuts: 4 x max(1, log10 N) s and more); negative: 0, the strict
	// rule.
	Detect time.Duration
	// Election, when set, is the whole scenario: the Consul leader is lost
	// at LossAt for this long, and nothing else happens (no node lost).
	Election time.Duration
	Step     time.Duration // placement.DefaultStep
	// LoseFraction of the nodes is lost at once at LossAt (0.1).
	LoseFraction float64
	LossAt       time.Duration
	// Chaos adds faults drawn from the seed around the loss: mariposa
	// killed and restarted, a node cut from the servers and healed, claim
	// answers lost.
	Chaos bool
	// Settle: how long after the last fault the fleet must be back at
	// full count.
	Settle time.Duration
	// Faults break the agent on purpose (mutation checks); ExecFaults
	// break the executor.
	Faults     agent.Faults
	ExecFaults ExecFaults
	// Deploys: an operator deploys from the seed (deploy.go), and the
	// deployments' invariants are checked.
	Deploys bool
	// Ops adds the operator's pause, resume and drain, and the takeover
	// budget, to a run; Storm is the storm brake's scenario (ops.go).
	Ops, Storm bool
	// Volumes: every exclusive unit has a volume that moves with its
	// slots, and the volumes' invariants are checked (volumes.go).
	Volumes bool
	// Buckets: the executor's bound on a node's watches (fleet/executor's
	// Config.Buckets; buckets.go): the bytes are charged as its bucketed
	// watches serve them. 0: a unit's watches of its own.
	Buckets int
	// Placement: some units have a constraint on the nodes' meta, some
	// reserve resources that some nodes have no room for, and no
	// instance may start on a node they exclude (place.go).
	Placement bool
	// NodeLostAfter: every third unit (from the second) holds a slot
	// lost with its node that long for the node (reschedule's
	// node_lost_after; fleet/agent/stopafter.go): no other node may start
	// it sooner after the loss, and the full count is due that much later.
	NodeLostAfter time.Duration
	// Trace, when set, receives every line of the trace.
	Trace func(line string)
}

// ExecFaults break the executor on purpose, for mutation checks.
type ExecFaults struct {
	// WriteHeldKey: a holder writes its status into the held lock key
	// after its instance starts (the fencing token moves).
	WriteHeldKey bool
	// ReleaseBeforeStop: a release unlocks the key before the instance
	// has exited.
	ReleaseBeforeStop bool
	// NoDeployCAS: the judge's write of a deployment record does not
	// check the record's index; NoAudit: deployment decisions are written
	// without their audit record; PublishInHeldKey: a holder's status
	// write also writes its held lock key (the fencing token moves).
	NoDeployCAS, NoAudit, PublishInHeldKey bool
	// DropProgressFail: the judge's moves that fail a deployment on
	// progress_deadline are refused, never applied.
	DropProgressFail bool
	// NoBudgetCAS: a takeover's claim sets control/takeovers instead of
	// compare-and-setting it.
	NoBudgetCAS bool
	// NoFailedCheck: a claim does not check the slot's failed mark.
	NoFailedCheck bool
	// NoDelayGuard: a claim neither checks nor deletes the reschedule
	// delay's guard (fleet/agent's DelayGuardKey; resched.go).
	NoDelayGuard bool
	// NoPlacement: the agents rank by count and max_per_node alone, their
	// units' constraints and resources dropped (place.go).
	NoPlacement bool
	// NoLiftedCheck: a brake's write does not check control/storm-lifted
	// is as its node last saw it (ops.go).
	NoLiftedCheck bool
}

func (c *Config) defaults() {
	c.opsDefaults()
	if c.Nodes <= 0 {
		c.Nodes = 50
	}
	if c.Units <= 0 {
		c.Units = 10
	}
	if c.SlotsPerUnit <= 0 {
		c.SlotsPerUnit = 10
	}
	if c.SlotsPerUnit > c.Nodes {
		c.SlotsPerUnit = c.Nodes
	}
	if c.LockDelay <= 0 {
		c.LockDelay = time.Second
	}
	if c.Step <= 0 {
		c.Step = placement.DefaultStep
	}
	if c.LoseFraction == 0 {
		c.LoseFraction = 0.1
	}
	if c.LossAt <= 0 {
		c.LossAt = 5 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 60 * time.Second
	}
	switch {
	case c.Detect == 0:
		c.Detect = holdrule.DefaultDetect
	case c.Detect < 0:
		c.Detect = 0
	}
}

// Result is what a simulation found and measured.
type Result struct {
	Seed       uint64
	Violations []string
	// Recovery is, per slot its lost node held (Lost of them), the
	// simulated time from the loss to its instance running elsewhere.
	Recovery []time.Duration
	Lost     int
	// Vacancies: every time a slot below its count was left without a
	// running instance (the loss, and every other fault's).
	Vacancies int
	// From the placed start to the end: the fleet's write transactions
	// (refused ones included), its Raft writes (the instances' own
	// fenced writes left out), slot key changes and the bytes Consul
	// served to the fleet's watchers.
	Txns, RaftWrites, SlotChanges, BytesServed uint64
	// BytesServed split by watch: the units' indexes (IndexBytes) and the
	// health of the failing instances (HealthBytes); IndexAnswers and
	// HealthAnswers count the answers.
	IndexBytes, HealthBytes, IndexAnswers, HealthAnswers uint64
	// Steps and StepTime: every agent step, and the wall time they took.
	Steps    uint64
	StepTime time.Duration
	// Rankings: placement.Assign runs (one per unit and pair of views,
	// shared by the nodes that hold that pair).
	Rankings uint64
	Events   uint64
	// Kills: instances the agents killed (Stop with Kill) for a hold they
	// could not confirm or lost.
	Kills uint64
	Trace string // sha256 of the trace
	End   time.Duration
	// Deploys: how the deployments went (Config.Deploys).
	Deploys DeployStats
	// Ops: what the operator's controls and the brakes did (ops.go).
	Ops OpsResult
	// Volumes: handoffs and restores (volumes.go).
	Volumes VolumeStats
}

// Percentile of the recovery times (p in [0, 1]).
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Recovery) == 0 {
		return 0
	}
	s := slices.Clone(r.Recovery)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// queue is a 4-ary min-heap of events by (at, seq), held by value: a
// 1,000-node run pushes and pops millions of them.
type queue []event

func (e *event) before(o *event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

func (q queue) peek() *event { return &q[0] }
func (q queue) empty() bool  { return len(q) == 0 }
func newQueue() *queue       { return &queue{} }

func (q *queue) push(e event) {
	h := append(*q, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *queue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	h = h[:n]
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if h[j].before(&h[m]) {
				m = j
			}
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

type instance struct {
	node    *node
	slot    agent.SlotID
	index   uint64
	session string
	running bool
	version string
	// reclaimed: its node claimed its slot again with a new session
	// while it ran (an orphan's reclaim, fleet/agent/stopafter.go): it
	// runs on with the token it started with, and its next update starts
	// it with the new one.
	reclaimed bool
	// spans: when the node's supervisor said it healthy and, once it
	// broke, until when (health.go); broken: it is not healthy now.
	spans  []span
	broken bool
}

type node struct {
	name  string
	agent *agent.Agent
	alive bool // the machine (and its Consul agent) is up
	up    bool // mariposa runs
	cut   bool // cut off from the servers
	// minority: its server is on the minority side of a partition: it
	// answers, knowing no leader, while the majority goes on.
	minority bool
	gen      int // mariposa's incarnation: answers to an older one are dropped
	sess     string
	// toldLost: the session whose loss its agent was told (once).
	toldLost string
	inst     map[agent.SlotID]*instance
	// starting: starts on their way, by slot; a stop cancels one.
	starting map[agent.SlotID]uint64
	startSeq uint64
	// w: the watch of each unit's index, by the unit's place in
	// Sim.units.
	w         []watch
	nodesIdx  uint64
	nodesPend bool
	// lastNodes: when the nodes' watch last answered (lastNodesOK: it
	// has).
	lastNodes   time.Duration
	lastNodesOK bool
	wakeAt      time.Duration
	// bucketAt: when each bucket's index answer was last charged
	// (buckets.go).
	bucketAt []time.Duration
}

// watch is a node's watch of one unit's index.
type watch struct {
	index   uint64 // the index last answered
	pending bool   // an answer is on its way
	// pendTok: the answer on its way; a Refresh sends a new one sooner
	// and the older is dropped.
	pendTok uint64
	// last: when it last answered (lastOK: it has): it is asked again no
	// sooner than watchEvery later.
	last   time.Duration
	lastOK bool
}

func (n *node) reachable() bool { return n.alive && n.up && !n.cut }

// watched: blocking queries reach it (they need a leader).
func (n *node) watched() bool { return n.reachable() && !n.minority }

type cachedSlots struct {
	idx   uint64
	view  *agent.SlotsView
	bytes uint64
}

// Sim is one run.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	now   time.Duration
	q     *queue
	seq   uint64
	store *consulmodel.Store
	nodes []*node
	units []agent.Unit
	byU   map[string]agent.Unit
	unitI map[string]int // a unit's place in units

	slotsCache []*cachedSlots // by unit's place; nil: to be read
	nodesCache *agent.NodesView
	nodesBytes uint64
	ranks      map[string][]rankEntry

	// running instances per slot
	running map[agent.SlotID][]*instance

	res    Result
	trace  hash.Hash
	lostAt map[agent.SlotID]time.Duration // vacated by the loss: since
	// checkGen: per node and check, the changes asked for (setCheck).
	checkGen map[string]int
	lossDone bool
	counting bool
	// Raft writes of the instances' own fenced writes, which are not the
	// fleet's; the Raft writes of the placed start.
	fencedRaft, raftFrom uint64
	// aloneAudits: the transactions of the decisions' records written
	// alone (agent.Audits), counted, not sent (a record riding in a
	// transaction costs none).
	aloneAudits uint64
	// dep: deployments (deploy.go), when Config.Deploys.
	dep *simDeploy
	ops *simOps
	vol *simVolumes // nil: no volumes
	plc *simPlace   // nil: no placement beyond max_per_node
	rs  *simResched // nil: no unit reschedules (resched.go)
}

type rankEntry struct {
	key rankKey
	a   agent.Ranking
}

type rankKey struct {
	unit               string
	count              int
	slotsIdx, nodesIdx uint64
	ext                string // agent.Extra.Key
}

// Run runs one simulation to its end and returns what it found.
func Run(cfg Config) Result {
	cfg.defaults()
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x73696d)), q: newQueue(), store: consulmodel.New(),
		unitI: map[string]int{}, ranks: map[string][]rankEntry{}, running: map[agent.SlotID][]*instance{},
		trace: sha256.New(), lostAt: map[agent.SlotID]time.Duration{}, byU: map[string]agent.Unit{}, checkGen: map[string]int{}}
	s.res.Seed = cfg.Seed
	s.opsInit()
	s.setup()
	s.opsWarm()
	s.faults()
	end := cfg.LossAt + cfg.Settle + cfg.NodeLostAfter
	var same int
	for !s.q.empty() && s.q.peek().at <= end {
		e := s.q.pop()
		if e.at == s.now {
			same++
		} else {
			same = 0
		}
		if same > 1_000_000 {
			s.violate("livelock: a million events at one instant")
			break
		}
		s.now = e.at
		e.fn()
		s.res.Events++

	}
	s.now = end
	s.finalCheck()
	s.deployFinal()
	s.res.End = s.now
	s.res.Trace = fmt.Sprintf("%x", s.trace.Sum(nil))[:16]
	return s.res
}

func (s *Sim) wall() time.Time { return epoch.Add(s.now) }

func (s *Sim) at(d time.Duration, fn func()) {
	s.seq++
	s.q.push(event{at: s.now + d, seq: s.seq, fn: fn})
}

// chaosWindow: the faults of a chaos run happen from the start until this
// long after the loss; then the fleet must settle.
const chaosWindow = 20 * time.Second

// latency is one way of a call or an answer: 0.5-2 ms, and in a chaos
// run's window one in 30 is slow (50-500 ms: a busy server, a
// retransmission), so answers overtake each other.
func (s *Sim) latency() time.Duration {
	d := 500*time.Microsecond + time.Duration(s.rng.Int64N(int64(1500*time.Microsecond)))
	if s.cfg.Chaos && s.now < s.cfg.LossAt+chaosWindow && s.rng.IntN(30) == 0 {
		d += 50*time.Millisecond + time.Duration(s.rng.Int64N(int64(450*time.Millisecond)))
	}
	return d
}

func (s *Sim) note(format string, args ...any) {
	line := fmt.Sprintf("%10.6f %s", s.now.Seconds(), fmt.Sprintf(format, args...))
	s.trace.Write([]byte(line))
	s.trace.Write([]byte{'\n'})
	if s.cfg.Trace != nil {
		s.cfg.Trace(line)
	}
}

func (s *Sim) violate(format string, args ...any) {
	msg := fmt.Sprintf("seed %d at %.3fs: %s", s.cfg.Seed, s.now.Seconds(), fmt.Sprintf(format, args...))
	s.note("VIOLATION %s", msg)
	if len(s.res.Violations) < 20 {
		s.res.Violations = append(s.res.Violations, msg)
	}
}

func slotValue(node string, id agent.SlotID, state string) []byte {
	// About the size of the fleet's slot value (cluster.SlotValue).
	b, _ := json.Marshal(map[string]any{"node": node, "n": 3, "version": "v1-3f2a9c1b", "state": state,
		"since": "2026-01-01T00:00:00Z", "deployment": "d-" + id.Unit, "reschedules": []any{}})
	return b
}

// claimOps lock the slot key and its index entry with the session and
// clear the slot's released mark, all or nothing: the lock on the slot key
// is what makes one holder; the index is what the nodes watch.
func claimOps(id agent.SlotID, node, session, state string) api.KVTxnOps {
	return api.KVTxnOps{
		{Verb: api.KVLock, Key: id.Key(), Session: session, Value: slotValue(node, id, state)},
		{Verb: api.KVLock, Key: id.IndexKey(node), Session: session},
		{Verb: api.KVDelete, Key: id.ReleasedKey()},
		{Verb: api.KVSet, Key: id.ClaimedKey(), Value: []byte(node)},
	}
}

// releaseOps unlock the slot key, delete its index entry, mark it
// released and move the unit's vacancy key (agent.VacancyKey: what idle
// nodes hear at once), all or nothing (refused unless the session holds
// the key).
func releaseOps(id agent.SlotID, node, session string, at time.Time) api.KVTxnOps {
	return api.KVTxnOps{
		{Verb: api.KVUnlock, Key: id.Key(), Session: session, Value: slotValue(node, id, "released")},
		{Verb: api.KVDelete, Key: id.IndexKey(node)},
		{Verb: api.KVSet, Key: id.ReleasedKey()},
		{Verb: api.KVSet, Key: agent.VacancyKey(id.Unit), Value: []byte(id.String() + " " + node + " " + at.Format(time.RFC3339Nano))},
	}
}

func (s *Sim) setup() {
	c := s.cfg
	for i := range c.Units {
		u := agent.Unit{Name: fmt.Sprintf("u%03d", i), Count: c.SlotsPerUnit, MaxPerNode: 1,
			Exclusive: c.ExclusiveEvery > 0 && i%c.ExclusiveEvery == 0}
		u.Volumes = c.Volumes && u.Exclusive
		s.units = append(s.units, u)
		s.byU[u.Name] = u
		s.unitI[u.Name] = i
	}
	s.slotsCache = make([]*cachedSlots, len(s.units))
	excl := map[string]bool{}
	for _, u := range s.units {
		excl[u.Name] = u.Exclusive
	}
	for i := range c.Nodes {
		n := &node{name: fmt.Sprintf("n%04d", i), alive: true, up: true, inst: map[agent.SlotID]*instance{}, starting: map[agent.SlotID]uint64{},
			w: make([]watch, len(s.units))}
		s.nodes = append(s.nodes, n)
		must(s.store.RegisterNode(n.name, "10.0.0.1"))
		must(s.store.RegisterService(consulmodel.ServiceInstance{Node: n.name, ID: "mariposa-" + n.name, Service: "mariposa"},
			map[string]string{aliveCheck(n.name): api.HealthPassing}))
	}
	s.placeInit()
	s.lostAfterInit()
	s.reschedSetup()
	// A placed fleet: slot k of unit i on node (i*count + k) mod N (of
	// the nodes its placement allows: warmNode).
	held := map[string]map[agent.SlotID]uint64{}
	for _, n := range s.nodes {
		id, err := s.store.CreateSession(s.wall(), consulmodel.SessionSpec{Node: n.name, LockDelay: c.LockDelay,
			Behavior: api.SessionBehaviorDelete, Checks: []string{"serfHealth", aliveCheck(n.name)}})
		must(err)
		n.sess = id
		held[n.name] = map[agent.SlotID]uint64{}
	}
	for i, u := range s.units {
		for k := range u.Count {
			n := s.warmNode(i, u, k)
			id := agent.SlotID{Unit: u.Name, K: k}
			r, err := s.store.KVTxn(s.wall(), claimOps(id, n.name, n.sess, "running"))
			must(err)
			if !r.OK {
				panic(fmt.Sprintf("warm claim of %s: %v", id, r.Errors))
			}
			held[n.name][id] = r.Results[0].ModifyIndex
			inst := &instance{node: n, slot: id, index: r.Results[0].ModifyIndex, session: n.sess, running: true}
			n.inst[id] = inst
			s.running[id] = append(s.running[id], inst)
		}
	}
	if c.Volumes {
		s.volumesInit()
	}
	s.deploySetup()
	s.store.TakeCommits()
	s.counting = true
	s.raftFrom = s.store.Stats().RaftWrites
	for _, n := range s.nodes {
		s.startAgent(n, &agent.Warm{Session: n.sess, At: s.wall(), Held: held[n.name], Exclusive: excl})
	}
	// Fenced writes: every running exclusive instance writes with its
	// token every second.
	s.at(time.Second, s.fencedWrites)
}

func aliveCheck(node string) string { return "mariposa-" + node + ":alive" }

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// rank shares one ranking among the nodes that have the same views: nodes
// get a new answer a few milliseconds apart, so a few views of a unit are
// current at once; the last few of each unit are kept (dropping one costs
// only CPU).
func (s *Sim) rank(u agent.Unit, v *agent.SlotsView, nodes *agent.NodesView, free []int, x agent.Extra) agent.Ranking {
	key := rankKey{unit: u.Name, count: u.Count, slotsIdx: v.Index, nodesIdx: nodes.Index, ext: x.Key}
	memo := s.ranks[u.Name]
	for _, m := range memo {
		if m.key == key {
			return m.a
		}
	}
	if s.cfg.ExecFaults.NoPlacement {
		u.Placement, u.Resources = nil, placement.Reservation{}
	}
	a := agent.DefaultRankWith(u, v, nodes, free, x)
	s.res.Rankings++
	if len(memo) >= rankMemo {
		memo = memo[1:]
	}
	s.ranks[u.Name] = append(memo, rankEntry{key, a})
	return a
}

// rankMemo: the rankings kept per unit.
const rankMemo = 8

func (s *Sim) startAgent(n *node, warm *agent.Warm) {
	seed := s.cfg.Seed*1_000_003 + uint64(len(n.name)) + uint64(n.gen)*7919
	for _, ch := range n.name {
		seed = seed*31 + uint64(ch)
	}
	n.agent = agent.New(agent.Config{Node: n.name, Step: s.cfg.Step, LockDelay: s.cfg.LockDelay, Seed: seed, Detect: s.cfg.Detect,
		RankWith: s.rank, Faults: s.cfg.Faults, Warm: warm, Control: s.ops.on})
	units := slices.Clone(s.units)
	s.step(n, agent.UnitsAnswer{Units: units})
	s.deliverNodes(n)
	s.deliverControl(n)
	for i := range s.units {
		s.deliverSlots(n, i)
	}
	s.deployStart(n, warm != nil)
}

// step runs one input through a node's agent and carries out its actions.
func (s *Sim) step(n *node, in any) {
	if !n.up || !n.alive {
		return
	}
	t0 := time.Now()
	acts := n.agent.Step(s.wall(), in)
	s.res.StepTime += time.Since(t0)
	s.res.Steps++
	s.checkDecisions(n, in, acts)
	if _, alone := agent.Audits(acts); len(alone) > 0 && s.counting && n.reachable() && s.store.HasLeader() && !n.minority {
		// Written as fleet/executor's writeAudits does, 64 a transaction,
		// when the node reaches a leader (not sent: no draw of the
		// scheduler's randomness, no change of the store's indexes).
		t := uint64(len(alone)+63) / 64
		s.res.Txns += t
		s.aloneAudits += t
	}
	for _, a := range acts {
		s.act(n, a)
	}
}

func (s *Sim) act(n *node, a any) {
	gen := n.gen
	switch a := a.(type) {
	case agent.CreateSession:
		s.rpc(n, func() any {
			id, err := s.store.CreateSession(s.wall(), consulmodel.SessionSpec{Node: n.name, LockDelay: s.cfg.LockDelay,
				Behavior: api.SessionBehaviorDelete, Checks: []string{"serfHealth", aliveCheck(n.name)}})
			if err == nil {
				n.sess = id
			}
			s.note("%s session %s %v", n.name, id, err)
			return agent.SessionCreated{ID: id, Err: err}
		}, func() any { return agent.SessionCreated{Err: fmt.Errorf("no answer")} })
	case agent.Claim:
		s.note("%s claim %s", n.name, a.Slot)
		lose := s.cfg.Chaos && s.rng.IntN(50) == 0
		s.rpc(n, func() any {
			from, takeover := s.takeoverTruth(a.Slot)
			ops := s.claimOpsFor(n, a)
			r, err := s.store.KVTxn(s.wall(), ops)
			s.countTxn(r, err)
			var notFresh, budget bool
			if err == nil && !r.OK {
				notFresh, budget = a.Refusal(len(ops), failedOps(r.Errors))
				if a.FailedRefusal(len(ops), failedOps(r.Errors)) {
					return agent.ClaimDone{Slot: a.Slot, Failed: true}
				}
			}
			if notFresh {
				return agent.ClaimDone{Slot: a.Slot, NotFresh: true}
			}
			if budget {
				s.res.Ops.BudgetRefused++
				return agent.ClaimDone{Slot: a.Slot, Budget: true}
			}
			if err != nil || !r.OK {
				delay := err == nil && len(r.Errors) > 0 && strings.Contains(r.Errors[0].What, "lock delay")
				if err == nil && len(r.Errors) > 0 && strings.Contains(r.Errors[0].What, "invalid session") {
					// As the executor answers it: refused, not taken (the
					// view is not stale); the session's loss comes from
					// its watch (watchSessions).
					return agent.ClaimDone{Slot: a.Slot}
				}
				return agent.ClaimDone{Slot: a.Slot, LockDelay: delay, Taken: err == nil && !delay}
			}
			s.claimApplied(n, a.Slot, from, takeover)
			if inst := n.inst[a.Slot]; inst != nil {
				inst.reclaimed = true
			}
			s.checkMaxPerNode(a.Slot.Unit)
			if lose {
				s.note("%s claim %s applied, answer lost", n.name, a.Slot)
				return nil
			}
			return agent.ClaimDone{Slot: a.Slot, OK: true, Index: r.Results[0].ModifyIndex}
		}, func() any { return agent.ClaimDone{Slot: a.Slot, Lost: true} })
	case agent.Release:
		release := func() {
			s.rpc(n, func() any {
				token := s.volReleasing(a.Slot)
				r, err := s.store.KVTxn(s.wall(), append(append(s.releaseOpsWith(releaseOps(a.Slot, n.name, a.Session, s.wall()), a.Slot), failOpsFor(a)...), rescheduleOpsFor(n.name, a)...))
				s.countTxn(r, err)
				if err == nil && r.OK {
					s.rescheduleApplied(n, a)
					s.volReleased(n, a.Slot, token)
				}
				return agent.ReleaseDone{Slot: a.Slot, OK: err == nil && r.OK}
			}, func() any { return agent.ReleaseDone{Slot: a.Slot} })
		}
		release()
	case agent.Confirm:
		sent := s.wall()
		s.rpc(n, func() any {
			var ops api.KVTxnOps
			for _, id := range a.Slots {
				ops = append(ops, &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: id.Key()})
			}
			r, err := s.store.KVTxn(s.wall(), ops)
			if err != nil {
				return agent.ConfirmDone{Sent: sent, Err: err}
			}
			held := map[agent.SlotID]bool{}
			for i, id := range a.Slots {
				held[id] = r.Results[i].Session == a.Session
			}
			return agent.ConfirmDone{Sent: sent, Held: held}
		}, func() any { return agent.ConfirmDone{Sent: sent, Err: fmt.Errorf("no answer")} })
	case agent.Start:
		s.note("%s start %s index %d", n.name, a.Slot, a.Index)
		n.startSeq++
		tok := n.startSeq
		n.starting[a.Slot] = tok
		s.at(50*time.Millisecond, func() {
			if n.gen != gen || !n.alive || n.starting[a.Slot] != tok {
				return
			}
			delete(n.starting, a.Slot)
			s.startInstance(n, a)
			s.afterStart(n, a.Slot, a.Version)
			if s.cfg.ExecFaults.WriteHeldKey {
				s.rpc(n, func() any {
					r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session},
						{Verb: api.KVSet, Key: a.Slot.Key(), Value: slotValue(n.name, a.Slot, "healthy")}})
					s.countTxn(r, err)
					return nil
				}, func() any { return nil })
			}
			s.step(n, agent.InstanceStarted{Slot: a.Slot})
		})
	case agent.Stop:
		s.note("%s stop %s kill=%v", n.name, a.Slot, a.Kill)
		if a.Kill {
			s.res.Kills++
		}
		delete(n.starting, a.Slot)
		s.deployStopped(n, a.Slot)
		s.volStopped(n, a)
		d := 100 * time.Millisecond
		if a.Kill {
			d = 0
		}
		if s.cfg.ExecFaults.ReleaseBeforeStop && !a.Kill {
			if inst := n.inst[a.Slot]; inst != nil {
				sess := inst.session
				s.rpc(n, func() any {
					r, err := s.store.KVTxn(s.wall(), releaseOps(a.Slot, n.name, sess, s.wall()))
					s.countTxn(r, err)
					return nil
				}, func() any { return nil })
			}
		}
		stop := func() {
			if n.gen != gen {
				return
			}
			s.stopInstance(n, a.Slot)
			s.step(n, agent.InstanceExited{Slot: a.Slot})
		}
		if d == 0 {
			// SIGKILL: the process is gone before anything else happens.
			s.stopInstance(n, a.Slot)
			s.at(0, func() {
				if n.gen == gen {
					s.step(n, agent.InstanceExited{Slot: a.Slot})
				}
			})
		} else {
			s.at(d, stop)
		}
	case agent.Wake:
		at := a.At.Sub(epoch)
		if at < s.now {
			at = s.now
		}
		if n.wakeAt == at {
			return
		}
		n.wakeAt = at
		s.at(at-s.now, func() {
			if n.gen != gen || n.wakeAt != at {
				return
			}
			n.wakeAt = 0
			s.step(n, agent.Tick{})
		})
	case agent.Refresh:
		// The answers on their way at an idle pace come now (paced as
		// any other answer).
		for _, u := range a.Units {
			if i, ok := s.unitI[u]; ok && n.w[i].pending && n.watched() {
				s.answerSlots(n, i, s.promptIn(n, i))
			}
		}
	case agent.Record:
		s.note("%s record %s %s %s", n.name, a.Slot, a.Action, a.Reason)
	case agent.WriteBrake:
		s.writeBrake(n, a)
	case agent.PublishDrain:
		s.publishDrain(n, a)
	case agent.CheckHeld:
		s.checkHeld(n, a)
	case agent.AwaitSuccessor:
		// The model runs no instance's checks: the new holder's instance
		// passes after one round trip (a lost answer is the executor's
		// giving up: passing all the same).
		s.rpc(n, func() any { return agent.SuccessorPassing{Slot: a.Slot} },
			func() any { return agent.SuccessorPassing{Slot: a.Slot} })
	default:
		if !s.actDeploy(n, a) && !s.actVolumes(n, a) && !s.actQueue(n, a) {
			panic(fmt.Sprintf("sim: unknown action %T", a))
		}
	}
}

func (s *Sim) countTxn(r consulmodel.TxnResult, err error) {
	if s.counting && err == nil {
		s.res.Txns++
	}
	s.notify()
}

// rpc sends a call: apply runs at the servers when it arrives (if the node
// reaches them), and its answer comes back a latency later; a call or an
// answer that cannot travel ends in fail after a timeout. apply may
// return nil: no answer (it was lost after being applied).
func (s *Sim) rpc(n *node, apply func() any, fail func() any) {
	gen := n.gen
	s.at(s.latency(), func() {
		if n.gen != gen {
			return
		}
		if n.reachable() && (!s.store.HasLeader() || n.minority) {
			if c, ok := fail().(agent.ConfirmDone); ok {
				s.heldConfirm(n, gen, c, apply) // noleader.go
				return
			}
			// Its server answers, knowing no leader (an election, or a
			// minority side): the failure comes back as an answer.
			s.at(s.latency(), func() {
				if n.gen == gen {
					if ans := fail(); ans != nil {
						if c, ok := ans.(agent.ConfirmDone); ok {
							c.Err, c.NoLeader = consulmodel.ErrNoLeader, true
							ans = c
						}
						s.step(n, ans)
					}
				}
			})
			return
		}
		if !n.reachable() {
			s.at(time.Second, func() {
				if n.gen == gen {
					if ans := fail(); ans != nil {
						s.step(n, ans)
					}
				}
			})
			return
		}
		ans := apply()
		s.notify()
		if ans == nil {
			s.at(time.Second, func() {
				if n.gen == gen {
					if f := fail(); f != nil {
						s.step(n, f)
					}
				}
			})
			return
		}
		s.at(s.latency(), func() {
			if n.gen != gen {
				return
			}
			if !n.reachable() {
				s.at(time.Second, func() {
					if n.gen == gen {
						if f := fail(); f != nil {
							s.step(n, f)
						}
					}
				})
				return
			}
			s.step(n, ans)
		})
	})
}

// notify turns the model's new commits into blocking-query answers.
func (s *Sim) notify() {
	commits := s.store.TakeCommits()
	if len(commits) == 0 {
		return
	}
	s.deployCommits(commits)
	units := map[string]bool{}
	vacated := map[string]bool{}
	nodesChanged, ctlChanged := false, false
	for _, c := range commits {
		for _, k := range c.Keys {
			ctlChanged = ctlChanged || touchesControl(k)
			if rest, ok := strings.CutPrefix(k, agent.VacancyPrefix); ok {
				vacated[rest] = true
			}
			if rest, ok := strings.CutPrefix(k, "mariposa/held/"); ok {
				u, _, _ := strings.Cut(rest, "/")
				units[u] = true
				if i, ok := s.unitI[u]; ok {
					s.slotsCache[i] = nil
				}
			}
			if strings.HasPrefix(k, "mariposa/slots/") && s.counting {
				s.res.SlotChanges++
			}
		}
		if slices.Contains(c.Services, "mariposa") {
			nodesChanged = true
		}
	}
	for _, u := range sortedKeys(units) {
		ui, known := s.unitI[u]
		if !known {
			continue
		}
		for _, n := range s.nodes {
			if !n.watched() {
				continue
			}
			switch {
			case vacated[u]:
				// A release: the vacancy key's watch answers every node
				// (a small answer), and an idle node asks the index now.
				if s.counting {
					s.res.BytesServed += s.vacancyCharge(ui)
					s.res.IndexBytes += s.vacancyCharge(ui)
				}
				n.w[ui].pending = true
				s.answerSlots(n, ui, s.promptIn(n, ui))
			case !n.w[ui].pending:
				n.w[ui].pending = true
				s.answerSlots(n, ui, s.answerIn(n, ui))
			}
		}
	}
	if ctlChanged && s.ops.on {
		s.answerControl()
	}
	if nodesChanged {
		for _, n := range s.nodes {
			if n.watched() && !n.nodesPend {
				n.nodesPend = true
				gen := n.gen
				s.at(s.answerIn(n, -1), func() {
					if n.gen != gen {
						return
					}
					n.nodesPend = false
					s.deliverNodes(n)
				})
			}
		}
	}
}

// answerSlots sends n the answer of its watch on unit's index in d; an
// answer sent later (a Refresh) replaces it.
func (s *Sim) answerSlots(n *node, u int, d time.Duration) {
	n.w[u].pendTok++
	tok, gen := n.w[u].pendTok, n.gen
	s.at(d, func() {
		if n.gen != gen || n.w[u].pendTok != tok {
			return
		}
		n.w[u].pending = false
		s.deliverSlots(n, u)
	})
}

// idlePace: a node idle in a unit (agent.Idle: nothing held, no claim
// due soon) asks its index again no sooner than this after its last
// answer.
const idlePace = agent.IdlePace

// vacancyBytes: one answer of a unit's vacancy key (one KV entry in
// Consul's JSON).
const vacancyBytes = 200

// promptIn is answerIn at the prompt pace, idle or not.
func (s *Sim) promptIn(n *node, u int) time.Duration {
	d := s.latency()
	if last, ok := n.lastAns(u); ok && s.now+d < last+watchEvery {
		d = last + watchEvery - s.now
	}
	return d
}

// watchEvery: a node asks a watch again no sooner than this after its
// last answer (the executor's pacing of its blocking queries), so a burst
// of changes reaches each watcher as a few answers, not one per change.
const watchEvery = 100 * time.Millisecond

// answerIn is how long until a watch of n answers a change made now.
// u is the unit's place in s.units, -1 the nodes' watch.
func (s *Sim) answerIn(n *node, u int) time.Duration {
	d := s.latency()
	pace := watchEvery
	if u >= 0 && n.agent != nil && n.agent.Idle(s.units[u].Name, s.wall(), idlePace) {
		pace = idlePace
	}
	if last, ok := n.lastAns(u); ok && s.now+d < last+pace {
		d = last + pace - s.now
	}
	return d
}

// lastAns is when the watch of unit u (-1: the nodes) last answered.
func (n *node) lastAns(u int) (time.Duration, bool) {
	if u < 0 {
		return n.lastNodes, n.lastNodesOK
	}
	return n.w[u].last, n.w[u].lastOK
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// slotsView is the answer of a watch on the unit's index (?keys): the
// names of its entries. It is kept until a commit touches the index.
func (s *Sim) slotsView(u int) *cachedSlots {
	if c := s.slotsCache[u]; c != nil {
		return c
	}
	unit := s.units[u].Name
	keys, idx, _ := s.store.Keys(agent.IndexPrefix(unit), true)
	// Consul's JSON: a list of quoted names.
	bytes := uint64(2)
	for _, k := range keys {
		bytes += uint64(len(k)) + 3
	}
	c := &cachedSlots{idx: idx, view: agent.IndexView(unit, idx, keys), bytes: bytes}
	s.slotsCache[u] = c
	return c
}

func (s *Sim) deliverSlots(n *node, u int) {
	if !n.watched() {
		return
	}
	c := s.slotsView(u)
	w := &n.w[u]
	if c.idx <= w.index {
		return
	}
	w.index = c.idx
	w.last, w.lastOK = s.now, true
	if s.counting {
		b := s.indexCharge(n, u, c)
		s.res.BytesServed += b
		s.res.IndexBytes += b
		s.res.IndexAnswers++
	}
	s.step(n, agent.SlotsAnswer{View: c.view})
}

func (s *Sim) deliverNodes(n *node) {
	if !n.watched() {
		return
	}
	idx := s.store.ServiceIndex("mariposa")
	if s.nodesCache == nil || s.nodesCache.Index != idx {
		// The live nodes are the fleet's members (a watch on the
		// service's catalog entries, which changes only when a node
		// registers or leaves) less those a watch on the health of the
		// instances that are not passing names
		// (?filter="critical" in Checks.Status: Consul filters before
		// it answers). Only that answer moves when a node fails or comes
		// back, and it carries the failing instances alone.
		es, _, _ := s.store.HealthService("mariposa", false, true)
		var names, failingNames []string
		failing := 0
		for _, e := range es {
			if e.Status == api.HealthPassing {
				names = append(names, e.Instance.Node)
			} else {
				failing++
				failingNames = append(failingNames, e.Instance.Node)
			}
		}
		s.nodesCache = &agent.NodesView{Index: idx, Nodes: names, Failing: failingNames, Info: s.plc.infos()}
		// A health entry carries the node, the service and its checks:
		// about 1.5 KB an instance.
		s.nodesBytes = 2 + uint64(failing)*1500
	}
	if idx <= n.nodesIdx {
		return
	}
	n.nodesIdx = idx
	n.lastNodes, n.lastNodesOK = s.now, true
	if s.counting {
		s.res.BytesServed += s.nodesBytes
		s.res.HealthBytes += s.nodesBytes
		s.res.HealthAnswers++
	}
	s.step(n, agent.NodesAnswer{View: s.nodesCache})
}

func (s *Sim) startInstance(n *node, a agent.Start) {
	u := s.byU[a.Slot.Unit]
	for _, other := range s.running[a.Slot] {
		if other.running && other.node != n && u.Exclusive {
			s.violate("exclusive slot %s: %s starts while %s still runs it", a.Slot, n.name, other.node.name)
		}
	}
	s.volStart(n, a)
	s.placeCheck(n, a.Slot)
	inst := &instance{node: n, slot: a.Slot, index: a.Index, session: a.Session, running: true, version: a.Version}
	n.inst[a.Slot] = inst
	s.running[a.Slot] = append(s.running[a.Slot], inst)
	if t, ok := s.lostAt[a.Slot]; ok {
		if d := lostAfter(u); d > 0 && s.now-t < d {
			s.violate("slot %s lost with its node taken over by %s %v after the loss, before node_lost_after (%v)", a.Slot, n.name, s.now-t, d)
		}
		s.res.Recovery = append(s.res.Recovery, s.now-t)
		delete(s.lostAt, a.Slot)
	}
}

func (s *Sim) stopInstance(n *node, id agent.SlotID) {
	inst := n.inst[id]
	if inst == nil {
		return
	}
	inst.running = false
	delete(n.inst, id)
	s.running[id] = slices.DeleteFunc(s.running[id], func(i *instance) bool { return i == inst })
	if len(s.running[id]) == 0 && id.K < s.byU[id.Unit].Count {
		s.res.Vacancies++
	}
}

// fencedWrites: every running exclusive instance writes with its fencing
// token. One accepted from anyone but the key's holder, or one refused
// from the holder, is a violation.
func (s *Sim) fencedWrites() {
	for _, n := range s.nodes {
		if !n.reachable() || n.minority || !s.store.HasLeader() {
			continue
		}
		for _, id := range sortedSlots(n.inst) {
			inst := n.inst[id]
			if !s.byU[id.Unit].Exclusive || !inst.running {
				continue
			}
			r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{{Verb: api.KVCheckIndex, Key: id.Key(), Index: inst.index},
				{Verb: api.KVSet, Key: "mariposa/data/" + id.String(), Value: []byte(n.name)}})
			if err != nil {
				continue
			}
			s.fencedRaft++
			e, _, _ := s.store.Get(id.Key(), true)
			holder := e != nil && e.Session == inst.session
			switch {
			case r.OK && !holder:
				s.violate("fenced write of %s accepted from %s, which does not hold it", id, n.name)
			case !r.OK && holder:
				s.violate("fenced write of %s refused from its holder %s: the token moved (%s)", id, n.name, r.Errors[0].What)
			}
		}
	}
	s.notify()
	s.at(time.Second, s.fencedWrites)
}

func sortedSlots(m map[agent.SlotID]*instance) []agent.SlotID {
	ids := make([]agent.SlotID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Unit != ids[j].Unit {
			return ids[i].Unit < ids[j].Unit
		}
		return ids[i].K < ids[j].K
	})
	return ids
}

// checkMaxPerNode: no node's session holds more than max_per_node slots
// of the unit.
func (s *Sim) checkMaxPerNode(unit string) {
	es, _, _ := s.store.List("mariposa/slots/"+unit+"/", true)
	per := map[string]int{}
	for _, e := range es {
		if e.Session != "" {
			per[e.Session]++
		}
	}
	for sess, c := range per {
		if c > s.byU[unit].MaxPerNode {
			s.violate("unit %s: session %s holds %d slots, max_per_node %d", unit, sess, c, s.byU[unit].MaxPerNode)
		}
	}
}

// election: the servers lose their leader at at and elect one d later;
// meanwhile nothing commits and every node's server answers "no leader".
func (s *Sim) election(at, d time.Duration) {
	s.at(at, func() {
		s.note("election begins")
		s.store.LoseLeader()
		s.at(d, func() {
			s.note("leader elected after %v", d)
			s.store.ElectLeader(s.wall())
			s.notify()
		})
	})
}

// setCheck changes a check's status as the leader's reconcile does: at
// once with a leader, else as soon as one is elected. serfHealth is set
// then only if no later change of it was asked for meanwhile: the leader
// reconciles the serf membership as it is at that moment, so a node
// failed and back while there was no leader is not set critical after
// its heal (the model did, and the stale status stuck: a healed node whose
// serfHealth stayed critical for good, 6 nodes, ops seed 162). A liveness
// check's critical is still applied late: it stands in for the old
// session's TTL, which the model does not keep (a killed mariposa's
// session ends either way).
func (s *Sim) setCheck(node, check, status string) {
	key := node + "\x00" + check
	s.checkGen[key]++
	s.applyCheck(node, check, status, key, s.checkGen[key])
}

func (s *Sim) applyCheck(node, check, status, key string, gen int) {
	if check == "serfHealth" && s.checkGen[key] != gen {
		return // superseded: the leader reconciles the membership as it is
	}
	if !s.store.HasLeader() {
		s.at(100*time.Millisecond, func() { s.applyCheck(node, check, status, key, gen) })
		return
	}
	must(s.store.SetCheck(s.wall(), node, check, status))
	s.noteLive(node)
	if status != api.HealthPassing {
		s.watchSessions()
	}
	s.notify()
}

// watchSessions: the executor's watch of its session (fleet/executor's
// watchSession, a blocking query) tells each node that reaches the
// servers that its session is gone, a watch's answer after a check
// invalidated it. A node cut off, or on the minority side, learns it when
// healed. (Without it a node told nothing claimed with its dead session
// for good, refused every time: TestSimulationModelRegressions.)
func (s *Sim) watchSessions() {
	for _, n := range s.nodes {
		if n.sess == "" || !n.watched() {
			continue
		}
		if se, _ := s.store.SessionInfo(n.sess, true); se != nil {
			continue
		}
		sess, gen := n.sess, n.gen
		s.at(s.latency(), func() {
			if n.gen == gen && n.sess == sess && n.watched() {
				s.tellSessionLost(n)
			}
		})
	}
}

// tellSessionLost: n's agent learns its session is gone, once a session,
// if it is (by its watch, or at its heal when its renewal finds it gone).
func (s *Sim) tellSessionLost(n *node) {
	if se, _ := s.store.SessionInfo(n.sess, true); se != nil || n.toldLost == n.sess {
		return
	}
	s.note("%s session %s gone", n.name, n.sess)
	n.toldLost = n.sess
	s.step(n, agent.SessionLost{})
}

// detection is Consul's gossip failure detection for n nodes.
func (s *Sim) detection() time.Duration {
	probe := time.Duration(s.rng.Int64N(int64(1500 * time.Millisecond)))
	scale := math.Max(1, math.Log10(float64(len(s.nodes))))
	suspicion := time.Duration(4 * scale * float64(time.Second))
	return probe + suspicion + time.Duration(s.rng.Int64N(int64(time.Second)))
}

func (s *Sim) faults() {
	c := s.cfg
	defer s.operator()
	if c.Election > 0 {
		s.election(c.LossAt, c.Election)
		return
	}
	lose := int(math.Round(c.LoseFraction * float64(len(s.nodes))))
	order := s.rng.Perm(len(s.nodes))
	victims := order[:lose]
	s.at(c.LossAt, func() {
		s.lossDone = true
		for _, i := range victims {
			n := s.nodes[i]
			s.note("lose %s", n.name)
			for _, id := range sortedSlots(n.inst) {
				s.lostAt[id] = s.now
				s.res.Lost++
				s.stopInstance(n, id)
			}
			n.alive = false
			n.gen++
			s.at(s.detection(), func() {
				s.setCheck(n.name, "serfHealth", api.HealthCritical)
				s.note("serfHealth of %s critical", n.name)
				s.notify()
			})
		}
	})
	others := order[lose:]
	s.operatorFaults(others)
	if !c.Chaos {
		return
	}
	// mariposa killed on two nodes, restarted 5-10 s later.
	for j := 0; j < 2 && j < len(others); j++ {
		n := s.nodes[others[j]]
		at := c.LossAt + time.Duration(s.rng.Int64N(int64(5*time.Second)))
		back := time.Duration(5+s.rng.IntN(5)) * time.Second
		s.at(at, func() {
			s.note("kill mariposa on %s", n.name)
			for _, id := range sortedSlots(n.inst) {
				s.stopInstance(n, id) // the parent-death signal
			}
			n.up = false
			n.gen++
			s.at(3*time.Second, func() {
				s.setCheck(n.name, aliveCheck(n.name), api.HealthCritical)
				s.notify()
			})
			s.at(back, func() {
				s.note("restart mariposa on %s", n.name)
				n.up = true
				n.w, n.nodesIdx, n.nodesPend, n.lastNodes, n.lastNodesOK = make([]watch, len(s.units)), 0, false, 0, false
				s.setCheck(n.name, aliveCheck(n.name), api.HealthPassing)
				s.notify()
				s.startAgent(n, nil)
			})
		})
	}
	// An operator lowers an exclusive unit's count by one and raises it
	// again a moment later (a deploy and its revert): the last slot's
	// holder stops and releases it, and another node may claim it at once.
	for i := 0; c.ExclusiveEvery > 0 && i < 10; i++ {
		u := s.units[(i*c.ExclusiveEvery)%len(s.units)]
		at := time.Duration(s.rng.Int64N(int64(c.LossAt + chaosWindow - time.Second)))
		back := time.Duration(20+s.rng.IntN(60)) * time.Millisecond
		s.at(at, func() {
			s.note("count of %s %d -> %d", u.Name, u.Count, u.Count-1)
			s.setCount(u.Name, u.Count-1)
			s.at(back, func() {
				s.note("count of %s back to %d", u.Name, u.Count)
				s.setCount(u.Name, u.Count)
			})
		})
	}
	// A Consul leader election of 0.5-3 s, and one node whose server ends
	// up on the minority side of a partition for 6-12 s: it answers
	// "no leader" while the majority marks the node failed and takes its
	// slots.
	s.election(c.LossAt+time.Duration(s.rng.Int64N(int64(chaosWindow-3*time.Second))),
		500*time.Millisecond+time.Duration(s.rng.Int64N(int64(2500*time.Millisecond))))
	if len(others) > 3 {
		n := s.nodes[others[3]]
		at := c.LossAt + time.Duration(s.rng.Int64N(int64(chaosWindow/2)))
		dur := time.Duration(6+s.rng.IntN(7)) * time.Second
		s.at(at, func() {
			s.note("minority %s", n.name)
			n.minority = true
			s.at(s.detection(), func() {
				if n.minority { // healed first: the suspicion was refuted
					s.setCheck(n.name, "serfHealth", api.HealthCritical)
				}
			})
			s.at(dur, func() {
				s.note("heal %s", n.name)
				n.minority = false
				s.setCheck(n.name, "serfHealth", api.HealthPassing)
				s.tellSessionLost(n)
				for i := range n.w {
					n.w[i].index = 0
				}
				n.nodesIdx = 0
				s.deliverNodes(n)
				s.resumeControl(n)
				for i := range s.units {
					s.deliverSlots(n, i)
				}
			})
		})
	}
	// One node cut off from the servers for 5-15 s, then healed.
	if len(others) > 2 {
		n := s.nodes[others[2]]
		at := c.LossAt + time.Duration(s.rng.Int64N(int64(3*time.Second)))
		dur := time.Duration(5+s.rng.IntN(10)) * time.Second
		s.at(at, func() {
			s.note("cut %s", n.name)
			n.cut = true
			s.at(s.detection(), func() {
				if !n.cut { // healed first: the suspicion was refuted
					return
				}
				s.setCheck(n.name, "serfHealth", api.HealthCritical)
				s.notify()
			})
			s.at(dur, func() {
				s.note("heal %s", n.name)
				n.cut = false
				s.setCheck(n.name, "serfHealth", api.HealthPassing)
				s.notify()
				// The executor finds its session gone when it renews.
				s.tellSessionLost(n)
				for i := range n.w {
					n.w[i].index = 0
				}
				n.nodesIdx = 0
				s.deliverNodes(n)
				s.resumeControl(n)
				for i := range s.units {
					s.deliverSlots(n, i)
				}
			})
		})
	}
}

// setCount changes a unit's count, as a deployment does: every node
// learns it a latency later.
func (s *Sim) setCount(unit string, count int) {
	for i := range s.units {
		if s.units[i].Name == unit {
			s.units[i].Count = count
		}
	}
	for _, n := range s.nodes {
		if !n.reachable() {
			continue
		}
		gen := n.gen
		s.at(s.latency(), func() {
			// What the watch's answer holds when it comes: the units as
			// they are then. Each answer with the units of its change
			// let a change made 20 ms after another arrive first, and a
			// node keep the earlier count for good (one slot vacant for
			// good: its best-placed node did not count it).
			if n.gen == gen {
				s.step(n, agent.UnitsAnswer{Units: slices.Clone(s.units)})
			}
		})
	}
}

// lostAfterInit gives every third unit (from the second) the
// configuration's node_lost_after.
func (s *Sim) lostAfterInit() {
	if s.cfg.NodeLostAfter <= 0 {
		return
	}
	for i, u := range s.units {
		if i%3 != 1 {
			continue
		}
		var p schema.Placement
		if u.Placement != nil {
			p = *u.Placement
		}
		p.Reschedule.NodeLostAfter = s.cfg.NodeLostAfter
		u.Placement = &p
		s.units[i] = u
		s.byU[u.Name] = u
	}
}

// lostAfter is u's node_lost_after.
func lostAfter(u agent.Unit) time.Duration {
	if u.Placement == nil {
		return 0
	}
	return u.Placement.Reschedule.NodeLostAfter
}

func (s *Sim) finalCheck() {
	// The brake engaged at the end holds the takeovers until an operator
	// resumes (ops.go checks it is obeyed, and that no brake comes back
	// for a storm a resume lifted): the slots it holds are noted.
	var brake string
	if e, _, _ := s.store.Get(cluster.StormKey, true); e != nil {
		brake = "held by the storm brake engaged at the end"
		if r, err := cluster.DecodeStormRecord(e.Value); err == nil {
			brake = fmt.Sprintf("held by the storm brake %s engaged at %v (%s)", r.Node, r.At.Sub(epoch), r.Reason())
		}
	}
	infeasible := map[string]bool{}
	for _, u := range s.units {
		// The nodes that may run it: live, not draining, and allowed by
		// its placement.
		live := 0
		for _, n := range s.nodes {
			if n.alive && n.up && !n.cut && !s.drained(n) && (s.plc == nil || s.plc.allows(u, n, 0) == "") {
				live++
			}
		}
		if live*u.MaxPerNode < u.Count {
			// Not feasible: no count to restore.
			infeasible[u.Name] = true
			continue
		}
		for k := range u.Count {
			id := agent.SlotID{Unit: u.Name, K: k}
			var live []string
			for _, inst := range s.running[id] {
				if inst.running && inst.node.alive {
					live = append(live, inst.node.name)
				}
			}
			switch {
			case len(live) == 0 && s.volWaiting(id):
				s.note("slot %s waits for its data on a holder that does not serve it", id)
			case len(live) == 0 && brake != "":
				s.note("slot %s has no running instance: %s", id, brake)
			case len(live) == 0:
				s.violate("slot %s has no running instance %v after the last fault", id, s.cfg.Settle+lostAfter(u))
			case u.Exclusive && len(live) > 1:
				s.violate("exclusive slot %s runs on %v", id, live)
			}
		}
	}
	for _, id := range sortedLost(s.lostAt) {
		if infeasible[id.Unit] {
			s.note("slot %s vacated by the loss never ran again: too few nodes left for its unit", id)
			continue
		}
		if brake != "" {
			s.note("slot %s vacated by the loss never ran again: %s", id, brake)
			continue
		}
		s.violate("slot %s vacated by the loss never ran again", id)
	}
	s.res.RaftWrites = s.store.Stats().RaftWrites - s.fencedRaft - s.raftFrom + s.aloneAudits
}

// drained: n is draining (an operator's drain in an Ops run).
func (s *Sim) drained(n *node) bool {
	if s.ops == nil {
		return false
	}
	_, ok := s.ops.drainSince[n.name]
	return ok
}

func sortedLost(m map[agent.SlotID]time.Duration) []agent.SlotID {
	ids := make([]agent.SlotID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids
}
