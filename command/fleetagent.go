package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// fleetEngineEnv chooses what runs `mariposa run -cluster`'s part in the
// fleet: unset (or "fleet"), cluster.Fleet; "agent", the fleet's step
// machine (fleet/agent) under its executor (fleet/executor): experimental,
// see website/internals/fleet-agent.md for what it does not do yet.
const fleetEngineEnv = "MARIPOSA_FLEET_ENGINE"

// fleetEngine reads fleetEngineEnv: "agent" or "" (cluster.Fleet); an
// unknown value is an error naming it.
func fleetEngine() (string, error) {
	switch v := os.Getenv(fleetEngineEnv); v {
	case "", "fleet":
		return "", nil
	case "agent":
		return "agent", nil
	default:
		return "", fmt.Errorf("%s=%q: want \"agent\" (experimental) or unset", fleetEngineEnv, v)
	}
}

// agentFleet is run -cluster's part in the fleet under the step machine:
// the executor decides which slots this node holds and tells agentFleet,
// its executor.Instances, to start and stop their instances; agentFleet
// hands the runner the instances of the held slots (Runner.ApplySlots, as
// cluster.Fleet's applyHeld does) from one goroutine of its own, since
// Instances' methods must return at once and ApplySlots waits for the
// stops, and reports the starts and exits back to the executor. It feeds
// the executor the units: the node's own files' and every deployment's
// desired spec (deploy/<name>/desired, as cluster.Fleet reads them).
type agentFleet struct {
	// apply is the runner's ApplySlots; ex the executor.
	apply func(context.Context, []supervisor.SlotInstance) (supervisor.ApplyResult, error)
	ex    agentExecutor
	log   hclog.Logger

	kick chan struct{} // a change of held or units: apply

	mu     sync.Mutex
	local  []cluster.UnitSpec
	remote map[string]*cluster.Deployment // nil until the first answer
	units  map[string]cluster.UnitSpec    // by name: deployed, then local
	held   map[agent.SlotID]*agentSlot    // the instances to run
	// exiting: slots told to stop whose exit is not reported yet.
	exiting map[agent.SlotID]bool
	// halted: the runner is stopping every instance itself (no more
	// applies); gone: it has (every exit is reported at once).
	halted, gone bool
}

// agentExecutor is what agentFleet uses of executor.Executor.
type agentExecutor interface {
	SetUnits([]agent.Unit)
	InstanceStarted(agent.SlotID)
	InstanceExited(agent.SlotID)
	Stop(context.Context) error
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
}

func newAgentFleet(apply func(context.Context, []supervisor.SlotInstance) (supervisor.ApplyResult, error), log hclog.Logger) *agentFleet {
	return &agentFleet{apply: apply, log: log, kick: make(chan struct{}, 1), units: map[string]cluster.UnitSpec{},
		held: map[agent.SlotID]*agentSlot{}, exiting: map[agent.SlotID]bool{}}
}

// startAgent makes and starts the executor of node, after the runner's
// own registration (its liveness check binds the session).
func startAgent(ctx context.Context, client *api.Client, r *supervisor.Runner, cfg *schema.Config, log hclog.Logger) *agentFleet {
	a := newAgentFleet(r.ApplySlots, log.Named("agent"))
	a.local = cluster.UnitsOf(cfg)
	node := r.Node()
	ex := executor.New(executor.Config{
		Client: client,
		Node:   node,
		// The session goes with the node (serfHealth) and with this
		// mariposa's liveness check, as cluster.Fleet's lease.
		Checks:    []string{lease.SerfCheck, checks.SupervisorCheckID(checks.SupervisorServiceID(node))},
		TTL:       lease.DefaultTTL,
		LockDelay: lease.DefaultLockDelay,
		Control:   true,
		Instances: a,
		Log:       log.Named("executor"),
	})
	a.ex = ex
	ex.Start()
	go a.applyLoop(ctx)
	go a.watchDeploy(ctx, client)
	return a
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
	units := map[string]cluster.UnitSpec{}
	names := make([]string, 0, len(a.remote))
	for n := range a.remote {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, u := range a.remote[n].Spec.Units() {
			if _, dup := units[u.Unit.Name]; dup {
				a.log.Error("a unit is deployed twice; keeping the first", "unit", u.Unit.Name, "deployment", n)
				continue
			}
			units[u.Unit.Name] = u
		}
	}
	for _, u := range a.local {
		if _, dup := units[u.Unit.Name]; !dup {
			units[u.Unit.Name] = u
		}
	}
	a.units = units
	a.mu.Unlock()
	a.ex.SetUnits(agentUnits(units))
	a.poke() // a deployed unit's definition may have changed
}

// agentUnits is the step machine's view of the units: what placement
// needs of them (the constraints, affinities, spreads, resources and
// volumes are not in the step machine yet).
func agentUnits(units map[string]cluster.UnitSpec) []agent.Unit {
	out := make([]agent.Unit, 0, len(units))
	for _, u := range units {
		p := u.Unit.Placement
		if p == nil {
			continue
		}
		out = append(out, agent.Unit{Name: u.Unit.Name, Count: p.Count, Exclusive: p.Exclusive, MaxPerNode: p.MaxPerNode})
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
		delete(a.held, slot)
	}
	if a.gone {
		a.ex.InstanceExited(slot)
		return
	}
	a.exiting[slot] = true
	a.poke()
}

// Update is executor.Instances': deployments do not go through the step
// machine under run -cluster yet (no record is written), so an update is
// the same instance under the new version's name.
func (a *agentFleet) Update(u agent.Update) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.held[u.Slot]; h != nil {
		h.start.Version = u.To
		h.reported = false
	}
	a.poke()
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
			if a.held[s] == h && !h.reported {
				h.reported = true
				a.ex.InstanceStarted(s)
			}
		}
		a.mu.Unlock()
	}
}

// desiredLocked is the runner's slot instances for the held slots, and
// which holds they are.
func (a *agentFleet) desiredLocked() ([]supervisor.SlotInstance, map[agent.SlotID]*agentSlot) {
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
	in := map[agent.SlotID]*agentSlot{}
	for _, id := range ids {
		h := a.held[id]
		u, ok := a.units[id.Unit]
		if !ok {
			continue // the unit is gone: the agent stops the slot
		}
		sl := supervisor.Slot{SlotInfo: supervisor.SlotInfo{Unit: id.Unit, Index: id.K, Key: id.Key(),
			Session: h.start.Session, Term: h.start.Index}}
		if h.exclusive {
			sl.Lost, sl.Expired = h.lost, h.expired
			sl.Err = func() error { return errors.New("the fleet agent lost the hold (its watchdog, or the session)") }
		}
		for _, svc := range u.Services {
			out = append(out, supervisor.SlotInstance{Service: svc, Slot: sl})
		}
		in[id] = h
	}
	return out, in
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
	a.ex.SetUnits(nil)
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

// waiting is the liveness check's fleet line under the step machine: the
// slots this node runs (what it waits for is not reported yet).
func (a *agentFleet) waiting() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.held))
	for id := range a.held {
		names = append(names, id.String())
	}
	sort.Strings(names)
	s := "fleet engine: agent (experimental)"
	if len(names) > 0 {
		s += "; running slots " + strings.Join(names, ", ")
	}
	return s
}
