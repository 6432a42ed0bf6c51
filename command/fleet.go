package command

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// fleetMember is run -cluster's part in the fleet: the fleet's step
// machine (agentFleet: fleet/agent under fleet/executor) started once the
// runner is ready and registered, fed the runner's events, and stopped
// when the runner has stopped every instance, so it can release the slots
// cleanly. Without -cluster it only follows the fleet's pauses
// (cluster.FollowPauses).
type fleetMember struct {
	on     bool
	client *api.Client
	log    hclog.Logger
	// auditRetention: how long the fleet keeps its audit records (this
	// node deletes older days while it is the first live supervisor).
	auditRetention time.Duration
	// onClaim is told each claim this node makes (the claim delay metric).
	onClaim func(unit string, vacant time.Duration)
	// volumes is the node's volume store (nil: none); apiURL is where
	// other nodes fetch the snapshots this node hands off.
	volumes *volume.Store
	apiURL  string

	ag     atomic.Pointer[agentFleet]
	killed <-chan struct{} // the runner's Killed
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// adoptAgent: what the previous image's step machine handed over (an
	// upgrade in place; fleetagent_adopt.go); nil none.
	adoptAgent *executor.Handover
}

func newFleetMember(on bool, client *api.Client, log hclog.Logger) *fleetMember {
	return &fleetMember{on: on, client: client, log: log, done: make(chan struct{})}
}

func (m *fleetMember) start(r *supervisor.Runner, cfg *schema.Config) {
	if !m.on {
		// Outside the fleet, the node still follows its pauses (mariposa
		// pause holds its restarts too).
		close(m.done)
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		go func() {
			select {
			case <-r.Ready():
			case <-ctx.Done():
				return
			}
			cluster.FollowPauses(ctx, m.client, r.Node(), r, m.log.Named("pause"))
		}()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.killed = r.Killed()
	m.startAgent(ctx, r, cfg)
}

// waiting is what the fleet waits for (the step machine's:
// agentFleet.waiting), "" before it runs.
func (m *fleetMember) waiting() string {
	if a := m.ag.Load(); a != nil {
		return a.waiting()
	}
	return ""
}

// stats is the fleet's figures for the metrics (the executor's); false
// before it runs.
func (m *fleetMember) stats() (cluster.FleetStats, bool) {
	if a := m.ag.Load(); a != nil {
		return a.stats(), true
	}
	return cluster.FleetStats{}, false
}

// joinNotes joins the liveness check's notes that are not empty, one a
// line.
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "\n")
}

func (m *fleetMember) event(e supervisor.Event) {
	if a := m.ag.Load(); a != nil {
		a.event(e)
	}
}

func (m *fleetMember) setLocal(cfg *schema.Config) {
	if a := m.ag.Load(); a != nil {
		a.setLocal(cfg)
	}
}

// halt stops claiming (mariposa is stopping); the slots held stay held
// until stopped releases them.
func (m *fleetMember) halt() {
	if a := m.ag.Load(); a != nil {
		a.halt()
		return // its watches end with stopped
	}
	if m.cancel != nil {
		m.cancel()
	}
}

// stopped: every instance has stopped; give the slots up.
func (m *fleetMember) stopped() {
	m.once.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
		<-m.done
		// A second signal (the runner's Killed) cuts the release short.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-m.killed:
				cancel()
			case <-ctx.Done():
			}
		}()
		if a := m.ag.Load(); a != nil {
			// The slots are released once the agent has seen their
			// instances gone.
			a.release(ctx)
		}
	})
}

// startAgent runs the fleet's step machine once the runner is ready and
// registered (the session binds its liveness check).
func (m *fleetMember) startAgent(ctx context.Context, r *supervisor.Runner, cfg *schema.Config) {
	go func() {
		defer close(m.done)
		for _, c := range []<-chan struct{}{r.Ready(), r.Registered()} {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		a := startAgent(ctx, m.client, r, cfg, m.volumes, m.apiURL, m.onClaim, m.log, m.adoptAgent)
		m.ag.Store(a)
		go pruneAudit(ctx, a.ex.FirstLive, m.client, m.auditRetention, m.log.Named("audit"))
		// The step machine decides the pauses' claims, not the runner's
		// held restarts: those follow the pauses as on a node without
		// -cluster (its queue included).
		go cluster.FollowPauses(ctx, m.client, r.Node(), r, m.log.Named("pause"))
	}()
}
