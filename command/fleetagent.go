package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// fleetEngineEnv once chose what ran `mariposa run -cluster`'s part in the
// fleet ("fleet": an older engine, since removed); the fleet's step
// machine (fleet/agent under fleet/executor) is the only engine. The
// variable is no longer read, but never silently ignored: run -cluster
// logs fleetEngineWarning when it is set.
const fleetEngineEnv = "MARIPOSA_FLEET_ENGINE"

// fleetEngineWarning is what run -cluster logs when fleetEngineEnv is set
// ("" when it is not): the step machine runs whatever it says.
func fleetEngineWarning() string {
	switch v := os.Getenv(fleetEngineEnv); v {
	case "":
		return ""
	case "fleet":
		return fleetEngineEnv + "=fleet: the cluster.Fleet engine was removed; running the fleet's step machine, the only engine (unset " + fleetEngineEnv + ")"
	default:
		return fmt.Sprintf("%s=%q is no longer read: the fleet's step machine is the only engine (unset %s)", fleetEngineEnv, v, fleetEngineEnv)
	}
}

// agentFleet is run -cluster's part in the fleet under the step machine:
// the executor decides which slots this node holds and tells agentFleet,
// its executor.Instances, to start and stop their instances; agentFleet
// hands the runner the instances of the held slots (Runner.ApplySlots)
// from one goroutine of its own, since Instances' methods must return at
// once and ApplySlots waits for the stops, and reports the starts and
// exits back to the executor. It feeds the executor the units: the node's
// own files' and every deployment's desired spec (deploy/<name>/desired):
// their counts and placement. What a held slot runs is its version's definition
// (agent.Start.Version, agent.Update.To): "<name>/<n>" is the unit in spec
// n of deployment name (cluster.ReadUnitAt, read once per version: specs
// are immutable), "" the unit's current definition. So a new desired spec
// moves no running instance by itself: the units' deployment records move
// them, slot by slot, as the step machine's rollout decides. From the
// runner's snapshots it tells the executor when a held slot's instance is
// healthy at its version (InstanceHealthy), for the judge.
type agentFleet struct {
	// apply is the runner's ApplySlots; ex the executor.
	apply func(context.Context, []supervisor.SlotInstance) (supervisor.ApplyResult, error)
	ex    agentExecutor
	log   hclog.Logger
	// readUnit reads a version's definition of a unit (cluster.ReadUnitAt);
	// snapshots are the runner's; volumes the node's store (nil: none).
	readUnit  func(version, unit string) (cluster.UnitSpec, error)
	snapshots func() []supervisor.Snapshot
	volumes   *volume.Store
	// watchKey follows a key until ctx ends: whether it exists, as last
	// read (watchKeyExists; a manual health mark).
	watchKey func(ctx context.Context, key string) func() bool

	kick chan struct{} // a change of held or units: apply

	mu     sync.Mutex
	local  []cluster.UnitSpec
	remote map[string]*cluster.Deployment // nil until the first answer
	units  map[string]cluster.UnitSpec    // by name: deployed, then local
	held   map[agent.SlotID]*agentSlot    // the instances to run
	// defs: the units' definitions by version (defKey), read once each;
	// badDef: versions that cannot be read, reported once.
	defs   map[string]cluster.UnitSpec
	badDef map[string]bool
	// exiting: slots told to stop whose exit is not reported yet.
	exiting map[agent.SlotID]bool
	// halted: the runner is stopping every instance itself (no more
	// applies); gone: it has (every exit is reported at once).
	halted, gone bool
}

// agentExecutor is what agentFleet uses of executor.Executor.
type agentExecutor interface {
	SetUnits([]agent.Unit)
	Halt()
	InstanceStarted(agent.SlotID)
	InstanceHealthy(slot agent.SlotID, version string, since time.Time)
	InstanceUnhealthy(slot agent.SlotID, version string)
	InstanceExited(agent.SlotID)
	ServiceFailed(slot agent.SlotID, service, reason string)
	Stop(context.Context) error
	// Stats, Waiting and FirstLive are read by the metrics, the liveness
	// check and the audit's retention.
	Stats() cluster.FleetStats
	Waiting() string
	FirstLive() bool
}

// agentSlot is a held slot's instance as the runner runs it.
type agentSlot struct {
	start     agent.Start
	exclusive bool
	// lost and expired are the exclusive hold's channels
	// (supervisor.Slot): closed on Stop{Kill}, the process is killed at
	// once.
	lost, expired chan struct{}
	killed        bool
	reported      bool // InstanceStarted posted
	// def: the definition the runner was last handed for the slot (kept
	// while the next version's cannot be read yet); health: what the
	// executor was told of start.Version's health (nextHealth).
	def    *cluster.UnitSpec
	health slotHealth
	// mark: with health_check = "manual", whether an operator marked the
	// slot healthy at markVersion (mariposa deploy health), as a watch
	// of its key last read; markStop ends that watch.
	mark        func() bool
	markVersion string
	markStop    context.CancelFunc
}

// dropMark ends h's watch of its manual mark, if any.
func (h *agentSlot) dropMark() {
	if h.markStop != nil {
		h.markStop()
	}
	h.mark, h.markStop, h.markVersion = nil, nil, ""
}

// defKey names a unit's definition at a version in agentFleet.defs.
func defKey(version, unit string) string { return version + "\x00" + unit }

func newAgentFleet(apply func(context.Context, []supervisor.SlotInstance) (supervisor.ApplyResult, error), log hclog.Logger) *agentFleet {
	return &agentFleet{apply: apply, log: log, kick: make(chan struct{}, 1), units: map[string]cluster.UnitSpec{},
		held: map[agent.SlotID]*agentSlot{}, exiting: map[agent.SlotID]bool{},
		defs: map[string]cluster.UnitSpec{}, badDef: map[string]bool{}}
}

// startAgent makes and starts the executor of node, after the runner's
// own registration (its liveness check binds the session).
// onClaim is told each claim this node makes (the claim delay metric).
func startAgent(ctx context.Context, client *api.Client, r *supervisor.Runner, cfg *schema.Config, vols *volume.Store, apiURL string,
	onClaim func(unit string, vacant time.Duration), log hclog.Logger, adopt *executor.Handover) *agentFleet {
	a := newAgentFleet(r.ApplySlots, log.Named("agent"))
	a.local = cluster.UnitsOf(cfg)
	a.readUnit = func(version, unit string) (cluster.UnitSpec, error) { return cluster.ReadUnitAt(client, version, unit) }
	a.snapshots = r.Snapshots
	a.watchKey = func(ctx context.Context, key string) func() bool { return watchKeyExists(ctx, client, key) }
	a.volumes = vols
	node := r.Node()
	var ev *executor.Volumes
	if vols != nil {
		ev = &executor.Volumes{Store: vols, APIURL: apiURL, Specs: a.volumeSpecs, Owner: a.volumeOwner}
	}
	ex := executor.New(executor.Config{
		Client: client,
		Node:   node,
		// The session goes with the node (serfHealth) and with this
		// mariposa's liveness check, as the runner's lease.
		Checks:    []string{lease.SerfCheck, checks.SupervisorCheckID(checks.SupervisorServiceID(node))},
		TTL:       lease.DefaultTTL,
		LockDelay: lease.DefaultLockDelay,
		Control:   true,
		Instances: a,
		Log:       log.Named("executor"),
		Volumes:   ev,
		OnClaim:   onClaim,
		// An upgrade in place: the previous image's session and holds
		// (fleetagent_adopt.go).
		Adopt: adopt,
	})
	a.ex = ex
	a.adoptHeld(adopt)
	ex.Start()
	go a.applyLoop(ctx)
	go a.watchDeploy(ctx, client)
	go a.healthLoop(ctx)
	return a
}

// volumeSpecs is executor.Volumes' Specs: the unit's volume blocks, as
// the units last given to the executor say.
func (a *agentFleet) volumeSpecs(unit string) []*schema.Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.units[unit].Unit.Placement; p != nil {
		return p.Volumes
	}
	return nil
}

// volumeOwner is executor.Volumes' Owner: the user the unit's volumes
// belong to (cluster.VolumeOwner: its first service with a user; nil:
// mariposa's own).
func (a *agentFleet) volumeOwner(unit string) (*volume.RunAs, error) {
	a.mu.Lock()
	u, ok := a.units[unit]
	a.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return cluster.VolumeOwner(u)
}

// setLocal takes the node's files (a reload).
func (a *agentFleet) setLocal(cfg *schema.Config) {
	a.mu.Lock()
	a.local = cluster.UnitsOf(cfg)
	a.mu.Unlock()
	a.setUnits()
}

// setUnits gives the executor the units, once the deployments have been
// read (before, a slot of a deployed unit would start with the node's own
// definition of it, if any).
func (a *agentFleet) setUnits() {
	a.mu.Lock()
	if a.remote == nil || a.halted {
		a.mu.Unlock()
		return
	}
	units := cluster.MergeUnits(a.remote, a.local, func(unit, deployment string) {
		a.log.Error("a unit is deployed twice; keeping the first", "unit", unit, "deployment", deployment)
	})
	a.units = units
	a.mu.Unlock()
	a.ex.SetUnits(agentUnits(units))
	a.poke() // a deployed unit's definition may have changed
}

// agentUnits is the step machine's view of the units: their placement
// (agent.UnitOf: count, exclusive, max_per_node, the placement block with
// its constraints, affinities and spreads, resources, stickiness), what
// their services do on exhausted restarts (agent.OnExhausted: reschedule,
// a group failing as one), and Volumes for any volume (the executor
// readies every claimed slot's volumes before its start, as the runner
// needs their directory).
func agentUnits(units map[string]cluster.UnitSpec) []agent.Unit {
	out := make([]agent.Unit, 0, len(units))
	for _, u := range units {
		p := u.Unit.Placement
		if p == nil {
			continue
		}
		au := agent.UnitOf(u.Unit)
		au.Volumes = len(p.Volumes) > 0
		au.Reschedule, au.Group = agent.OnExhausted(u)
		for _, sv := range u.Services {
			au.MaxStop = max(au.MaxStop, sv.Stop.Drain+sv.Stop.Timeout)
			au.Services = strings.TrimSpace(au.Services + " " + sv.Name)
		}
		out = append(out, au)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// watchDeploy follows deploy/ (a blocking query): every deployment's
// desired spec.
func (a *agentFleet) watchDeploy(ctx context.Context, client *api.Client) {
	reported := map[string]bool{}
	var index uint64
	for ctx.Err() == nil {
		pairs, meta, err := client.KV().List(cluster.DeployPrefix, (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Minute}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("cannot read the deployments; trying again", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		deps := cluster.ParseDeployments(pairs, func(key, msg string, err error) {
			if !reported[key] {
				reported[key] = true
				a.log.Error(msg, "key", key, "error", err)
			}
		})
		a.mu.Lock()
		a.remote = deps
		a.mu.Unlock()
		a.setUnits()
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
}

func (a *agentFleet) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Start is executor.Instances'.
func (a *agentFleet) Start(s agent.Start) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.halted {
		// Stopping: it never starts; its Stop reports the exit.
		return
	}
	u := a.units[s.Slot.Unit]
	h := &agentSlot{start: s, exclusive: u.Unit.Placement != nil && u.Unit.Placement.Exclusive}
	if h.exclusive {
		h.lost, h.expired = make(chan struct{}), make(chan struct{})
	}
	a.held[s.Slot] = h
	a.poke()
}

// Stop is executor.Instances'.
func (a *agentFleet) Stop(slot agent.SlotID, kill bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.held[slot]; h != nil {
		if kill && h.exclusive && !h.killed {
			// SIGKILL at once, whatever the runner is busy with.
			h.killed = true
			close(h.expired)
			close(h.lost)
		}
		h.dropMark()
		delete(a.held, slot)
	}
	if a.gone {
		a.ex.InstanceExited(slot)
		return
	}
	a.exiting[slot] = true
	a.poke()
}

// Update is executor.Instances': the slot's instance moves to u.To's
// definition (the runner restarts it in place if that differs, under the
// same fencing token); InstanceStarted once the runner has it, and
// InstanceHealthy again at the new version.
func (a *agentFleet) Update(u agent.Update) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.held[u.Slot]; h != nil {
		h.start.Version = u.To
		h.reported, h.health = false, slotHealth{}
		h.dropMark()
	}
	a.poke()
}

// unitAtLocked is the definition slot h runs: its version's, "" the
// unit's current one; false when it is not known (yet).
func (a *agentFleet) unitAtLocked(id agent.SlotID, version string) (cluster.UnitSpec, bool) {
	if version == "" {
		u, ok := a.units[id.Unit]
		return u, ok
	}
	u, ok := a.defs[defKey(version, id.Unit)]
	return u, ok
}

// readDefs reads the definitions of the held slots' versions not read
// yet; false when one could not be read (try again later).
func (a *agentFleet) readDefs() bool {
	a.mu.Lock()
	need := map[string]agent.SlotID{}
	for id, h := range a.held {
		v := h.start.Version
		if v == "" {
			continue
		}
		if _, ok := a.defs[defKey(v, id.Unit)]; !ok {
			need[defKey(v, id.Unit)] = id
		}
	}
	a.mu.Unlock()
	ok := true
	for key, id := range need {
		version := key[:strings.IndexByte(key, 0)]
		u, err := a.readUnit(version, id.Unit)
		a.mu.Lock()
		if err != nil {
			ok = false
			if !a.badDef[key] {
				a.badDef[key] = true
				a.log.Error("cannot read the unit's definition at its version: the slot keeps what it runs; trying again", "slot", id.String(), "version", version, "error", err)
			}
		} else {
			a.defs[key] = u
			delete(a.badDef, key)
		}
		a.mu.Unlock()
	}
	return ok
}

// applyLoop hands the runner the held slots' instances after each change,
// then reports what changed: the exits of the slots told to stop (the
// runner has stopped them when ApplySlots returns), then the starts.
func (a *agentFleet) applyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		if !a.readDefs() {
			time.AfterFunc(time.Second, a.poke)
		}
		a.mu.Lock()
		if a.halted {
			a.mu.Unlock()
			continue
		}
		out, in := a.desiredLocked()
		exiting := make([]agent.SlotID, 0, len(a.exiting))
		for s := range a.exiting {
			exiting = append(exiting, s)
		}
		a.mu.Unlock()
		if _, err := a.apply(ctx, out); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("could not hand the slots to the supervisor; trying again", "error", err)
			time.AfterFunc(time.Second, a.poke)
			continue
		}
		a.mu.Lock()
		for _, s := range exiting {
			if a.exiting[s] && a.held[s] == nil {
				delete(a.exiting, s)
				a.ex.InstanceExited(s)
			}
		}
		for s, h := range in {
			if a.held[s] == h.h && !h.h.reported && h.h.start.Version == h.version {
				h := h.h
				h.reported = true
				a.ex.InstanceStarted(s)
			}
		}
		a.mu.Unlock()
	}
}

// applied is a hold handed to the runner at its version (its start is
// reported only if it is still at that version when the apply returns).
type applied struct {
	h       *agentSlot
	version string
}

// desiredLocked is the runner's slot instances for the held slots, and
// which holds are handed to it at their version's definition.
func (a *agentFleet) desiredLocked() ([]supervisor.SlotInstance, map[agent.SlotID]applied) {
	ids := make([]agent.SlotID, 0, len(a.held))
	for id := range a.held {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Unit != ids[j].Unit {
			return ids[i].Unit < ids[j].Unit
		}
		return ids[i].K < ids[j].K
	})
	var out []supervisor.SlotInstance
	in := map[agent.SlotID]applied{}
	for _, id := range ids {
		h := a.held[id]
		u, ok := a.unitAtLocked(id, h.start.Version)
		switch {
		case ok:
			h.def = &u
		case h.def != nil:
			u = *h.def // the new version's definition is not read yet
		default:
			continue // not read yet, or the unit is gone (the agent stops the slot)
		}
		sl := supervisor.Slot{SlotInfo: supervisor.SlotInfo{Unit: id.Unit, Index: id.K, Key: id.Key(),
			Session: h.start.Session, Term: h.start.Index, Volumes: h.start.Volumes}}
		if p := u.Unit.Placement; p != nil && len(p.Volumes) > 0 {
			if a.volumes == nil {
				continue // never claimed: the executor's restore fails without a store
			}
			sl.VolumeDir = filepath.Dir(a.volumes.Dir(id.Unit, id.K, p.Volumes[0].Path))
		}
		if h.exclusive {
			sl.Lost, sl.Expired = h.lost, h.expired
			sl.Err = func() error { return errors.New("the fleet agent lost the hold (its watchdog, or the session)") }
		}
		for _, svc := range u.Services {
			out = append(out, supervisor.SlotInstance{Service: svc, Slot: sl})
		}
		if ok {
			in[id] = applied{h: h, version: h.start.Version}
		}
	}
	return out, in
}

// healthEvery: how often healthLoop looks at the runner's snapshots while
// a held slot is not yet reported healthy at its version, or may still
// break within its min_healthy_time.
const healthEvery = 200 * time.Millisecond

// healthLoop tells the executor when a held slot's instance is healthy at
// its version (InstanceHealthy) and when it breaks within its
// min_healthy_time (InstanceUnhealthy), from the runner's snapshots:
// agentHealthy's rule, and nextHealth's. The step machine counts
// min_healthy_time from Since, over a streak without a break, and says
// the slot healthy (its status) once it has lasted.
func (a *agentFleet) healthLoop(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		a.mu.Lock()
		waiting := false
		for _, h := range a.held {
			if h.reported && h.health.watching(now) {
				waiting = true
				break
			}
		}
		a.mu.Unlock()
		if !waiting || a.snapshots == nil {
			continue
		}
		snaps := a.snapshots()
		now = time.Now()
		a.mu.Lock()
		for id, h := range a.held {
			if !h.reported || h.def == nil || a.halted || !h.health.watching(now) {
				continue
			}
			ok, pids, since := agentHealth(snaps, id.String(), *h.def)
			if ok && manualHealth(*h.def) {
				ok = a.markedLocked(ctx, id, h)
			}
			var say []string
			h.health, say = nextHealth(h.health, ok, pids, since, now, minHealthyOf(*h.def))
			for _, w := range say {
				if w == "healthy" {
					a.ex.InstanceHealthy(id, h.start.Version, h.health.since)
				} else {
					a.ex.InstanceUnhealthy(id, h.start.Version)
				}
			}
		}
		a.mu.Unlock()
	}
}

// markedLocked: whether slot id's instance is marked healthy at the
// version it runs (health_check = "manual": cluster.ManualHealthKey, which
// mariposa deploy health writes); the key is watched from the first ask
// for a version until the slot moves on or goes.
func (a *agentFleet) markedLocked(ctx context.Context, id agent.SlotID, h *agentSlot) bool {
	if h.start.Version == "" || a.watchKey == nil {
		return false // deploy health names the version the slot says it runs
	}
	if h.mark == nil || h.markVersion != h.start.Version {
		h.dropMark()
		mctx, cancel := context.WithCancel(ctx)
		h.mark, h.markStop, h.markVersion = a.watchKey(mctx, cluster.ManualHealthKey(id.Unit, h.start.Version, id.K)), cancel, h.start.Version
	}
	return h.mark()
}

// slotHealth is what the executor has been told of a slot's health at its
// version.
type slotHealth struct {
	// healthy: reported healthy (InstanceHealthy), and no break reported
	// since; since: the Since reported with it; pids: the members'
	// processes it was about; until: the looks for a break go on until
	// then (the slot's min_healthy_time after the report, and a margin
	// for the step machine to say it).
	healthy bool
	since   time.Time
	pids    []int
	until   time.Time
}

// healthMargin: the looks for a break go on this long past the
// min_healthy_time that follows a healthy report.
const healthMargin = 2 * time.Second

// watching: a look at the slot may have news (not healthy yet, or a
// break within min_healthy_time).
func (s slotHealth) watching(now time.Time) bool { return !s.healthy || now.Before(s.until) }

// nextHealth is s after a look at now that found the slot healthy or not
// (agentHealth), its members' PIDs and since when its checks passed where
// they run (local, zero when unknown), given its unit's min_healthy_time,
// and what to tell the executor, in order: "healthy" (InstanceHealthy,
// Since the new s.since) or "unhealthy" (InstanceUnhealthy). A break
// seen, or a restart (other PIDs), ends the streak; a later local pass
// than the one reported moves its start there.
func nextHealth(s slotHealth, ok bool, pids []int, local, now time.Time, minHealthy time.Duration) (slotHealth, []string) {
	var say []string
	switch {
	case !ok:
		if s.healthy {
			say = append(say, "unhealthy")
		}
		return slotHealth{}, say
	case s.healthy && !slices.Equal(pids, s.pids):
		say = append(say, "unhealthy") // restarted
	case s.healthy && local.After(s.since):
	case s.healthy:
		return s, nil
	}
	return slotHealth{healthy: true, since: local, pids: slices.Clone(pids), until: now.Add(minHealthy + healthMargin)}, append(say, "healthy")
}

// minHealthyOf is u's min_healthy_time.
func minHealthyOf(u cluster.UnitSpec) time.Duration {
	if p := u.Unit.Placement; p != nil {
		return p.Update.MinHealthyTime
	}
	return schema.DefaultUpdateMinHealthyTime
}

// manualHealth: u's instances are healthy only once marked so
// (health_check = "manual").
func manualHealth(u cluster.UnitSpec) bool {
	p := u.Unit.Placement
	return p != nil && p.Update.HealthCheck == schema.UpdateManual
}

// agentHealthy says whether every member of u runs in slot id (its
// snapshots' Slot) and is healthy per its update block's health_check:
// "checks" (the default), running with its checks passing in the catalog
// and, where mariposa runs every check itself, in its own runs, since is
// then when they passed there (the latest of the members'); "running"
// and "manual", running (a manual slot then needs its mark too:
// markedLocked).
func agentHealthy(snaps []supervisor.Snapshot, id string, u cluster.UnitSpec) (bool, time.Time) {
	ok, _, since := agentHealth(snaps, id, u)
	return ok, since
}

// agentHealth is agentHealthy with the members' PIDs.
func agentHealth(snaps []supervisor.Snapshot, id string, u cluster.UnitSpec) (bool, []int, time.Time) {
	mode := schema.UpdateChecks
	if p := u.Unit.Placement; p != nil && p.Update.HealthCheck != "" {
		mode = p.Update.HealthCheck
	}
	if len(u.Services) == 0 {
		return false, nil, time.Time{}
	}
	return cluster.SlotHealth(snaps, id, u, mode)
}

// halt: the runner stops every instance now; no claims from here on (the
// agent is told there are no units: it stops its slots, whose exits are
// reported once the runner has stopped them all).
func (a *agentFleet) halt() {
	a.mu.Lock()
	if a.halted {
		a.mu.Unlock()
		return
	}
	a.halted = true
	a.mu.Unlock()
	a.ex.Halt()
}

// release: every instance has stopped; the slots go (released, no lock
// delay) and the session is destroyed. ctx cut short: what is left waits
// out the lock delay.
func (a *agentFleet) release(ctx context.Context) {
	a.mu.Lock()
	a.halted, a.gone = true, true
	exiting := make([]agent.SlotID, 0, len(a.exiting)+len(a.held))
	for s := range a.exiting {
		exiting = append(exiting, s)
	}
	for s := range a.held {
		if !a.exiting[s] {
			exiting = append(exiting, s)
		}
	}
	a.exiting = map[agent.SlotID]bool{}
	a.mu.Unlock()
	for _, s := range exiting {
		a.ex.InstanceExited(s)
	}
	if err := a.ex.Stop(ctx); err != nil {
		a.log.Warn("stopped before every slot was released: the rest wait out the lock delay", "error", err)
	}
}

// event takes the runner's events: a held slot's instance that failed for
// good (supervisor.EventFailed, its restarts exhausted) is told to the
// executor (ServiceFailed: the slot moves or fails) when its unit
// reschedules (restart.on_exhausted = "reschedule") or is a group (it
// fails as one); otherwise the instance stays failed in its slot.
func (a *agentFleet) event(e supervisor.Event) {
	if e.Slot == "" || e.Kind != supervisor.EventFailed {
		return
	}
	a.mu.Lock()
	var id agent.SlotID
	var h *agentSlot
	for s, hs := range a.held {
		if s.String() == e.Slot {
			id, h = s, hs
			break
		}
	}
	if h == nil || h.def == nil || a.halted {
		a.mu.Unlock()
		return
	}
	resched, group := agent.OnExhausted(*h.def)
	a.mu.Unlock()
	if resched || group {
		a.ex.ServiceFailed(id, e.Service, e.Reason)
	}
}

// stats is the executor's (the metrics' fleet source).
func (a *agentFleet) stats() cluster.FleetStats { return a.ex.Stats() }

// waiting is the liveness check's fleet line under the step machine: the
// slots this node runs, then what it waits for (Executor.Waiting).
func (a *agentFleet) waiting() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.held))
	for id := range a.held {
		names = append(names, id.String())
	}
	sort.Strings(names)
	s := "fleet engine: step machine"
	if len(names) > 0 {
		s += "; running slots " + strings.Join(names, ", ")
	}
	if w := a.ex.Waiting(); w != "" {
		s += "\n" + w
	}
	return s
}

// watchKeyExists follows key with a blocking query until ctx ends; the
// result says whether the key exists, as last read (an operator's mark of
// health_check = "manual", cluster.ManualHealthKey).
func watchKeyExists(ctx context.Context, client *api.Client, key string) func() bool {
	var seen atomic.Bool
	go func() {
		var index uint64
		for ctx.Err() == nil {
			p, meta, err := client.KV().Get(key, (&api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx))
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			seen.Store(p != nil)
			if meta.LastIndex < index {
				index = 0
			} else {
				index = meta.LastIndex
			}
		}
	}()
	return seen.Load
}
