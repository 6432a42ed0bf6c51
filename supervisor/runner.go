package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/internal/leader"
	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// Options configure a Runner.
type Options struct {
	Client *api.Client
	// ConsulConfig is the configuration Client was made from; templates and
	// dependencies use it for their own connections. Default: Consul's
	// defaults (the environment).
	ConsulConfig *api.Config
	Logger       hclog.Logger
	// Sink receives the children's output; nil discards it.
	Sink *proc.Sink
	// LivenessTTL is the TTL of mariposa's own liveness check (default 3s).
	LivenessTTL time.Duration
	// SupervisorTTL is the TTL of each service's supervisor check (default
	// 30m); it is refreshed at a third of that. A dead supervisor shows at
	// once through each service's alias check of mariposa's liveness, so
	// this only keeps the check from expiring, and a long TTL keeps the
	// requests of idle services low.
	SupervisorTTL time.Duration
	// Environ is the base environment of children (default os.Environ()).
	Environ []string
	// Events receives every instance event (default: logged).
	Events func(Event)
	// OnOutput sees every output line of every child as it is read (the
	// per-service log rings); it must not block.
	OnOutput func(proc.Line)
	// AllowSecondSupervisor skips the node lock: another mariposa may
	// supervise the same node (each must then run distinct services). Such
	// a supervisor registers its own service (SecondSupervisorServiceID:
	// mariposa-<node>-<pid>-<nonce>), and binds its session to that one's
	// check: its stop never touches the other supervisor's registration.
	AllowSecondSupervisor bool
	// SelfMeta is added to the meta of mariposa's own service (the fleet
	// layer says there that this node runs the fleet).
	SelfMeta map[string]string
	// Started is when this mariposa started (the node lock's value).
	Started time.Time
	// Stopped, if set, is called when mariposa stops, once every instance
	// has stopped and deregistered, and before the node lock is released
	// and mariposa deregisters itself (which ends the node's session): the
	// fleet layer releases its slots here, cleanly, with their records.
	Stopped func()
	// ReloadGate hands out the tokens of coordinated template reloads
	// (templates with a coordinate block; coord is the Consul
	// one). nil: such reloads act at once, with a warning.
	ReloadGate ReloadGate
	// HTTPAPI is the node's HTTP API address (host:port), "" when it is
	// off: mariposa's own service carries it (withHTTPAPI).
	HTTPAPI string
	// OnRender sees each template render that had its data (the metrics);
	// see render.Options.Observe.
	OnRender func(service string, changed, failed bool)
	// Cgroups gives each instance a control group of its own; nil: none
	// (the process group is all that a stop kills).
	Cgroups *cgroup.Manager
	// Adopt is what the previous image of mariposa handed over (an upgrade
	// in place, upgrade.go): its sessions are adopted, the node lock is
	// not waited for, and its running children are adopted instead of
	// started.
	Adopt *Handover
	// AdoptedSlotSession, with Adopt, is the session the count slots
	// handed over are held under when it is not the node's lease's (the
	// fleet's step machine holds them under its executor's own session,
	// which it adopts itself): a slot's process handed over is kept when
	// Consul shows its key held by it. "" the node's lease's (a handover
	// without a fleet part: an older build's, before the step machine).
	AdoptedSlotSession string
}

// Runner supervises every service of one configuration on this node.
type Runner struct {
	cfg   *schema.Config // the node's own files
	slots []SlotInstance // what the fleet layer asks this node to run
	opts  Options
	log   hclog.Logger

	mu        sync.Mutex
	instances map[string]*Instance // by instance key (see instanceKey)
	order     []string             // instance keys in start order
	node      string
	ready     chan struct{}
	// selfID is mariposa's own service ID (set by Run).
	selfID string
	// selfMeta is the meta of mariposa's own service as registered (nil
	// before Run); selfMu guards it and opts.SelfMeta.
	selfMu   sync.Mutex
	selfMeta map[string]string
	selfReg  *checks.Registry
	// registered closes once the first configuration's services are
	// registered with the agent (Registered).
	registered chan struct{}
	// pause is the pause state's source (SetPause); nil: nothing paused.
	pause    atomic.Pointer[PauseFunc]
	killOnce sync.Once
	killc    chan struct{}
	applyc   chan applyReq

	// abandoned: another supervisor holds the node now; stop without
	// touching the registrations, which are its own.
	abandoned atomic.Bool
	// note adds to the liveness check's output (SetLivenessNote).
	note atomic.Pointer[func() string]
	// noGateOnce warns that coordinated reloads act at once.
	noGateOnce sync.Once
	// pending are the instances an upgrade handed over that no instance
	// has adopted yet (those of count slots wait for the fleet); under mu.
	pending map[string]*InstanceHandoff
	// pendingSet: pending was filled (Run's start, after the sessions
	// and holds handed over were confirmed); under mu.
	pendingSet bool
	// lastBeat is when the liveness check was last updated (unix ns);
	// beatGap, after an upgrade in place, the time from the previous
	// image's last update to this one's first (upgrade.go).
	lastBeat atomic.Int64
	beatGap  atomic.Int64

	// Set by Run before any instance starts.
	leases  *lease.Manager
	reg     *checks.Registry
	data    *render.Manager // nil until a service needs Consul data
	addr    string
	baseEnv []string
}

// SetSelfMeta sets keys of the meta of mariposa's own service (the
// node's capacity, which its own services' resources change on a reload):
// before Run, into Options.SelfMeta; after, the service is registered
// again when a value changed.
func (r *Runner) SetSelfMeta(kv map[string]string) {
	r.selfMu.Lock()
	defer r.selfMu.Unlock()
	if r.selfMeta == nil {
		m := maps.Clone(r.opts.SelfMeta)
		if m == nil {
			m = map[string]string{}
		}
		maps.Copy(m, kv)
		r.opts.SelfMeta = m
		return
	}
	changed := false
	for k, v := range kv {
		if r.selfMeta[k] != v {
			r.selfMeta[k], changed = v, true
		}
	}
	if changed {
		r.selfReg.UpdateMeta(r.selfID, maps.Clone(r.selfMeta))
	}
}

type applyReq struct {
	cfg   *schema.Config // nil: keep the current one
	slots []SlotInstance
	keep  bool // keep the current slots
	done  chan ApplyResult
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	Started, Restarted, Stopped, Unchanged []string
}

// New returns a runner for cfg.
func New(cfg *schema.Config, o Options) *Runner {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.LivenessTTL == 0 {
		o.LivenessTTL = 3 * time.Second
	}
	if o.SupervisorTTL == 0 {
		o.SupervisorTTL = 30 * time.Minute
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Events == nil {
		o.Events = LogEvents(o.Logger)
	}
	r := &Runner{cfg: cfg, opts: o, log: o.Logger, instances: map[string]*Instance{},
		ready: make(chan struct{}), registered: make(chan struct{}), killc: make(chan struct{}), applyc: make(chan applyReq)}
	if o.Adopt != nil {
		// After an upgrade in place the node is known from the start (the
		// node API answers at once, not "starting"); Run's agent lookup
		// finds the same.
		r.node = o.Adopt.Node
	}
	return r
}

// Leases is the node's lease manager: one session per (session TTL, lock
// delay), bound to serfHealth and mariposa's liveness. Valid after Ready.
func (r *Runner) Leases() *lease.Manager { return r.leases }

// Ready is closed once every instance has been started.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// Registered is closed once mariposa's own service and every service the
// runner started with are registered with the agent (a standby, which is
// registered only while it leads, excepted): what systemd's READY=1
// means for `mariposa run` (Type=notify). It stays open while the agent
// cannot be reached.
func (r *Runner) Registered() <-chan struct{} { return r.registered }

// Node is the node name services are registered under (valid after Ready).
func (r *Runner) Node() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.node
}

// Instance returns an instance by key: a service's name, or
// "<service>/<k>" for an instance in a count slot. nil if none.
func (r *Runner) Instance(name string) *Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.instances[name]
}

// Snapshots lists every instance's state in start order.
func (r *Runner) Snapshots() []Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Snapshot
	for _, n := range r.order {
		out = append(out, r.instances[n].Snapshot())
	}
	return out
}

// Signal forwards sig to every running child's process group.
func (r *Runner) Signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.instances {
		in.Signal(sig)
	}
}

// Killed is closed once Kill was called (a second signal): what is left
// of the stop, the fleet's wait for its handoffs included, is cut short.
func (r *Runner) Killed() <-chan struct{} { return r.killc }

// Kill turns a graceful stop into an immediate one: no drain, no grace,
// SIGKILL to every process group.
func (r *Runner) Kill() {
	r.killOnce.Do(func() {
		close(r.killc)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, in := range r.instances {
			in.Kill()
		}
	})
}

// Run starts everything and supervises until ctx ends, then stops every
// service in reverse dependency order, deregisters, and returns.
func (r *Runner) Run(ctx context.Context) error {
	node, addr, fromAgent := r.agentIdentity(ctx)
	selfID := checks.SupervisorServiceID(node)
	if r.opts.AllowSecondSupervisor {
		// Not the node's supervisor: a registration of its own, which its
		// stop removes without touching the other supervisor's.
		var b [3]byte
		_, _ = rand.Read(b[:])
		selfID = checks.SecondSupervisorServiceID(node, os.Getpid(), hex.EncodeToString(b[:]))
	}
	r.mu.Lock()
	r.node, r.selfID = node, selfID
	r.mu.Unlock()
	log := r.log.With("node", node)

	// One lease (session) per node and lock delay holds every lock of the
	// node: the node lock, leaders, and next the fleet's slots.
	r.leases = lease.NewManager(lease.Config{Client: r.opts.Client, Node: node, Name: "mariposa " + node,
		Checks: []string{checks.SupervisorCheckID(selfID)}, Log: log.Named("lease")})
	defer r.leases.Close()
	var adopt map[string]*InstanceHandoff
	if h := r.opts.Adopt; h != nil {
		// A child the previous image did not hand over (an args check
		// under way) would never be waited for: killed and reaped now,
		// before this image starts any.
		known := map[int]bool{}
		for _, in := range h.Instances {
			if in.Proc != nil {
				known[in.Proc.Pid] = true
			}
		}
		if strays := proc.KillStrays(known); len(strays) > 0 {
			log.Info("killed the previous mariposa's children it did not hand over", "pids", fmt.Sprint(strays))
		}
		// The previous image's sessions hold the node lock and every
		// term: adopted, they are taken again without a write.
		if err := r.leases.Adopt(ctx, h.Sessions); err != nil {
			log.Warn("some sessions of the previous mariposa could not be adopted; their locks are taken again the ordinary way", "error", err)
		}
		adopt = r.adoptions(ctx, h)
	}
	// Before registering anything: is another mariposa supervising this
	// node? A crashed one's lock goes once its liveness check expires; a
	// live one keeps it, and this one refuses to start. After an upgrade
	// in place the holder is this process's adopted session.
	if !r.opts.AllowSecondSupervisor && fromAgent && r.opts.Adopt == nil {
		wait := lease.NodeLockWait(r.opts.LivenessTTL, lease.DefaultLockDelay)
		if err := lease.WaitNodeLockFree(ctx, r.opts.Client, node, wait, log); err != nil {
			var held *lease.HeldError
			if errors.As(err, &held) || ctx.Err() != nil {
				return err
			}
			log.Warn("could not check the node lock; taking it once the agent answers", "error", err)
		}
	}

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopBG(); wg.Wait() }()
	goBG := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	reg := checks.NewRegistry(r.opts.Client, node, addr, log, r.opts.SupervisorTTL/3)
	goBG(func() { reg.Run(bg) })

	// Templates and dependencies share one set of blocking queries.
	ccfg := r.opts.ConsulConfig
	if ccfg == nil {
		ccfg = api.DefaultConfig()
	}
	r.data = render.NewManager(ccfg, log, render.Options{Observe: r.opts.OnRender, AfterUpgrade: r.opts.Adopt != nil})
	goBG(func() { r.data.Run(bg) })

	// mariposa's own liveness: mariposa.service.consul lists live supervisors.
	// The registry registers it and pushes its first status; the heartbeat
	// goroutine below keeps it passing, so the registry's own refresh is
	// rare (two heartbeats doubled an idle node's Consul requests).
	selfMeta := map[string]string{}
	r.selfMu.Lock()
	for k, v := range r.opts.SelfMeta {
		selfMeta[k] = v
	}
	selfMeta[checks.ManagedByKey] = checks.ManagedByValue
	r.selfMeta, r.selfReg = maps.Clone(selfMeta), reg
	liveness := &api.AgentServiceCheck{CheckID: checks.SupervisorCheckID(selfID), Name: "mariposa liveness",
		TTL: r.opts.LivenessTTL.String(), Status: api.HealthPassing}
	if r.opts.AllowSecondSupervisor {
		// A crashed second supervisor's registration (its ID is its own
		// run's, so no later run takes it over) goes by itself.
		liveness.DeregisterCriticalServiceAfter = secondSupervisorReap.String()
	}
	reg.RegisterHeartbeat(withHTTPAPI(r.opts.HTTPAPI, &api.AgentServiceRegistration{
		ID: selfID, Name: "mariposa", Meta: selfMeta, Checks: api.AgentServiceChecks{liveness},
	}), checks.Result{Health: api.HealthPassing, Output: "alive"}, 10*time.Minute)
	r.selfMu.Unlock()
	// The registry pushes registrations one at a time, and a thousand of
	// them take longer than the liveness TTL on a loaded machine: the
	// heartbeat has its own goroutine, since every lock of the node (its
	// session is bound to this check) would go with it.
	goBG(func() { r.heartbeat(bg, checks.SupervisorCheckID(selfID)) })

	// The node lock, once the liveness check passes (the lease waits for
	// it). Without an agent now, it is taken in the background when one
	// answers; with one, before any service registers.
	nodeLost := make(chan error, 1)
	var nodeLock atomic.Pointer[lease.NodeLock]
	if !r.opts.AllowSecondSupervisor {
		host, _ := os.Hostname()
		info := lease.NodeInfo{PID: os.Getpid(), Hostname: host, Started: r.opts.Started}
		first := make(chan error, 1) // the first attempt's outcome
		goBG(func() {
			for attempt := 0; ; attempt++ {
				nl, err := r.leases.Lease(0, 0).AcquireNodeLock(bg, node, info)
				if attempt == 0 {
					first <- err
				}
				var held *lease.HeldError
				switch {
				case err == nil:
					nodeLock.Store(nl)
					select {
					case <-nl.Lost():
						nodeLost <- nl.Err()
					case <-bg.Done():
					}
					return
				case errors.As(err, &held):
					nodeLost <- err
					return
				case bg.Err() != nil:
					return
				}
				// No agent (yet): take the lock when one answers.
				log.Debug("node lock not taken yet; retrying", "error", err)
				select {
				case <-time.After(time.Second):
				case <-bg.Done():
					return
				}
			}
		})
		if fromAgent {
			select {
			case err := <-first:
				var held *lease.HeldError
				if errors.As(err, &held) {
					// Another supervisor won a race to start: nothing here
					// is ours to deregister.
					r.abandoned.Store(true)
					return err
				} else if err != nil {
					log.Warn("could not take the node lock; taking it once the agent answers", "error", err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}

	r.reg, r.addr, r.baseEnv = reg, addr, childBaseEnv(r.opts.Environ)
	r.removeStale(ctx, adopt)
	if adopt != nil {
		// The node's own services are adopted now; the instances of
		// count slots once the fleet has taken their slots again.
		r.mu.Lock()
		r.pending, r.pendingSet = adopt, true
		r.mu.Unlock()
		goBG(func() { r.dropUnadopted(bg) })
		for key, a := range adopt {
			if a.Slot != "" && a.Proc != nil && !a.confirmBy.IsZero() {
				goBG(func() { r.confirmSlot(bg, key, a) })
			}
		}
	}
	specs := instanceSpecs(r.cfg, r.slots)
	for _, sp := range specs {
		r.addInstance(sp)
	}

	w := &checks.Watcher{Client: r.opts.Client, Node: node, Log: log.Named("health"),
		OnChange: func(h checks.NodeHealth) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, in := range r.instances {
				in.deliverHealth(h)
			}
			for _, in := range r.instances {
				if _, ok := h.Services[in.id]; !ok && reg.Registered(in.id) {
					reg.Resync()
					break
				}
			}
		},
		OnReconnect: reg.Resync,
	}
	goBG(func() { w.Run(bg) })

	for _, sp := range specs {
		go r.Instance(sp.key).run()
	}
	close(r.ready)
	log.Info("supervising", "services", len(specs))
	ids := []string{selfID}
	for _, sp := range specs {
		if sp.svc.Leader != nil && sp.svc.Leader.Mode == "standby" {
			continue // registered only while it leads
		}
		ids = append(ids, r.Instance(sp.key).id)
	}
	goBG(func() { waitRegistered(bg, reg, ids, r.registered) })

	var lostErr error
	for {
		select {
		case req := <-r.applyc:
			cfg, slots := req.cfg, req.slots
			if cfg == nil {
				cfg = r.cfg
			}
			if req.keep {
				slots = r.slots
			}
			req.done <- r.apply(cfg, slots)
			continue
		case err := <-nodeLost:
			if ctx.Err() != nil || err == nil {
				continue
			}
			// Another supervisor holds this node now: its registrations
			// are its own. Kill the children and leave the catalog alone.
			lostErr = fmt.Errorf("lost the node lock: %w", err)
			log.Error("another supervisor took this node; killing every process and exiting without deregistering", "error", err)
			r.abandoned.Store(true)
			r.Kill()
		case <-ctx.Done():
		}
		break
	}
	log.Info("stopping")
	r.mu.Lock()
	order := append([]string{}, r.order...)
	r.mu.Unlock()
	r.stopAll(order)
	// A slow agent (a thousand deregistrations on a loaded machine) gets
	// time to take them all; an absent one fails each call at once; a
	// second signal cuts the wait short.
	dctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.killc:
			cancel()
		case <-dctx.Done():
		}
	}()
	if r.abandoned.Load() {
		return lostErr
	}
	if err := reg.Flush(dctx); err != nil {
		log.Warn("some services could not be deregistered", "error", err)
	}
	if r.opts.Stopped != nil {
		r.opts.Stopped()
	}
	// The node lock goes once the services are deregistered (a mariposa
	// starting now must not register what this one is still
	// deregistering), and just before mariposa's own registration:
	// deregistering that removes the liveness check the node's session is
	// bound to, which would free the lock by invalidation, with a lock
	// delay the next mariposa here would wait out. (Should one start in
	// between and register its liveness check, the deregistration below
	// removes it; its registry puts it back, and its lease takes a new
	// session.)
	if nl := nodeLock.Load(); nl != nil {
		if err := nl.Release(); err != nil {
			log.Warn("could not release the node lock; the next mariposa here waits out its lock delay", "error", err)
		}
	}
	if err := reg.Deregister(dctx, selfID); err != nil {
		log.Warn("could not deregister mariposa itself", "error", err)
	}
	log.Info("stopped")
	return nil
}

// secondSupervisorReap is how long after its liveness check turns critical
// the agent removes a second supervisor's registration (Consul's minimum is
// a minute).
const secondSupervisorReap = time.Minute

// waitRegistered closes done once every one of ids is registered. It
// checks every 50ms, from the first id not seen registered yet, so a
// thousand services cost a check or two per tick, not a thousand.
func waitRegistered(ctx context.Context, reg *checks.Registry, ids []string, done chan struct{}) {
	for {
		for len(ids) > 0 && reg.Registered(ids[0]) {
			ids = ids[1:]
		}
		if len(ids) == 0 {
			close(done)
			return
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// SetLivenessNote makes note's answer, when not empty, the lines below
// "alive" in mariposa's liveness check output, from the next heartbeat: the
// fleet says there which free slots this node waits for and why. An output
// change alone costs no Raft write (the agent syncs it to the catalog at
// check_update_interval, 5 minutes by default); the agent's own API shows
// it at once.
func (r *Runner) SetLivenessNote(note func() string) { r.note.Store(&note) }

// heartbeat keeps mariposa's liveness check passing, every third of its
// TTL, until ctx ends. Before the registry has registered the check the
// agent refuses the update; the next beat tries again.
func (r *Runner) heartbeat(ctx context.Context, checkID string) {
	every := r.opts.LivenessTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	// After an upgrade in place the first beat is at once: the previous
	// image's last one was up to a period before its exec.
	now := r.opts.Adopt != nil
	for {
		if !now {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		now = false
		out := "alive"
		if note := r.note.Load(); note != nil {
			if n := (*note)(); n != "" {
				out += "\n" + n
			}
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		err := r.opts.Client.Agent().UpdateTTLOpts(checkID, out, api.HealthPassing, (&api.QueryOptions{}).WithContext(cctx))
		cancel()
		if err == nil {
			r.beat(time.Now())
		}
	}
}

// instSpec is one instance to run: a service of the node's files, or a
// service in a count slot.
type instSpec struct {
	key  string
	svc  *schema.Service
	slot *Slot
}

// instanceSpecs lists the instances of the node's files (but for cluster
// units, which run only in slots) and of the slots, in start order: each
// after every instance of the services it depends on.
func instanceSpecs(cfg *schema.Config, slots []SlotInstance) []instSpec {
	merged := &schema.Config{}
	byName := map[string][]instSpec{}
	for _, svc := range cfg.Services {
		if svc.Placement != nil {
			continue
		}
		merged.Services = append(merged.Services, svc)
		byName[svc.Name] = []instSpec{{key: svc.Name, svc: svc}}
	}
	for i := range slots {
		si := &slots[i]
		name := si.Service.Name
		if _, local := byName[name]; local && byName[name][0].slot == nil {
			continue // the fleet layer refuses such a unit; never shadow a local service
		}
		if _, seen := byName[name]; !seen {
			merged.Services = append(merged.Services, si.Service)
		}
		byName[name] = append(byName[name], instSpec{key: instanceKey(si.Service, &si.Slot.SlotInfo), svc: si.Service, slot: &si.Slot})
	}
	var out []instSpec
	for _, name := range startOrder(merged) {
		list := byName[name]
		sort.SliceStable(list, func(i, j int) bool { return list[i].key < list[j].key })
		out = append(out, list...)
	}
	return out
}

// addInstance creates (but does not start) the instance of sp. The
// instance registers itself when it runs (a standby only once elected).
func (r *Runner) addInstance(sp instSpec) *Instance {
	svc := sp.svc
	id := checks.ServiceID(svc, r.node)
	if sp.slot != nil {
		id = slotServiceID(svc, &sp.slot.SlotInfo)
	}
	var data *render.Reader
	if len(svc.Depends) > 0 || len(svc.Templates) > 0 {
		// The instances of a unit on this node share its data (one
		// render of each file), each with a reader of its own.
		data = r.data.Service(svc).Reader()
	}
	log := r.log.With("node", r.node)
	var elector *leader.Elector
	if svc.Leader != nil {
		elector = leader.New(leader.Config{
			// The node's lease for this session_ttl and lock_delay: bound
			// to serfHealth and mariposa's liveness, so a dead or frozen
			// supervisor loses its locks within the liveness TTL.
			Lease: r.leases.Lease(svc.Leader.SessionTTL, svc.Leader.LockDelay),
			Key:   svc.Leader.Key, Value: []byte(id), Log: log.Named(svc.Name).Named("leader"),
		})
	}
	node, events := r.node, r.opts.Events
	in := newInstance(svc, id, childEnv(r.baseEnv, svc, id, r.node, r.addr), log, r.reg, r.opts.Sink, data, elector,
		func(e Event) { e.Node = node; events(e) }, r.opts.OnOutput)
	in.abandoned = &r.abandoned
	in.cgroups = r.opts.Cgroups
	if in.cgroups == nil && svc.Resources != nil {
		log.Warn("no control groups on this node: the service's resources are not applied", "service", svc.Name)
	}
	in.runAs()
	in.node = r.node
	in.key = sp.key
	if sp.slot != nil {
		in.inSlot(*sp.slot)
	}
	if f := r.pause.Load(); f != nil {
		in.setPause(pauseOf(*f, in))
	}
	if r.opts.ReloadGate != nil {
		in.gate = nodeSessionGate{gate: r.opts.ReloadGate, leases: r.leases}
	}
	if r.opts.ReloadGate == nil && slices.ContainsFunc(svc.Templates, coordinated) {
		r.noGateOnce.Do(func() {
			log.Warn("a template has a coordinate block, but this mariposa has no reload gate: its changes restart or signal at once", "service", svc.Name)
		})
	}
	in.register = func(role string, st checks.Result) {
		o := checks.RegOptions{SupervisorTTL: r.opts.SupervisorTTL, LivenessServiceID: r.selfID, NodeAddress: r.addr}
		if svc.Leader != nil && role != "" {
			o.ExtraMeta = map[string]string{"leader": role}
			switch {
			case role == "leader" && svc.Leader.Tag != "":
				o.ExtraTags = []string{svc.Leader.Tag}
			case role == "follower" && svc.Leader.FollowerTag != "":
				o.ExtraTags = []string{svc.Leader.FollowerTag}
			}
		}
		if sp.slot != nil {
			o.ID = id
			o.ExtraMeta = map[string]string{"slot": strconv.Itoa(sp.slot.Index), "term_index": strconv.FormatUint(sp.slot.Term, 10)}
		}
		r.reg.Register(checks.Registration(svc, r.node, o), st)
	}
	r.mu.Lock()
	r.instances[sp.key] = in
	r.order = append(r.order, sp.key)
	if a := r.pending[sp.key]; a != nil {
		delete(r.pending, sp.key)
		if a.ServiceID == id {
			in.adopt = a
		}
	}
	r.mu.Unlock()
	return in
}

// nodeSessionGate gives a request outside count slots the node lease's
// session to contend with (the one the node lock holds), as it is when the
// request is made.
type nodeSessionGate struct {
	gate   ReloadGate
	leases *lease.Manager
}

func (g nodeSessionGate) Acquire(ctx context.Context, req ReloadRequest) (func(), error) {
	if req.Session == "" && req.Slot == nil && g.leases != nil {
		req.Session = g.leases.Lease(0, 0).Session()
	}
	return g.gate.Acquire(ctx, req)
}

// removeStale deregisters what a previous run on this node left behind that
// this run will not register at once: a standby's service is registered only
// once it leads, an instance in a count slot only once its slot is held
// again, and a service no longer in the files never. A registration left by
// a crashed mariposa would otherwise linger, and pass again as soon as this
// mariposa's liveness check does. With AllowSecondSupervisor another
// mariposa may own the others, so only this configuration's standbys go.
// Best effort: without an agent there is nothing to clean.
func (r *Runner) removeStale(ctx context.Context, adopted map[string]*InstanceHandoff) {
	have, err := r.opts.Client.Agent().ServicesWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return
	}
	keep := map[string]bool{r.selfID: true}
	for _, a := range adopted {
		if a.Proc != nil { // an adopted leader is registered as one
			keep[a.ServiceID] = true
		}
	}
	for _, svc := range r.cfg.Services {
		if svc.Placement != nil {
			continue
		}
		if svc.Leader == nil || svc.Leader.Mode != "standby" {
			keep[checks.ServiceID(svc, r.node)] = true
		}
	}
	var stale []string
	for id, s := range have {
		if s.Meta[checks.ManagedByKey] != checks.ManagedByValue || keep[id] {
			continue
		}
		if s.Service == "mariposa" && id != checks.SupervisorServiceID(r.node) {
			// Another supervisor's own (-allow-second-supervisor): its
			// stop removes it, or its check's reaping if it crashed.
			continue
		}
		if r.opts.AllowSecondSupervisor {
			if svc := r.cfg.Service(s.Service); svc == nil || checks.ServiceID(svc, r.node) != id {
				continue
			}
		}
		stale = append(stale, id)
	}
	sort.Strings(stale)
	for _, id := range stale {
		r.log.Info("removing the registration a previous run left", "service_id", id)
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = r.reg.Deregister(dctx, id)
		cancel()
	}
}

// Apply makes cfg the desired configuration, the one entry point for every
// change (SIGHUP reloads today; deploys and gained or lost slots next):
// services that are gone stop and deregister, changed ones restart, new ones
// start, and unchanged ones keep running untouched. It returns after the
// changes are made.
func (r *Runner) Apply(ctx context.Context, cfg *schema.Config) (ApplyResult, error) {
	return r.send(ctx, applyReq{cfg: cfg, keep: true})
}

// ApplySlots makes slots the instances the fleet layer asks this node to
// run, beside the node's files; as Apply: withdrawn ones stop (and
// deregister) before it returns, so their slots may then be released.
func (r *Runner) ApplySlots(ctx context.Context, slots []SlotInstance) (ApplyResult, error) {
	return r.send(ctx, applyReq{slots: slots})
}

func (r *Runner) send(ctx context.Context, req applyReq) (ApplyResult, error) {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return ApplyResult{}, ctx.Err()
	}
	req.done = make(chan ApplyResult, 1)
	select {
	case r.applyc <- req:
	case <-ctx.Done():
		return ApplyResult{}, ctx.Err()
	}
	return <-req.done, nil
}

func (r *Runner) apply(cfg *schema.Config, slots []SlotInstance) ApplyResult {
	var res ApplyResult
	specs := instanceSpecs(cfg, slots)
	want := map[string]instSpec{}
	for _, sp := range specs {
		want[sp.key] = sp
	}
	var stop, restart []string
	for _, key := range r.Services() {
		in := r.Instance(key)
		sp, ok := want[key]
		switch {
		case !ok:
			stop = append(stop, key)
		case !sameService(sp.svc, in.svc) || !sameSlot(sp.slot, in.slot):
			restart = append(restart, key)
		default:
			res.Unchanged = append(res.Unchanged, key)
		}
	}
	gone := append(append([]string{}, stop...), restart...)
	r.stopAll(gone)
	for _, key := range gone {
		in := r.Instance(key)
		if in.data != nil {
			in.data.Close()
			r.data.Remove(in.svc)
		}
	}
	r.mu.Lock()
	for _, key := range gone {
		delete(r.instances, key)
	}
	r.order = nil
	for _, sp := range specs {
		if _, ok := r.instances[sp.key]; ok {
			r.order = append(r.order, sp.key)
		}
	}
	r.cfg, r.slots = cfg, slots
	r.mu.Unlock()
	for _, sp := range specs {
		if r.Instance(sp.key) != nil {
			continue
		}
		in := r.addInstance(sp)
		go in.run()
		if slices.Contains(restart, sp.key) {
			res.Restarted = append(res.Restarted, sp.key)
		} else {
			res.Started = append(res.Started, sp.key)
		}
	}
	res.Stopped = stop
	r.log.Info("applied", "started", res.Started, "restarted", res.Restarted, "stopped", res.Stopped, "unchanged", len(res.Unchanged))
	return res
}

// sameService: a and b run the same way. Placement (count, constraints,
// ...) is the fleet's business, not the process's: scaling a unit from 3
// to 2 must not restart the instances that stay.
func sameService(a, b *schema.Service) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	if (x.Placement == nil) != (y.Placement == nil) {
		return false // a local service becoming a cluster unit, or back
	}
	x.Placement, y.Placement = nil, nil
	return reflect.DeepEqual(&x, &y)
}

// sameSlot: the same hold (an exclusive slot lost and claimed again is a
// new term, and its instance starts anew).
// A non-exclusive slot claimed again after its node's session was lost
// (no Lost channel) is the same slot: its instance kept running without
// the lock and goes on (with the fencing token of its first term).
func sameSlot(a, b *Slot) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Lost == nil && b.Lost == nil {
		return a.Unit == b.Unit && a.Index == b.Index && a.Key == b.Key
	}
	return a.SlotInfo == b.SlotInfo
}

// stopAll stops the named instances, dependents before what they depend
// on: instances that nothing among them depends on go first, all at once,
// and so on down.
func (r *Runner) stopAll(keys []string) {
	cfg := &schema.Config{}
	names := map[string]bool{}
	byName := map[string][]string{}
	var order []string
	for _, key := range keys {
		in := r.Instance(key)
		if in == nil {
			continue
		}
		if !names[in.svc.Name] {
			names[in.svc.Name] = true
			cfg.Services = append(cfg.Services, in.svc)
			order = append(order, in.svc.Name)
		}
		byName[in.svc.Name] = append(byName[in.svc.Name], key)
	}
	for _, level := range stopLevels(cfg, order) {
		var wg sync.WaitGroup
		for _, name := range level {
			for _, key := range byName[name] {
				in := r.Instance(key)
				wg.Add(1)
				go func() { defer wg.Done(); in.Stop() }()
			}
		}
		wg.Wait()
	}
}

// agentIdentity asks the local agent for its node name and address. While no
// agent answers (for up to 2s) it falls back to the hostname, as Consul's
// own default node name is.
func (r *Runner) agentIdentity(ctx context.Context) (node, addr string, fromAgent bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		self, err := r.opts.Client.Agent().Self()
		if err == nil {
			if cfg, ok := self["Config"]; ok {
				node, _ = cfg["NodeName"].(string)
			}
			if m, ok := self["Member"]; ok {
				addr, _ = m["Addr"].(string)
			}
			if node != "" {
				return node, addr, true
			}
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		h, _ := os.Hostname()
		r.log.Warn("no Consul agent answered; using the hostname as node name", "node", h, "error", err)
		return h, "", false
	}
}

// startOrder sorts services so that each comes after the loaded services it
// depends on (validation already rejected cycles), keeping file order
// otherwise.
func startOrder(cfg *schema.Config) []string {
	var order []string
	done := map[string]bool{}
	var visit func(s *schema.Service, depth int)
	visit = func(s *schema.Service, depth int) {
		if done[s.Name] || depth > len(cfg.Services) {
			return
		}
		for _, d := range s.Depends {
			if dep := cfg.Service(d.Service); dep != nil && dep != s {
				visit(dep, depth+1)
			}
		}
		if !done[s.Name] {
			done[s.Name] = true
			order = append(order, s.Name)
		}
	}
	for _, s := range cfg.Services {
		visit(s, 0)
	}
	return order
}

// stopLevels groups services for stopping: a service stops only after every
// loaded service that depends on it has stopped.
func stopLevels(cfg *schema.Config, order []string) [][]string {
	level := map[string]int{}
	// In reverse start order every dependent is placed before its
	// dependencies, so one pass suffices.
	maxLevel := 0
	for i := len(order) - 1; i >= 0; i-- {
		name := order[i]
		l := 0
		for _, other := range cfg.Services {
			for _, d := range other.Depends {
				if d.Service == name && other.Name != name {
					if lv, ok := level[other.Name]; ok && lv+1 > l {
						l = lv + 1
					}
				}
			}
		}
		level[name] = l
		maxLevel = max(maxLevel, l)
	}
	levels := make([][]string, maxLevel+1)
	for _, name := range order {
		levels[level[name]] = append(levels[level[name]], name)
	}
	for _, l := range levels {
		sort.Strings(l)
	}
	return levels
}

// childBaseEnv is mariposa's environment without Consul credentials or
// systemd's notify socket.
func childBaseEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		// NOTIFY_SOCKET is systemd's for mariposa itself (Type=notify):
		// a child that speaks sd_notify must not answer for it.
		if k == "CONSUL_HTTP_TOKEN" || k == "CONSUL_HTTP_TOKEN_FILE" || k == "NOTIFY_SOCKET" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// childEnv adds the service's env and the MARIPOSA_* variables. Later
// entries win, so ours override inherited ones.
func childEnv(base []string, svc *schema.Service, id, node, agentAddr string) []string {
	env := append([]string{}, base...)
	keys := make([]string, 0, len(svc.Env))
	for k := range svc.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+svc.Env[k])
	}
	addr := svc.Address
	if addr == "" {
		addr = agentAddr
	}
	env = append(env,
		"MARIPOSA_SERVICE="+svc.Name,
		"MARIPOSA_SERVICE_ID="+id,
		"MARIPOSA_NODE="+node,
		"MARIPOSA_PORT="+strconv.Itoa(svc.Port),
		"MARIPOSA_ADDRESS="+addr,
	)
	return dedupeEnv(env)
}

// dedupeEnv keeps the last value of each key, in first-seen order.
func dedupeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

var errStopped = errors.New("the service has stopped")

// flushTimeout bounds the deregistrations still pending when mariposa
// stops.
const flushTimeout = 30 * time.Second

// Services lists the services of the running configuration, in start order.
func (r *Runner) Services() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string{}, r.order...)
}

// Restart restarts the named service's process now, outside its restart
// policy (mariposa restart), or starts it again if it has failed, completed
// or is backing off. by names who asked: the Actor of its events.
func (r *Runner) Restart(ctx context.Context, service, by string) error {
	in, err := r.lookup(service)
	if err != nil {
		return err
	}
	return in.operate(ctx, inRestart, by)
}

// ResetFailed clears the named service's restart history and starts it
// again if it has failed (mariposa reset; systemd's reset-failed). by names
// who asked: the Actor of its events.
func (r *Runner) ResetFailed(ctx context.Context, service, by string) error {
	in, err := r.lookup(service)
	if err != nil {
		return err
	}
	return in.operate(ctx, inReset, by)
}

func (r *Runner) lookup(service string) (*Instance, error) {
	select {
	case <-r.ready:
	default:
		return nil, errors.New("mariposa is still starting")
	}
	if in := r.Instance(service); in != nil {
		return in, nil
	}
	return nil, &UnknownServiceError{Service: service, Known: r.Services()}
}

// UnknownServiceError names a service this node does not run.
type UnknownServiceError struct {
	Service string
	Known   []string
}

func (e *UnknownServiceError) Error() string {
	return fmt.Sprintf("no service %q on this node (services: %s)", e.Service, strings.Join(e.Known, ", "))
}

// SetPause sets who is paused (mariposa pause): every instance, and each
// one made later, asks f. Pass nil to resume everything.
func (r *Runner) SetPause(f PauseFunc) {
	if f == nil {
		f = func(*schema.Service, *SlotInfo) Pause { return Pause{} }
	}
	r.pause.Store(&f)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.instances {
		in.setPause(pauseOf(f, in))
	}
}

func pauseOf(f PauseFunc, in *Instance) Pause {
	var slot *SlotInfo
	if in.slot != nil {
		slot = &in.slot.SlotInfo
	}
	return f(in.svc, slot)
}
