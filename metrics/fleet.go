package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mariposa-sh/mariposa/cluster"
)

// fleetCollector reads the fleet member's Stats (cluster.FleetStats) at
// scrape time. Without a fleet (run without -cluster) it reports nothing.
type fleetCollector struct {
	src   func() (cluster.FleetStats, bool)
	start time.Time
	now   func() time.Time

	slots, nodeSlots, vacancy, resched, deployments, storm, live, paused, heldBack *prometheus.Desc

	// Reschedules are counted from the slots' reschedule trackers (they
	// live in the slot keys): the events this node made, newer than the
	// last one counted per slot, and newer than the process.
	mu      sync.Mutex
	counted map[string]time.Time // "<unit>/<k>" -> the last event counted
	total   map[string]float64   // unit -> reschedules counted
}

// Deployment statuses, each reported (0 when no deployment has it).
var deployStatuses = []string{cluster.DeployRunning, cluster.DeploySuccessful, cluster.DeployFailed, cluster.DeployCancelled, cluster.DeployUnknown}

func newFleetCollector(m *Metrics, src func() (cluster.FleetStats, bool)) *fleetCollector {
	return &fleetCollector{src: src, start: m.now(), now: m.now,
		slots: m.desc("mariposa_slots", "gauge",
			"Slots of each fleet unit as this node last read them, by kind: desired (the count), held (a node's session holds it), free (nobody holds it; lost with their node included), failed (failed or corrupt: until an operator acts).",
			"unit", "kind"),
		nodeSlots: m.desc("mariposa_node_slots", "gauge", "Slots of each unit this node holds.", "unit"),
		vacancy: m.desc("mariposa_slot_vacancy_seconds", "gauge",
			"Age of the oldest vacancy of each unit this node plans a claim for (0 when none): how long a free slot has been waiting.",
			"unit"),
		resched: m.desc("mariposa_reschedules_total", "counter",
			"Slots this node gave up for another node because their instance failed for good (restart.on_exhausted = \"reschedule\"), by unit.",
			"unit"),
		deployments: m.desc("mariposa_deployments", "gauge",
			"Deployments by the status of their desired spec: running, successful, failed, cancelled, unknown (no state).", "status"),
		storm: m.desc("mariposa_storm_brake", "gauge", "1 while the storm brake is engaged (takeovers of lost slots paused), else 0."),
		live:  m.desc("mariposa_fleet_live_nodes", "gauge", "Supervisors live in the fleet, as this node last read them."),
		paused: m.desc("mariposa_paused", "gauge",
			"Pauses in effect (mariposa pause), fleet-wide or of a unit, by scope: all, placement, deploy (0 when nothing is paused).", "scope"),
		heldBack: m.desc("mariposa_paused_actions", "gauge",
			"Automatic actions this node holds back because of a pause (its entries in mariposa queue)."),
		counted: map[string]time.Time{}, total: map[string]float64{},
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.slots, c.nodeSlots, c.vacancy, c.resched, c.deployments, c.storm, c.live, c.paused, c.heldBack} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	st, ok := c.src()
	if !ok {
		return
	}
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{}
	for _, u := range st.Units {
		gauge(c.slots, float64(u.Desired), u.Unit, "desired")
		gauge(c.slots, float64(u.Held), u.Unit, "held")
		gauge(c.slots, float64(u.Free), u.Unit, "free")
		gauge(c.slots, float64(u.Failed), u.Unit, "failed")
		mine := 0
		var oldest time.Time
		for _, s := range u.Slots {
			if s.Mine {
				mine++
			}
			if !s.VacantSince.IsZero() && (oldest.IsZero() || s.VacantSince.Before(oldest)) {
				oldest = s.VacantSince
			}
			id := u.Unit + "/" + strconv.Itoa(s.K)
			live[id] = true
			last, ok := c.counted[id]
			if !ok {
				last = c.start
			}
			for _, r := range s.Reschedules {
				if r.Node == st.Node && r.At.After(last) {
					c.total[u.Unit]++
					last = r.At
				}
			}
			c.counted[id] = last
		}
		gauge(c.nodeSlots, float64(mine), u.Unit)
		age := 0.0
		if !oldest.IsZero() {
			age = seconds(now.Sub(oldest))
		}
		gauge(c.vacancy, age, u.Unit)
		ch <- prometheus.MustNewConstMetric(c.resched, prometheus.CounterValue, c.total[u.Unit], u.Unit)
	}
	// A slot past its unit's count, or a removed unit's, is forgotten; its
	// unit's counter stays (a counter never goes back).
	for id := range c.counted {
		if !live[id] {
			delete(c.counted, id)
		}
	}
	byStatus := map[string]int{}
	for _, d := range st.Deployments {
		byStatus[d.Status]++
	}
	for _, s := range deployStatuses {
		gauge(c.deployments, float64(byStatus[s]), s)
	}
	storm := 0.0
	if st.StormBrake {
		storm = 1
	}
	gauge(c.storm, storm)
	gauge(c.live, float64(st.LiveNodes))
	byScope := map[string]int{}
	for _, p := range st.Pauses {
		byScope[p.Scope]++
	}
	for _, s := range pauseScopes {
		gauge(c.paused, float64(byScope[s]), s)
	}
	gauge(c.heldBack, float64(st.HeldBack))
}

// Pause scopes, each reported (0 when none is in effect).
var pauseScopes = []string{cluster.PauseAll, cluster.PausePlacement, cluster.PauseDeploy}
